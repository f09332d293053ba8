"""Admin access, framework-neutral: the `Access` an adapter hands `manga_page_analysis.web.api`.

Flask authenticates with `AdminAuth`, Django in `manga_page_analysis.web.django.views`; which
refusal gets which status: docs/admin-api.md.
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

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: no origin or CSRF check, no body read."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused and how to answer it."""

    status: int
    code: str
    message: str
    www_authenticate: str | None = None


WRONG_TOKEN: Final = Refusal(
    401, "unauthorized", "the bearer token is not valid", 'Bearer error="invalid_token"'
)
CROSS_SITE_REFUSAL: Final = Refusal(
    403, "cross_site", "a cross-site request may not change anything here"
)


@dataclass(frozen=True, slots=True)
class Access:
    """The outcome of authentication. `refusal` is `None` when the request may pass.

    `ambient`: let in by a credential a browser attaches by itself, even to
    requests other sites make (a session cookie), so unsafe methods need an
    origin check; a bearer token needs none. `who` names the caller in log lines.
    """

    refusal: Refusal | None = None
    ambient: bool = False
    who: str = "bearer token"


TOKEN_ACCESS: Final = Access()


def token_matches(presented: str | None, expected: str | None) -> bool:
    """Whether `presented` is `expected`, compared in constant time over the
    UTF-8 bytes (the one compare of the code base). With no expected token,
    or none presented, nothing matches."""
    if not presented or not expected:
        return False
    return hmac.compare_digest(
        presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8")
    )


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; `None` when there is none."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


class AdminAuth:
    """The Flask blueprint's gatekeeper. Built with a token, an `authorize`, or
    both; `ValueError` with neither (the admin API never serves openly) or with
    an empty token. An `authorize` that raises is a "no" (fail closed); the
    error is logged."""

    def __init__(self, *, token: str | None = None, authorize: Authorize | None = None) -> None:
        if token is None and authorize is None:
            raise ValueError(
                "the admin API needs a token or an authorize callable; it never serves openly"
            )
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ValueError("the admin token must be a non-empty string")
        if authorize is not None and not callable(authorize):
            raise ValueError("authorize must be a callable taking the request")
        self._token = token
        self._authorize = authorize

    def check(self, authorization: str | None, request: Any) -> Access:
        """Either way in lets a request in: the token first, then `authorize`."""
        presented = bearer_token(authorization)
        if token_matches(presented, self._token):
            return TOKEN_ACCESS
        if self._authorize is not None:
            try:
                authorized = bool(self._authorize(request))
            except Exception:
                logger.exception("the admin authorize callable raised; refusing the request")
                authorized = False
            if authorized:
                return Access(ambient=True, who="the host's authorize")
        if self._token is not None and presented is not None:
            return Access(WRONG_TOKEN)
        if self._authorize is not None:
            challenge = "Bearer" if self._token is not None else None
            return Access(Refusal(403, "forbidden", "not allowed to use the admin API", challenge))
        return Access(Refusal(401, "unauthorized", "send Authorization: Bearer <token>", "Bearer"))
