"""Who may use the admin API under Django: the bearer token or a staff session.

- `Authorization: Bearer <PAGE_ANALYSIS["ADMIN_TOKEN"]>` (`token_matches`,
  constant time): in, without a CSRF check (no cookie is involved);
- else a logged-in, active staff user: in, unsafe methods CSRF-checked;
- else a logged-in user who is not staff: 403;
- else 401 with `WWW-Authenticate: Bearer` (a wrong token included).
"""

from __future__ import annotations

from typing import Final

from django.http import HttpRequest

from app.web.auth import TOKEN_ACCESS, WRONG_TOKEN, Access, Refusal, bearer_token, token_matches

NO_CREDENTIALS: Final = Refusal(
    401,
    "unauthorized",
    "log in as a staff user or send Authorization: Bearer <token>",
    "Bearer",
)
NOT_STAFF: Final = Refusal(403, "forbidden", "only staff users may use the admin API")


def check_access(request: HttpRequest, admin_token: str | None) -> Access:
    """Either credential lets a request in: the token first (it needs no CSRF
    check), then a staff session (a wrong token from a staff user's browser
    still gets in through the session, CSRF-checked)."""
    presented = bearer_token(request.headers.get("Authorization"))
    if token_matches(presented, admin_token):
        return TOKEN_ACCESS
    user = getattr(request, "user", None)  # absent without AuthenticationMiddleware
    if user is not None and user.is_authenticated:
        if user.is_active and user.is_staff:
            return Access(ambient=True, who=f"staff user {user.get_username()}")
        return Access(NOT_STAFF)
    return Access(WRONG_TOKEN if presented is not None else NO_CREDENTIALS)
