"""Signals, exit codes and process exit for the commands: the library installs no handler
(a host web server owns its signals); the CLI does, on the main thread. Long-running
commands (`run-worker`, `demo`, Django's `run_worker`) stop with `GracefulStop`; short
ones are interrupted (`interrupt_on_stop_signals`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Final, NoReturn

EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
"""Bad usage or configuration."""
EXIT_INTERRUPTED: Final = 130
"""Exit code after an interrupting signal (128 + SIGINT, as shells report Ctrl-C)."""

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C, `kill`/systemd/docker stop, and the terminal closing."""

logger = logging.getLogger("manga_page_analysis.cli")


class GracefulStop:
    """The first stop signal (SIGINT, SIGTERM or SIGHUP) calls every registered `stop`
    (and any registered later, at once). A second one calls every registered `now`
    when there is one (a runner then releases its jobs at once and the command
    ends as usual), else exits the process at once with 130; so does a third.

    The handler runs on the main thread, so a command's main thread waits in short
    slices (`Runner.wait_stopping` in a loop, `Runner.join`; why:
    `worker.runner.JOIN_SLICE_SECONDS`), never for the whole grace period in one go."""

    def __init__(self, what_happens: str) -> None:
        self.what_happens = what_happens
        self.requested = threading.Event()
        self._again = False
        self._stops: list[Callable[[], None]] = []
        self._nows: list[Callable[[], None]] = []

    def on_stop(self, stop: Callable[[], None], now: Callable[[], None] | None = None) -> None:
        """Call `stop` at the first signal, or now if it has come already; `now` at
        the second (the hard stop)."""
        self._stops.append(stop)
        if now is not None:
            self._nows.append(now)
        if self.requested.is_set():
            stop()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            if self._nows and not self._again:
                self._again = True
                logger.warning("second %s: stopping now (again to exit at once)", name)
                threading.Thread(target=self._stop_now, name="hard-stop", daemon=True).start()
                return
            logger.warning("%s %s: exiting now", "another" if self._again else "second", name)
            _flush()
            os._exit(EXIT_INTERRUPTED)
        logger.info("%s received: %s (again to exit at once)", name, self.what_happens)
        self.requested.set()
        # Not here: a handler runs between two bytecodes of the main thread, which
        # may hold the very lock a `stop` takes (an Event's, while waiting on it).
        threading.Thread(target=self._stop_all, name="graceful-stop", daemon=True).start()

    def _stop_all(self) -> None:
        for stop in list(self._stops):
            stop()

    def _stop_now(self) -> None:
        for now in list(self._nows):
            now()

    @contextmanager
    def installed(self) -> Iterator[GracefulStop]:
        """Handle the stop signals for the duration of the block (main thread only)."""
        previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def interrupt_on_stop_signals() -> None:
    """SIGTERM and SIGHUP raise `KeyboardInterrupt`, as SIGINT does: `finally` blocks
    and atexit (which stops the embedded database) run, and the CLI says one line and
    exits 130."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.default_int_handler)


def exit_process(code: int) -> NoReturn:
    """End the process with `code`, as a command's entry point does.

    Threads that a command abandoned (an OCR call cannot be interrupted; the
    runner gives its job back and leaves the call to finish) may still be in
    ONNX Runtime's C++ code. If the interpreter finalised under them, they
    would be torn down mid-call and the C++ runtime would abort the process
    (`terminate called without an active exception`, exit 134). So when such
    a thread is still alive, do the clean-up that matters here (the embedded
    database, the logs) and leave without finalising.
    """
    strays = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.main_thread() and thread.is_alive()
    ]
    if not strays:
        sys.exit(code)
    logger.debug("leaving %d thread(s) behind: %s", len(strays), ", ".join(t.name for t in strays))
    from manga_page_analysis import devdb

    devdb.release()
    _flush()
    os._exit(code)


def _flush() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
