"""Who may use the admin API under Django: the bearer token or a staff session."""

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
    """The token first (in, with no CSRF check: no cookie is involved), then a
    logged-in active staff user (in, unsafe methods CSRF-checked; a wrong token
    from a staff user's browser still gets in this way). Any other logged-in
    user is a 403; anyone else a 401."""
    presented = bearer_token(request.headers.get("Authorization"))
    if token_matches(presented, admin_token):
        return TOKEN_ACCESS
    user = getattr(request, "user", None)  # absent without AuthenticationMiddleware
    if user is not None and user.is_authenticated:
        if user.is_active and user.is_staff:
            return Access(ambient=True, who=f"staff user {user.get_username()}")
        return Access(NOT_STAFF)
    return Access(WRONG_TOKEN if presented is not None else NO_CREDENTIALS)
