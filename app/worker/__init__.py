"""The generic worker: a runner that leases jobs of any kind and runs their handlers;
it knows no job kind (page analysis plugs in from `app.analysis`)."""

from app.worker.events import EventBus, JobEvent
from app.worker.handler import JobContext, JobHandler
from app.worker.noop import NoopHandler
from app.worker.observer import RunnerObserver
from app.worker.readiness import ReadinessGate
from app.worker.runner import Runner

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
