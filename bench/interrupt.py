"""Stopping a run on Ctrl-C or SIGTERM, reliably.

The signal handler raises `KeyboardInterrupt` at once, which unwinds through
every context manager (so the throwaway server is stopped and deleted). An
exception raised while Python runs a weakref callback or `__del__` is
swallowed, though, so the handler also records the request, and
`checkpoint()` (called between benchmark cases) raises it again.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_requested = threading.Event()


def _handler(signum: int, frame: FrameType | None) -> None:
    _requested.set()
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> None:
    """Handle SIGTERM, and SIGINT unless the shell made us ignore it (a background job)."""
    signal.signal(signal.SIGTERM, _handler)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _handler)


def checkpoint() -> None:
    """Raise `KeyboardInterrupt` if a stop was requested and not yet acted on."""
    if _requested.is_set():
        raise KeyboardInterrupt("stop requested")
