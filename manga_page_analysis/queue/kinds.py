"""Job kinds: the name in `payload ->> 'kind'`, the pydantic model its payload
decodes into, and its dedup rule, registered by name. The queue knows no kind
of its own: the seed's four are registered in `payloads.py` like a host's.

A kind is registered once per process, before jobs of it are leased; the
registry is a table of names, filled by imports, never by I/O.
"""

from __future__ import annotations

import json
import re
import threading
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from manga_page_analysis.errors import PayloadError
from manga_page_analysis.models import DEDUP_SLOTS, Base
from manga_page_analysis.storable import json_holds_nul

KIND_NAME_MAX_LENGTH: Final = 64
"""Longest kind name: it is written in every job row and in every wake-up notification."""

KIND_NAME_PATTERN: Final = re.compile(r"[a-z][a-z0-9_]*")
"""Kind names: a lower-case letter, then lower-case letters, digits and `_`
(safe inside SQL literals, index names, log lines and terminals)."""

RESERVED_KIND_NAMES: Final = frozenset({"unknown"})
"""Names no kind may take: `unknown` is the admin's own bucket for rows with no kind."""


def check_kind_name(name: object) -> str:
    """`name` when it is a valid kind name, else `ValueError` saying the rule."""
    if (
        not isinstance(name, str)
        or len(name) > KIND_NAME_MAX_LENGTH
        or not KIND_NAME_PATTERN.fullmatch(name)
    ):
        shown = repr(name)[:80]
        raise ValueError(
            f"invalid job kind {shown}: 1 to {KIND_NAME_MAX_LENGTH} characters, a lower-case "
            "letter then lower-case letters, digits or '_'"
        )
    return name


class Payload(BaseModel):
    """Base class of every job payload: a frozen pydantic model with a `kind`
    field whose default is its kind's name (`kind: Literal["x"] = "x"`).
    Unknown keys in stored JSON are ignored, so old rows keep decoding."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: str

    def to_json(self) -> dict[str, Any]:
        """The wire/storage form: plain JSON types, `kind` included."""
        return self.model_dump(mode="json")


def payload_json(payload: Payload) -> str:
    """The JSON text stored for `payload`. `PayloadError` when Postgres could not
    store it (a NUL character, common in scraped text, or a lone surrogate, which
    is no UTF-8): refused before any SQL, so the caller's transaction stays usable."""
    try:
        text = payload.model_dump_json()
    except PydanticSerializationError as exc:
        # pydantic cannot encode a surrogate as UTF-8: that is the only way dumping
        # a validated model fails.
        raise PayloadError(
            f"{payload.kind} payload refused: it holds text that is no UTF-8 "
            f"(a lone surrogate): {str(exc)[:200]}"
        ) from None
    if json_holds_nul(text):
        raise PayloadError(
            f"{payload.kind} payload refused: it holds a NUL character (\\u0000), "
            "which Postgres cannot store; remove it before enqueueing"
        )
    return text


@dataclass(frozen=True, slots=True)
class JobKind:
    """A registered kind. `dedup_field` names the payload field of which at
    most one job may be pending or running at a time, enforced by the unique
    index `dedup_index` (`dedup_index_sql()` writes it, for a migration)."""

    name: str
    payload: type[Payload]
    dedup_field: str | None = None
    dedup_index: str | None = None

    def dedup_index_sql(self, table: str = "crawler_jobs") -> str | None:
        """`CREATE UNIQUE INDEX` for the dedup rule (`None` without one)."""
        if self.dedup_field is None or self.dedup_index is None:
            return None
        return (
            f"CREATE UNIQUE INDEX {self.dedup_index} ON {table} "
            f"((payload ->> '{self.dedup_field}')) "
            f"WHERE payload ->> 'kind' = '{self.name}' AND state IN ('pending', 'running')"
        )


_FIELD_PATTERN: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_lock = threading.Lock()
_kinds: dict[str, JobKind] = {}
_adapter: TypeAdapter[Any] | None = None


def register_kind(
    payload: type[Payload], *, dedup_field: str | None = None, dedup_index: str | None = None
) -> JobKind:
    """Register `payload`'s kind (the default of its `kind` field). Registering
    the same model again returns the same `JobKind`; another model under a
    registered name is a `ValueError`, as is a bad name or dedup rule."""
    global _adapter
    field = payload.model_fields.get("kind")
    name = check_kind_name(None if field is None else field.default)
    if typing.get_args(field.annotation if field else None) != (name,):
        raise ValueError(f'{payload.__name__}.kind must be declared `Literal["{name}"] = "{name}"`')
    if (dedup_field is None) != (dedup_index is None):
        raise ValueError("a dedup rule needs both dedup_field and dedup_index")
    if name in RESERVED_KIND_NAMES:
        raise ValueError(f"job kind name {name!r} is reserved (the admin's bucket for no kind)")
    for part in (dedup_field, dedup_index):
        if part is not None and not _FIELD_PATTERN.fullmatch(part):
            raise ValueError(f"invalid dedup field or index name {part!r}")
    if dedup_index is not None and dedup_index in _schema_names(exclude_slot=(name, dedup_field)):
        raise ValueError(
            f"dedup_index {dedup_index!r} is the name of one of this package's tables, "
            "indexes or constraints; choose another"
        )
    kind = JobKind(name, payload, dedup_field, dedup_index)
    with _lock:
        known = _kinds.get(name)
        if known is not None:
            if known != kind:
                raise ValueError(f"job kind {name!r} is already registered differently")
            return known
        _kinds[name] = kind
        _adapter = None
    return kind


def _schema_names(exclude_slot: tuple[str, str | None]) -> set[str]:
    """Names of the package's tables, indexes and constraints, but the dedup
    index of the slot `(kind, field)` itself (the seed's kinds register theirs)."""
    names: set[str] = {"alembic_version"}
    for table in Base.metadata.tables.values():
        names.add(table.name)
        for item in (*table.indexes, *table.constraints):
            name = getattr(item, "name", None)
            if isinstance(name, str):
                names.add(name)
    names.difference_update(index for index, slot in DEDUP_SLOTS.items() if slot == exclude_slot)
    return names


def unregister_kind(name: str) -> None:
    """Forget a registered kind (a test's, a plugin's being reloaded); its rows stay."""
    global _adapter
    with _lock:
        if _kinds.pop(name, None) is not None:
            _adapter = None


def registered_kinds() -> list[JobKind]:
    """Every registered kind, in registration order."""
    with _lock:
        return list(_kinds.values())


def job_kind(name: str) -> JobKind | None:
    """The registered kind called `name`, if any."""
    return _kinds.get(name)


def require_kinds(names: Iterable[str]) -> list[str]:
    """`names` as a list; `ValueError` naming any that is not registered."""
    names = list(names)
    unknown = [name for name in names if name not in _kinds]
    if unknown:
        raise ValueError(
            f"job kind(s) not registered: {', '.join(map(repr, unknown))} "
            "(register_kind before enqueueing or leasing them)"
        )
    return names


def _payload_adapter() -> TypeAdapter[Any]:
    """One adapter over every registered model, tagged by `kind`: stored JSON
    text is parsed and validated in one step (rebuilt after a registration)."""
    global _adapter
    adapter = _adapter
    if adapter is None:
        with _lock:
            models = tuple(kind.payload for kind in _kinds.values())
            tagged: Any = models[0]
            if len(models) > 1:
                tagged = typing.Annotated[typing.Union[models], Field(discriminator="kind")]  # noqa: UP007
            adapter = _adapter = TypeAdapter(tagged)
    return adapter


def decode_payload(data: Any) -> Payload:
    """Decode stored JSON (a dict, or JSON text) into its kind's registered model;
    `PayloadError` if it can't (an unregistered kind, a missing field)."""
    try:
        adapter = _payload_adapter()
        if isinstance(data, str | bytes):
            payload: Payload = adapter.validate_json(data)
        else:
            payload = adapter.validate_python(data)
        return payload
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            location = ".".join(str(part) for part in error["loc"]) or "payload"
            problems.append(f"{location}: {error['msg']}")
        raise PayloadError("invalid job payload: " + "; ".join(problems)) from exc


def salvage_payload(data: str) -> Payload:
    """What can be read of stored payload text that does not decode (a poison
    row), so that its end can be recorded where its kind keeps results: its
    kind's model without the fields that failed validation (their defaults
    instead), or else a bare `Payload` naming only the kind (`""` if none)."""
    try:
        raw = json.loads(data)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        return Payload.model_construct(kind="")
    named = raw.get("kind")
    kind = named if isinstance(named, str) else ""
    known = job_kind(kind)
    if known is not None:
        try:
            known.payload.model_validate(raw)
        except ValidationError as exc:
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            kept = {key: value for key, value in raw.items() if key not in bad or key == "kind"}
            try:
                return known.payload.model_validate(kept)
            except ValidationError:
                pass
    return Payload.model_construct(kind=kind)
