"""Job fields on log records: every line logged while a job is handled names it.

Inside `job_log_context(...)`, a `JobFieldsFilter` on a handler copies the
fields onto each record as attributes (e.g. `record.job_id`), so a JSON
formatter can emit them without every log call passing `extra=`.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_fields: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "job_log_fields", default=MappingProxyType({})
)


class job_log_context:
    """Add `fields` (job_id, kind, attempt, page_id, ...) to log records in this block.

    Nested blocks add to (and may override) the outer fields; `None` values are dropped.
    A class rather than a generator: the runner enters one or two per job.
    """

    __slots__ = ("_fields", "_token")
    _token: contextvars.Token[Mapping[str, Any]]

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __enter__(self) -> None:
        merged = {**_fields.get(), **{k: v for k, v in self._fields.items() if v is not None}}
        self._token = _fields.set(merged)

    def __exit__(self, *exc_info: object) -> None:
        _fields.reset(self._token)


class JobFieldsFilter(logging.Filter):
    """Copies the current job fields onto every record it sees (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _fields.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True
