"""Page-analysis events: the worker's `EventBus` on the `analysis_events` channel."""

from __future__ import annotations

from typing import Final

from sqlalchemy import Engine

from manga_page_analysis.worker.events import EventBus

ANALYSIS_CHANNEL: Final = "analysis_events"
"""The `NOTIFY` channel a web process can `LISTEN` on."""


def analysis_event_bus(engine: Engine | None, *, background: bool = False) -> EventBus:
    """An event bus that publishes to `NOTIFY analysis_events` when given an engine
    (from a notifier thread with `background=True`: see `EventBus`)."""
    return EventBus(engine, ANALYSIS_CHANNEL, background=background)
