"""The storage seam: the `Storage` protocol every store meets, the byte-capped read
they share, and the rule for keys.

Keys (`pages.storage_key`, relative `/`-separated paths) come from the database
and are untrusted: an empty one, one with a NUL byte or a lone surrogate, an
absolute one, one with a `..` or `.` component, an empty component (`a//b`) or a
trailing `/`, or one longer than S3's 1,024 bytes is refused with `StorageKeyError`
by every store. The same key then names the same object in a folder and in
S3 (which would read `a/` as an empty "folder" object and may fold `a//b` into `a/b`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from manga_page_analysis.errors import ObjectTooLarge, StorageKeyError

MAX_KEY_BYTES: Final = 1024
"""Longest key, in UTF-8 bytes (S3's limit on an object key, prefix included)."""
READ_CHUNK_BYTES: Final = 256 * 1024
"""Size of one read while enforcing a byte cap."""


@runtime_checkable
class Storage(Protocol):
    """Where page images live. Implementations raise `StorageError` subclasses only."""

    def read_bytes(self, key: str, max_bytes: int) -> bytes:
        """Read the whole object, refusing (`ObjectTooLarge`) one larger than `max_bytes`."""
        ...

    def write_bytes(self, key: str, data: bytes, *, content_type: str) -> None:
        """Store `data` under `key`, replacing what was there. All or nothing: a
        reader sees the old object or the whole new one, never a part."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object under `key`; a missing object is not an error."""
        ...


class Readable(Protocol):
    """What `read_capped` reads: a binary stream's `read(size)`."""

    def read(self, size: int, /) -> bytes: ...


def read_capped(stream: Readable, max_bytes: int, *, label: str) -> bytes:
    """Read `stream` to its end, raising `ObjectTooLarge` (naming `label`) once more
    than `max_bytes` arrive; at most `max_bytes + 1` bytes are ever read."""
    buffer = bytearray()
    # Ask for one byte past the cap: getting it is the proof that the object is too large.
    remaining = max_bytes + 1
    while remaining > 0:
        chunk = stream.read(min(READ_CHUNK_BYTES, remaining))
        if not chunk:
            return bytes(buffer)
        buffer += chunk
        remaining -= len(chunk)
    raise ObjectTooLarge(f"object {label} exceeds the cap of {max_bytes} bytes")


@dataclass(frozen=True, slots=True)
class StoreReadiness:
    """A store's answer to `readiness()`: `reason` says why it is not ready; `refused`
    that the store refused us (credentials, rights, no such bucket): configuration,
    which waiting will not fix."""

    ready: bool
    reason: str = ""
    refused: bool = False


@runtime_checkable
class ProbedStorage(Storage, Protocol):
    """A store that can be down (a network service): workers lease nothing while
    `readiness()` says not ready, so an outage burns no job's attempt."""

    def readiness(self) -> StoreReadiness:
        """Whether the store answers now. Quick (a short timeout, no retries); never raises."""
        ...


def check_key(key: str) -> None:
    """`StorageKeyError` for a key that is not a plain relative path."""
    if not isinstance(key, str) or not key:
        raise StorageKeyError(f"storage key must be a non-empty string, got {key!r}")
    if "\x00" in key:
        raise StorageKeyError(f"storage key {key!r} contains a NUL byte")
    if key.startswith(("/", "\\")) or os.path.isabs(key):
        raise StorageKeyError(f"storage key {key!r} is absolute; keys are relative to the root")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise StorageKeyError(f"storage key {key!r} is not valid UTF-8 text") from None
    if size > MAX_KEY_BYTES:
        raise StorageKeyError(f"storage key {key[:80]!r}... is longer than {MAX_KEY_BYTES} bytes")
    # A `..` component could still land inside the root after resolution, but no
    # legitimate key needs one, and refusing it up front makes the error clearer.
    parts = key.replace("\\", "/").split("/")
    if ".." in parts:
        raise StorageKeyError(f"storage key {key!r} contains a '..' component")
    if "." in parts or "" in parts:
        raise StorageKeyError(
            f"storage key {key!r} has an empty or '.' component (a trailing '/', '//' or "
            "'/./'): S3 would store or read it as another object"
        )
