"""Who may use the admin API under Django: the bearer token or a staff session.

- `Authorization: Bearer <PAGE_ANALYSIS["ADMIN_TOKEN"]>` (constant time):
  in, without a CSRF check (no cookie is involved);
- else a logged-in, active staff user: in, unsafe methods CSRF-checked;
- else a logged-in user who is not staff: 403;
- else 401 with `WWW-Authenticate: Bearer` (a wrong token included).
"""

from __future__ import annotations

import enum
import hmac

from django.http import HttpRequest

from app.web.auth import bearer_token


class Access(enum.Enum):
    # The first item keeps members with the same answer distinct (an Enum
    # would otherwise make SESSION an alias of TOKEN).
    TOKEN = ("token", 200, "", "", None)
    SESSION = ("session", 200, "", "", None)
    NO_CREDENTIALS = (
        "no_credentials",
        401,
        "unauthorized",
        "log in as a staff user or send Authorization: Bearer <token>",
        "Bearer",
    )
    WRONG_TOKEN = (
        "wrong_token",
        401,
        "unauthorized",
        "the bearer token is not valid",
        'Bearer error="invalid_token"',
    )
    NOT_STAFF = ("not_staff", 403, "forbidden", "only staff users may use the admin API", None)

    def __init__(
        self, _name: str, status: int, code: str, message: str, challenge: str | None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.challenge = challenge

    @property
    def refused(self) -> bool:
        return self.status != 200

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.challenge} if self.challenge else {}


def token_matches(presented: str | None, expected: str | None) -> bool:
    """Constant-time comparison; with no configured token nothing matches."""
    if not presented or not expected:
        return False
    return hmac.compare_digest(
        presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8")
    )


def check_access(request: HttpRequest, admin_token: str | None) -> Access:
    """Either credential lets a request in: the token first (it needs no CSRF
    check), then a staff session (a wrong token from a staff user's browser
    still gets in through the session, CSRF-checked)."""
    presented = bearer_token(request.headers.get("Authorization"))
    if token_matches(presented, admin_token):
        return Access.TOKEN
    user = getattr(request, "user", None)  # absent without AuthenticationMiddleware
    if user is not None and user.is_authenticated:
        return Access.SESSION if user.is_active and user.is_staff else Access.NOT_STAFF
    return Access.WRONG_TOKEN if presented is not None else Access.NO_CREDENTIALS
