"""A runner's one id: who leads the maintenance (`queue_leader.leader_id`) and who
leased a job (`crawler_jobs.leased_by`)."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Final

RUNNER_ID_MAX_CHARS: Final = 200
"""A runner's id is at most this long, whatever its host name and runner name."""


def new_runner_id(name: str) -> str:
    """`host:pid:name:random`, unique per runner (two runners in a process differ):
    an operator reads from it which machine and process ran a job. A long host or
    name is cut, never the random suffix that keeps the id unique."""
    suffix = ":" + uuid.uuid4().hex[:8]
    where = f"{socket.gethostname()}:{os.getpid()}:{name}"
    return where[: RUNNER_ID_MAX_CHARS - len(suffix)] + suffix
