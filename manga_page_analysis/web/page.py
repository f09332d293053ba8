"""The admin page: one HTML file, shipped as package data, served at the mount point."""

from __future__ import annotations

import functools
import html
from importlib import resources


@functools.cache
def _template() -> str:
    return (
        resources.files("manga_page_analysis.web")
        .joinpath("templates/admin.html")
        .read_text("utf-8")
    )


def admin_page_html(*, login_url: str | None = None, token_accepted: bool = True) -> str:
    """The admin page's HTML (the file is read once per process).

    `login_url`: where a visitor the API refuses can sign in (the page then
    offers that link); `token_accepted=False`: no bearer token is configured,
    so the page does not ask for one.
    """
    tags = ""
    if login_url is not None:
        tags += f'<meta name="page-analysis-login-url" content="{html.escape(login_url)}">\n'
    if not token_accepted:
        tags += '<meta name="page-analysis-token" content="none">\n'
    return _template().replace("</head>", tags + "</head>", 1)
