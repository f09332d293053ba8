"""Embedding in a web backend: the admin API, live events and the admin page.

Framework-neutral pieces live here (`auth`, `events`, `page`); `flask` and
`django` adapt them. Importing this package imports no web framework.
"""
