"""Transitional: the batch names as they were imported before every state change
moved to `app.queue.states` (single = batch of one). Import from `app.queue`."""

from app.queue.enqueueing import enqueue_many
from app.queue.states import ack_done_many, release_many, renew_many

__all__ = ["ack_done_many", "enqueue_many", "release_many", "renew_many"]
