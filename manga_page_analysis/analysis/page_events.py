"""Page-analysis events: the worker's `EventBus` on the `analysis_events` channel."""

from __future__ import annotations

from typing import Final

from sqlalchemy import Engine

from manga_page_analysis.db import channel_name, schema_of
from manga_page_analysis.worker.reports.events import EventBus

ANALYSIS_CHANNEL: Final = "analysis_events"
"""The `NOTIFY` channel a web process can `LISTEN` on."""


def analysis_event_bus(engine: Engine | None, *, background: bool = False) -> EventBus:
    """An event bus that publishes to `NOTIFY analysis_events` when given an engine
    (from a notifier thread with `background=True`: see `EventBus`). With the
    tables in another schema than `public`, the channel is `<schema>.analysis_events`."""
    channel = ANALYSIS_CHANNEL if engine is None else analysis_channel(engine)
    return EventBus(engine, channel, background=background)


def analysis_channel(engine: Engine) -> str:
    """The events' `NOTIFY` channel for the tables `engine` uses."""
    return channel_name(ANALYSIS_CHANNEL, schema_of(engine))
