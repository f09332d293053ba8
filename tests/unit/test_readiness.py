"""The readiness gate's log lines: named by the gate, with the probe's reason,
once when it closes, again when the reason changes or it stays closed, and
INFO rather than WARNING for an expected wait."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from manga_page_analysis.worker.gates.readiness import ReadinessGate


@dataclass(frozen=True)
class Answer:
    ready: bool
    reason: str = ""
    starting: bool = False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _gate_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == "manga_page_analysis.worker.gates.readiness"
    ]


def test_closed_gate_says_why_once_then_reminds_and_says_when_it_opens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="manga_page_analysis.worker.gates.readiness")
    answers = [Answer(False, "refused the connection")] * 5 + [
        Answer(False, "answered 503: Loading model"),
        Answer(True),
    ]
    clock = Clock()
    gate = ReadinessGate(
        lambda: answers.pop(0), name="crawler proxy", poll_seconds=2, remind_seconds=60, clock=clock
    )

    for now in (0, 2, 4):  # closed: said once
        clock.now = now
        assert gate.check() is False
    assert gate.reason == "refused the connection"
    lines = _gate_lines(caplog)
    assert lines == [
        (
            logging.WARNING,
            "crawler proxy is not ready: refused the connection; "
            "leasing nothing, retrying every 2 s",
        )
    ]

    clock.now = 61  # still closed a minute later: said again, with how long
    assert gate.check() is False
    clock.now = 63
    assert gate.check() is False
    lines = _gate_lines(caplog)
    assert len(lines) == 2
    assert "refused the connection (for 61 s)" in lines[1][1]

    clock.now = 65  # a new reason is news
    assert gate.check() is False
    assert "answered 503: Loading model" in _gate_lines(caplog)[2][1]

    clock.now = 67
    assert gate.check() is True
    assert _gate_lines(caplog)[3] == (logging.INFO, "crawler proxy is ready; leasing jobs")
    assert gate.reason == ""
    assert all("vision" not in line for _level, line in _gate_lines(caplog))


def test_an_expected_wait_is_info_and_a_plain_bool_probe_still_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="manga_page_analysis.worker.gates.readiness")
    gate = ReadinessGate(
        lambda: Answer(False, "the OCR models are loading", starting=True), name="in-process OCR"
    )
    assert gate.check() is False
    assert _gate_lines(caplog) == [
        (
            logging.INFO,
            "in-process OCR is not ready: the OCR models are loading; "
            "leasing nothing, retrying every 2 s",
        )
    ]

    caplog.clear()
    answers = [False, True]
    plain = ReadinessGate(lambda: answers.pop(0), name="thing")
    assert plain.check() is False
    assert plain.check() is True
    assert [level for level, _line in _gate_lines(caplog)] == [logging.WARNING, logging.INFO]
    assert _gate_lines(caplog)[0][1].startswith("thing is not ready; leasing nothing")


@dataclass(frozen=True)
class PartAnswer:
    ready: bool
    reason: str = ""
    starting: bool = False
    part: str = ""


def test_an_answer_that_names_the_part_down_is_logged_under_that_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="manga_page_analysis.worker.gates.readiness")
    answers = [
        PartAnswer(False, "refused our credentials (403 SignatureDoesNotMatch)", part="page store"),
        PartAnswer(True),
    ]
    gate = ReadinessGate(lambda: answers.pop(0), name="in-process OCR", poll_seconds=2)
    assert gate.check() is False
    assert (gate.part, gate.reason) == (
        "page store",
        "refused our credentials (403 SignatureDoesNotMatch)",
    )
    assert gate.check() is True and gate.part == ""
    assert _gate_lines(caplog)[0] == (
        logging.WARNING,
        "page store is not ready: refused our credentials (403 SignatureDoesNotMatch); "
        "leasing nothing, retrying every 2 s",
    )
