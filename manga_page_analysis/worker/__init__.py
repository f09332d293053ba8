"""The generic worker: a runner that leases jobs of any kind and runs their handlers;
it knows no job kind (page analysis plugs in from `manga_page_analysis.analysis`)."""

from manga_page_analysis.worker.gates.readiness import ReadinessGate
from manga_page_analysis.worker.handler import JobContext, JobHandler
from manga_page_analysis.worker.noop import NoopHandler
from manga_page_analysis.worker.reports.events import EventBus, JobEvent
from manga_page_analysis.worker.reports.observer import RunnerObserver
from manga_page_analysis.worker.runner import Runner

__all__ = [
    "EventBus",
    "JobContext",
    "JobEvent",
    "JobHandler",
    "NoopHandler",
    "ReadinessGate",
    "Runner",
    "RunnerObserver",
]
