"""Embedding in a web backend: the admin API, live events and the admin page.

`flask` and `django` adapt the rest; importing this package imports no web framework.
"""
