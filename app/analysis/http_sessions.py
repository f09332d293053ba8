"""One `requests.Session` per thread, for HTTP/1.1 keep-alive to the model server.

A session keeps its connections open between requests (urllib3's pool), so a
worker thread that analyses page after page reuses one TCP connection instead
of opening a new one per page. Each thread gets its own session: `requests`
does not promise that a session is safe to share between threads, and a
connection of one's own never waits for another thread's request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import requests


class ThreadSessions:
    """Hands each thread its own session, made by `factory`, and closes them all on `close`.

    The session of a thread that has ended is closed when the next session is
    made (a runner replaces a stuck worker thread: its connection must not stay
    open for good). A thread that asks again after `close` gets a new session,
    closed by the next `close`.
    """

    def __init__(self, factory: Callable[[], requests.Session] = requests.Session) -> None:
        self._factory = factory
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: dict[threading.Thread, requests.Session] = {}
        self._generation = 0

    def get(self) -> requests.Session:
        """The calling thread's session."""
        held: tuple[int, requests.Session] | None = getattr(self._local, "held", None)
        if held is not None and held[0] == self._generation:
            return held[1]
        session = self._factory()
        with self._lock:
            ended = [thread for thread in self._open if not thread.is_alive()]
            orphans = [self._open.pop(thread) for thread in ended]
            self._open[threading.current_thread()] = session
            self._local.held = (self._generation, session)
        for orphan in orphans:
            orphan.close()
        return session

    def close(self) -> None:
        """Close every session handed out so far (their pooled connections with them)."""
        with self._lock:
            sessions = list(self._open.values())
            self._open.clear()
            self._generation += 1
        for session in sessions:
            session.close()
