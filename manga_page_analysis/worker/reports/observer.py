"""What a runner reports about its jobs, for metrics (or anything else that counts).

The runner calls these from its own threads, after the fact was committed;
an observer must be quick and thread-safe, and whatever it raises is logged
and ignored (it never affects a job).
"""

from __future__ import annotations

from typing import Final, Protocol

OUTCOMES: Final = ("done", "failed", "dead", "released")
"""How a job's run ends: acked done, failed with a retry to come, dead-lettered,
or released (shutdown, reclaim)."""


class RunnerObserver(Protocol):
    def job_finished(self, kind: str, outcome: str, duration_seconds: float) -> None:
        """A leased job of `kind` ended with `outcome` (one of `OUTCOMES`)."""
        ...

    def lease_lost(self, kind: str) -> None:
        """A heartbeat found a lease of `kind` gone; that job's result is discarded."""
        ...

    def leader_changed(self, leading: bool) -> None:
        """This runner became (`True`) or stopped being the leader that runs the
        queue's maintenance. Optional: an observer without it hears nothing."""
        ...

    def breaker_changed(self, kind: str, is_open: bool) -> None:
        """The breaker of `kind` opened (`True`: this runner leases none of it for a
        while) or closed. Optional: an observer without it hears nothing."""
        ...
