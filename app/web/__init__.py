"""Embedding in a web backend: the admin API, live events and the admin page.

Framework-neutral pieces live here: `api` (the route table and the one
handler), `auth`, `events` (the SSE streams) and `page`; `flask` and `django`
only adapt them. Importing this package imports no web framework.
"""
