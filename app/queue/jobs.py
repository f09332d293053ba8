"""The jobs repository as it was imported before the queue was split by concern.

Transitional: these names keep importing from here while callers move to
`app.queue` (or the module that defines each: `table`, `enqueueing`,
`leasing`, `states`). Nothing is defined here.
"""

from app.db import Conn
from app.queue.enqueueing import enqueue, enqueue_many
from app.queue.leasing import lease, lease_kinds
from app.queue.states import (
    Reclaim,
    ack_dead,
    ack_done,
    ack_failed,
    holds,
    reap_done,
    reclaim_expired,
    reclaim_orphaned,
    release,
    release_unowned,
    renew,
)
from app.queue.table import (
    CRASH_LOOP_ERROR,
    DEAD,
    DONE,
    KIND,
    PENDING,
    RECLAIM_LIMIT,
    RUNNING,
    WAKEUP_CHANNEL,
    Lease,
    jobs,
    payload_field,
    text_literal,
)

__all__ = [
    "CRASH_LOOP_ERROR",
    "DEAD",
    "DONE",
    "KIND",
    "PENDING",
    "RECLAIM_LIMIT",
    "RUNNING",
    "WAKEUP_CHANNEL",
    "Conn",
    "Lease",
    "Reclaim",
    "ack_dead",
    "ack_done",
    "ack_failed",
    "enqueue",
    "enqueue_many",
    "holds",
    "jobs",
    "lease",
    "lease_kinds",
    "payload_field",
    "reap_done",
    "reclaim_expired",
    "reclaim_orphaned",
    "release",
    "release_unowned",
    "renew",
    "text_literal",
]
