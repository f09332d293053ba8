"""The no-op job for sections 2 and 3: a kind of the benchmark's own
(`bench_noop`, registered like a host's kind) and the project's `NoopHandler`.
`Observed` is the handler with a hook called when `execute` starts, which is
how the benchmark counts jobs and times pickup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

from manga_page_analysis.queue import Lease, Payload, register_kind
from manga_page_analysis.worker import JobContext, NoopHandler

BENCH_KIND: Final = "bench_noop"


class BenchNoop(Payload):
    """A no-op job; `marker` tells jobs apart (pickup times them by it)."""

    kind: Literal["bench_noop"] = BENCH_KIND
    marker: str


def register_bench_kind() -> None:
    """Register `bench_noop` in this process (again is fine)."""
    register_kind(BenchNoop)


def noop_handler() -> tuple[NoopHandler, str]:
    """A no-op handler of the benchmark's kind (registered here) and its name."""
    register_bench_kind()
    return NoopHandler(BENCH_KIND), "manga_page_analysis.worker.noop.NoopHandler"


class Observed(NoopHandler):
    """A no-op handler of `inner`'s kind that calls `on_execute(lease)` as `execute`
    starts. A subclass, not a wrapper that delegates by `__getattr__`: the runner
    reads a handler's attributes per job, and a delegating wrapper made each read
    a Python call that the benchmark then charged to the runner."""

    def __init__(self, inner: NoopHandler, on_execute: Callable[[Lease], None]) -> None:
        super().__init__(inner.kind)
        self._on_execute = on_execute

    def execute(self, item: Any, ctx: JobContext) -> None:
        self._on_execute(ctx.lease)
        super().execute(item, ctx)


def payload_for(kind: str, marker: str) -> BenchNoop:
    """A payload of the no-op `kind` that carries `marker`."""
    if kind != BENCH_KIND:
        raise ValueError(f"the no-op handler's kind is {BENCH_KIND!r}, not {kind!r}")
    return BenchNoop(marker=marker)


def marker_of(payload: Payload) -> str:
    """The marker `payload_for` put in."""
    if isinstance(payload, BenchNoop):
        return payload.marker
    raise ValueError(f"not a no-op payload: {payload!r}")
