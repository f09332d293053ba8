"""What every analyzer offers: the `Analyzer` protocol, its `Readiness` and its result.

`VisionClient` (`manga_page_analysis.analysis.model_server.client`) and `OcrAnalyzer`
(`manga_page_analysis.analysis.reader.ocr_analyzer`) meet it. The
wiring calls `start` once before the runner leases, `readiness` repeatedly from the gate's
thread, `analyze` from the worker threads concurrently, and `close` once after the runner has
stopped (only whoever built the analyzer closes it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from manga_page_analysis.analysis.analyzer.answer import Analysis
from manga_page_analysis.analysis.analyzer.prepared_image import PreparedImage
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.repos.page_analysis import AnalysisRecord


@dataclass(frozen=True, slots=True)
class Readiness:
    """One readiness probe's answer, a `ProbeAnswer` (`manga_page_analysis.worker.gates.readiness`): `reason` says
    why it is not ready, and `starting` that this is expected (a model still loading);
    `part` names what is down when it is not the analyzer itself (the page store)."""

    ready: bool
    reason: str = ""
    starting: bool = False
    part: str = ""


READY: Readiness = Readiness(ready=True)
"""The answer of an analyzer that may be given work."""


@dataclass(frozen=True)
class VisionResult:
    """A successful analysis. `model` is the model that answered (the server's own
    name for it, if it gave one); `usage` is the server's token count, if any;
    `attempts` counts the HTTP requests it took (1 for in-process analyzers)."""

    analysis: Analysis
    model: str
    usage: Mapping[str, Any] | None = None
    attempts: int = 1

    def record(self) -> AnalysisRecord:
        """What `manga_page_analysis.repos.page_analysis.save_done` stores: the analysis's fields and the model."""
        return AnalysisRecord(model=self.model, **vars(self.analysis))


class Analyzer(Protocol):
    """Turns a prepared page image into a `VisionResult`. Thread-safe: worker threads
    share one analyzer."""

    model: str
    """The configured model, recorded on a failed analysis (a result names its own)."""
    name: str
    """What log lines call it: the URL it probes, or what runs in-process."""

    def start(self, on_failure: Callable[[ServiceError], None]) -> None:
        """Begin whatever must happen before the first job (loading a model), without
        blocking; `on_failure` hears an error that makes the analyzer unusable for good.
        Until that work is done, `readiness` says not ready, `starting`."""
        ...

    def readiness(self) -> Readiness:
        """Whether jobs may be leased for it now. Quick (bounded by a short timeout)
        and never raises: any failure is a not-ready answer with its reason."""
        ...

    def analyze(
        self,
        image: PreparedImage,
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        job_label: str = "",
    ) -> VisionResult:
        """Analyse one page before `deadline` (a `time.monotonic()` value).

        Raises `DispatchTimeout` past the deadline, `VisionCancelled` once `cancel`
        is set, `ImageError` for an image it cannot read, and other `VisionError`s
        for everything else; every message is written for the person who reads
        `last_error`. `job_label` names the job in log lines.
        """
        ...

    def close(self) -> None:
        """Release what `start` and `analyze` hold (connections, threads); may be
        called from any thread, once the analyzer is no longer used."""
        ...
