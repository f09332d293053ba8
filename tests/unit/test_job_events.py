"""Job events name one of the known types."""

import uuid

import pytest

from app.worker.events import EVENT_TYPES, JobEvent


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_known_event_types_are_accepted(event_type: str) -> None:
    event = JobEvent(event_type, uuid.uuid4(), {"subject": 1})
    assert event.to_json()["type"] == event_type


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown job event type 'finished'"):
        JobEvent("finished", uuid.uuid4(), {})
