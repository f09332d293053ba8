"""The admin page: one HTML file, shipped as package data, served at the mount point."""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import re
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


@functools.cache
def page_security_policy() -> str:
    """The page's `Content-Security-Policy`: its own inline script(s) only (by
    hash, computed from the template, so an edit of the page keeps working),
    fetches to its own origin, images from its own blobs; no framing, no plugin,
    no form posting elsewhere. Inline styles are allowed: the page positions
    boxes and bars with `style` attributes."""
    scripts = re.findall(r"<script>(.*?)</script>", _template(), flags=re.DOTALL)
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in scripts
    )
    script_sources = hashes or "'none'"
    return (
        "default-src 'none'; "
        f"script-src {script_sources}; "
        "style-src 'unsafe-inline'; img-src 'self' blob: data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
