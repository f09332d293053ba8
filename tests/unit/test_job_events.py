"""Job events name one of the five types the product promises, and nothing else."""

import uuid

import pytest

from manga_page_analysis.worker.reports.events import EVENT_TYPES, EventBus, JobEvent

# Written out, not read from EVENT_TYPES: the list is the contract (live events,
# the admin stream, hosts' subscribers), so dropping one must fail here.
PROMISED = ("started", "completed", "failed", "cancelled", "skipped")


@pytest.mark.parametrize("event_type", PROMISED)
def test_every_promised_event_type_is_accepted(event_type: str) -> None:
    event = JobEvent(event_type, uuid.uuid4(), {"subject": 1})
    assert event.to_json()["type"] == event_type


def test_there_is_no_other_event_type() -> None:
    assert sorted(EVENT_TYPES) == sorted(PROMISED)


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
