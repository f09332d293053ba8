"""Admin access: a bearer token compared in constant time, and/or a host's `authorize` callable.

Framework-neutral: the adapters pass the `Authorization` header and the
framework's request object, and turn a refusal into a JSON error response.
The rules (DESIGN "Embedding in a web backend"):

- a valid `Authorization: Bearer <token>` lets a request in;
- an `authorize(request)` that returns true lets a request in;
- otherwise: a bearer token that was presented but is wrong -> 401; no
  token presented and an `authorize` that said no -> 403; no token
  presented and no `authorize` -> 401. Every 401 (and a 403 when a token
  would also have been accepted) carries `WWW-Authenticate: Bearer`.

An `authorize` that raises is a "no" (fail closed); the error is logged.

A request let in by `authorize` alone usually rides on a cookie, which a
browser sends along with requests other sites make: so such a request that
changes something (POST, ...) must come from the same origin (`cross_site`),
the way Django's CSRF check guards a staff session. A bearer token is never
sent by a browser on its own, so token requests need no such check.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

logger = logging.getLogger(__name__)

Authorize = Callable[[Any], bool]
"""`authorize(request) -> bool`: the host's own check (a logged-in admin, say)."""

BEARER: Final = "bearer"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused and how to answer it."""

    status: int
    code: str
    message: str
    www_authenticate: str | None

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.www_authenticate} if self.www_authenticate else {}


class AdminAuth:
    """The admin API's gatekeeper. Built with a token, an `authorize`, or both;
    `ValueError` with neither (the admin API never serves openly) or with an
    empty token."""

    def __init__(self, *, token: str | None = None, authorize: Authorize | None = None) -> None:
        if token is None and authorize is None:
            raise ValueError(
                "the admin API needs a token or an authorize callable; it never serves openly"
            )
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ValueError("the admin token must be a non-empty string")
        if authorize is not None and not callable(authorize):
            raise ValueError("authorize must be a callable taking the request")
        self._token = token.encode() if token is not None else None
        self._authorize = authorize

    @property
    def accepts_token(self) -> bool:
        return self._token is not None

    def check(self, authorization: str | None, request: Any) -> Refusal | None:
        """`None` when the request may pass, else the `Refusal` to answer with."""
        presented = bearer_token(authorization)
        if self._token is not None and presented is not None and _same(presented, self._token):
            return None
        if self._authorize is not None and self._authorized(request):
            return None
        if self._token is not None and presented is not None:
            return Refusal(
                401, "unauthorized", "the bearer token is not valid", 'Bearer error="invalid_token"'
            )
        if self._authorize is not None:
            challenge = "Bearer" if self._token is not None else None
            return Refusal(403, "forbidden", "not allowed to use the admin API", challenge)
        return Refusal(401, "unauthorized", "send Authorization: Bearer <token>", "Bearer")

    def token_valid(self, authorization: str | None) -> bool:
        """Whether the header carries the configured bearer token."""
        presented = bearer_token(authorization)
        return self._token is not None and presented is not None and _same(presented, self._token)

    def _authorized(self, request: Any) -> bool:
        assert self._authorize is not None
        try:
            return bool(self._authorize(request))
        except Exception:
            logger.exception("the admin authorize callable raised; refusing the request")
            return False


SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})

CROSS_SITE_REFUSAL: Final = Refusal(
    403, "cross_site", "a cross-site request may not change anything here", None
)


def cross_site(
    method: str, *, sec_fetch_site: str | None, origin: str | None, own_origin: str
) -> bool:
    """Whether an unsafe request came from another site, as far as the browser says.

    `Sec-Fetch-Site` decides when present (only `same-origin` and `none`, a
    typed URL, pass); else an `Origin` must equal `own_origin`
    (`scheme://host[:port]` of the request); a request with neither is not
    from a browser page and passes.
    """
    if method.upper() in SAFE_METHODS:
        return False
    if sec_fetch_site:
        return sec_fetch_site.strip().lower() not in ("same-origin", "none")
    if origin:
        return origin.strip().rstrip("/").lower() != own_origin.rstrip("/").lower()
    return False


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; `None` when there is none."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != BEARER:
        return None
    value = value.strip()
    return value or None


def _same(presented: str, expected: bytes) -> bool:
    # Constant time over the bytes; a non-ASCII header value still compares safely.
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected)
