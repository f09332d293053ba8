"""Job fields on log records: every line logged while a job is handled names it.

Inside `job_log_context(...)`, a `JobFieldsFilter` on a handler copies the
fields onto each record as attributes (e.g. `record.job_id`), so a JSON
formatter can emit them without every log call passing `extra=`.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping
from typing import Any


class _Frame:
    """One `job_log_context` block: the enclosing block's frame and this one's
    fields, merged the first time a record asks for them. The runner enters a
    block or two per job and most blocks log nothing, so nothing is merged
    until a line is logged."""

    __slots__ = ("_merged", "_own", "_parent")

    def __init__(self, parent: _Frame | None, own: Mapping[str, Any]) -> None:
        self._parent = parent
        self._own = own
        self._merged: Mapping[str, Any] | None = None

    def fields(self) -> Mapping[str, Any]:
        merged = self._merged
        if merged is None:
            own = self._own
            base = self._parent.fields() if self._parent is not None else {}
            # Two threads may merge at once: both get the same fields.
            merged = self._merged = {
                **base,
                **{key: value for key, value in own.items() if value is not None},
            }
        return merged


_frame: contextvars.ContextVar[_Frame | None] = contextvars.ContextVar(
    "job_log_fields", default=None
)


def current_fields() -> Mapping[str, Any]:
    """The job fields of the innermost `job_log_context` block (empty outside one)."""
    frame = _frame.get()
    return {} if frame is None else frame.fields()


class job_log_context:
    """Add `fields` (job_id, kind, attempt, page_id, ...) to log records in this block.

    Nested blocks add to (and may override) the outer fields; `None` values are dropped.
    The fields come as keywords, or as one mapping (`job_log_context(job.log_fields)`,
    which is not copied). A class rather than a generator: the runner enters one
    or two per job.
    """

    __slots__ = ("_fields", "_token")
    _token: contextvars.Token[_Frame | None]

    def __init__(self, fields: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        if fields is None:
            fields = more
        elif more:
            fields = {**fields, **more}
        self._fields = fields

    def __enter__(self) -> None:
        self._token = _frame.set(_Frame(_frame.get(), self._fields))

    def __exit__(self, *exc_info: object) -> None:
        _frame.reset(self._token)


class JobFieldsFilter(logging.Filter):
    """Copies the current job fields onto every record it sees (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in current_fields().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True
