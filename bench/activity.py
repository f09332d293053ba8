"""Sampling `pg_stat_activity` during a run: is the server busy, waiting on locks,
or waiting for the client?

A background thread looks at the given backends (by pid) every `interval`
seconds. A backend that is `idle` or `idle in transaction` is
waiting for its client (here: Python threads sharing one GIL); an `active`
one is working, or `waiting` on the `wait_event` it reports (`Lock` means row or
transaction locks, `LWLock` internal contention, `IO`/`WALSync` the disk).
"""

from __future__ import annotations

import threading
from collections import Counter
from types import TracebackType

from sqlalchemy import Engine, text

SAMPLE_SQL = text(
    """
    SELECT state, wait_event_type, wait_event
    FROM pg_stat_activity
    WHERE pid = ANY(:pids)
    """
)

_SHORT_STATES = {"idle in transaction": "idle-in-txn"}


class ActivitySampler:
    """`with ActivitySampler(engine, pids): ...` samples those backends until the block ends."""

    def __init__(self, engine: Engine, pids: list[int], interval: float = 0.05) -> None:
        self._engine = engine
        self._pids = pids
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-activity", daemon=True)
        self.states: Counter[str] = Counter()
        self.waits: Counter[str] = Counter()
        self.samples = 0

    def __enter__(self) -> ActivitySampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with self._engine.connect() as conn:
            while not self._stop.wait(self._interval):
                with conn.begin():
                    rows = conn.execute(SAMPLE_SQL, {"pids": self._pids}).all()
                for row in rows:
                    self.samples += 1
                    state = _SHORT_STATES.get(row.state, row.state or "?")
                    if state == "active" and row.wait_event_type:
                        self.waits[f"{row.wait_event_type}:{row.wait_event}"] += 1
                        state = "waiting"
                    self.states[state] += 1

    def summary(self) -> str:
        """E.g. `idle-in-txn 50%, waiting 30%, active 20%; waits: IO:WALSync 25%`."""
        if not self.samples:
            return "no samples"
        share = ", ".join(
            f"{state} {count * 100 // self.samples}%" for state, count in self.states.most_common()
        )
        waits = ", ".join(
            f"{event} {count * 100 // self.samples}%" for event, count in self.waits.most_common(2)
        )
        return share + (f"; waits: {waits}" if waits else "")
