"""Job events name one of the known types."""

import uuid

import pytest

from manga_page_analysis.worker.events import EVENT_TYPES, EventBus, JobEvent


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_known_event_types_are_accepted(event_type: str) -> None:
    event = JobEvent(event_type, uuid.uuid4(), {"subject": 1})
    assert event.to_json()["type"] == event_type


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown job event type 'finished'"):
        JobEvent("finished", uuid.uuid4(), {})


def test_an_unsubscribed_callback_hears_no_more_events() -> None:
    bus = EventBus()  # no engine: in-process subscribers only
    heard: list[tuple[str, str]] = []
    stop_first = bus.subscribe(lambda event: heard.append(("first", event.type)))
    bus.subscribe(lambda event: heard.append(("second", event.type)))

    bus.publish(JobEvent("started", uuid.uuid4(), {}))
    stop_first()
    stop_first()  # twice is harmless
    bus.publish(JobEvent("completed", uuid.uuid4(), {}))

    assert heard == [("first", "started"), ("second", "started"), ("second", "completed")]
