"""Running one measurement in a subprocess, so its CPU, GIL and memory are its own.

Parent side: `Child.start(system, role, args)` runs `python -m bench.child
SYSTEM ROLE ARGS_JSON`. The child prints JSON lines on stdout: `{"ready": true}`
when it is set up (roles that wait for the parent), then `{"result": ...}`.
Closing the child's stdin tells it to stop (`stop_requested` in the child).

Child side: the role function of the system module runs with its `args`
dict and returns the result dict; `peak_rss_mb()` is its own peak RSS.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
from typing import Any, Final

SYSTEMS: Final = {
    "ours": "bench.ours",
    "pgqueuer": "bench.peer_pgqueuer",
    "procrastinate": "bench.peer_procrastinate",
    "pipeline": "bench.pipeline",
}
"""Queue systems have a function per role: enqueue, drain, pickup_worker, pickup_produce;
bench.pipeline has `analyze`."""


class ChildFailed(RuntimeError):
    pass


class Child:
    """A running child; `wait_ready()`, then `stop()` / `result()`."""

    def __init__(self, process: subprocess.Popen[str], label: str) -> None:
        self._process = process
        self.label = label

    @classmethod
    def start(cls, system: str, role: str, args: dict[str, Any]) -> Child:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.child", system, role, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return cls(process, f"{system} {role}")

    def _message(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith("{"):
                message: dict[str, Any] = json.loads(line)
                return message
        code = self._process.wait()
        raise ChildFailed(f"{self.label} ended (exit {code}) without a result")

    def wait_ready(self) -> None:
        if "ready" not in self._message():
            raise ChildFailed(f"{self.label} sent a result before it was ready")

    def stop(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()

    def result(self, timeout: float = 600.0) -> dict[str, Any]:
        """The child's result; stops it first (closing stdin) if still running."""
        try:
            if self._process.stdin and not self._process.stdin.closed:
                self.stop()
            message = self._message()
            self._process.wait(timeout)
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
        result: dict[str, Any] = message["result"]
        return result


def run(system: str, role: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run a role that needs no coordination, to its end."""
    return Child.start(system, role, args).result()


# --- the child's side ------------------------------------------------------

stop_requested = threading.Event()
"""Set when the parent closes our stdin."""


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def ready() -> None:
    send({"ready": True})


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _watch_stdin() -> None:
    sys.stdin.read()
    stop_requested.set()


def main() -> None:
    system, role, raw_args = sys.argv[1:4]
    # Run as `python -m bench.child`, this module is `__main__`; the roles import
    # `bench.child`, a second copy, and wait on *its* `stop_requested`.
    from bench import child as imported

    threading.Thread(target=imported._watch_stdin, name="bench-stdin", daemon=True).start()
    module = importlib.import_module(SYSTEMS[system])
    result = getattr(module, role)(json.loads(raw_args))
    send({"result": result})


if __name__ == "__main__":
    main()
