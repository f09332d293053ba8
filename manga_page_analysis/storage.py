"""Page image storage: the `Storage` protocol and `LocalStorage`, a folder on disk.

Keys (`pages.storage_key`, relative `/`-separated paths) come from the database
and are untrusted: one that escapes the root (`..`, absolute, a symlink out), is
empty or holds a NUL byte is refused with `StorageKeyError`. Only regular files
are served: reading a FIFO or a device could block a worker forever.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final, Protocol, runtime_checkable

if TYPE_CHECKING:
    from manga_page_analysis.config import Settings

from manga_page_analysis.errors import ObjectNotFound, ObjectTooLarge, StorageError, StorageKeyError

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


def read_capped(stream: BinaryIO, max_bytes: int, *, label: str) -> bytes:
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


class LocalStorage:
    """Objects are files under `root` (resolved on every call: a missing root
    reads as a missing object); a key is a path relative to it. Symlinks are
    followed as long as the final target stays under the root."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r})"

    def _checked_key(self, key: str) -> None:
        """`StorageKeyError` for a key that is not a plain relative path."""
        if not isinstance(key, str) or not key:
            raise StorageKeyError(f"storage key must be a non-empty string, got {key!r}")
        if "\x00" in key:
            raise StorageKeyError(f"storage key {key!r} contains a NUL byte")
        if key.startswith(("/", "\\")) or os.path.isabs(key):
            raise StorageKeyError(f"storage key {key!r} is absolute; keys are relative to the root")
        # A `..` component could still land inside the root after resolution, but no
        # legitimate key needs one, and refusing it up front makes the error clearer.
        if ".." in key.replace("\\", "/").split("/"):
            raise StorageKeyError(f"storage key {key!r} contains a '..' component")

    def path_for(self, key: str) -> Path:
        """The resolved path of `key`, checked to be under the root: `StorageKeyError`
        for a malformed or escaping key, `ObjectNotFound` when nothing is there."""
        self._checked_key(key)
        root = self.root.resolve()
        try:
            # strict=True follows every symlink, so the containment check below
            # sees where the key really leads, not where it claims to.
            path = (root / key).resolve(strict=True)
        except FileNotFoundError:
            raise ObjectNotFound(f"no object stored under key {key!r}") from None
        except (NotADirectoryError, RuntimeError) as exc:
            # NotADirectoryError: a path component is a file; RuntimeError: a symlink loop.
            raise ObjectNotFound(f"no object stored under key {key!r}: {exc}") from None
        except OSError as exc:
            raise StorageError(f"cannot resolve key {key!r}: {exc}") from exc
        if not path.is_relative_to(root):
            raise StorageKeyError(f"storage key {key!r} resolves outside the storage root")
        return path

    def open(self, key: str) -> BinaryIO:
        """Open the regular file stored under `key` for binary reading; the caller closes it."""
        path = self.path_for(key)
        # O_NONBLOCK keeps open() from blocking on a FIFO, which is refused just below;
        # it has no effect on regular files. O_NOFOLLOW: `path` is already resolved,
        # so a symlink here means it was swapped in since.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise ObjectNotFound(f"no object stored under key {key!r}") from None
        except IsADirectoryError:
            raise StorageKeyError(f"key {key!r} names a directory, not an object") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageKeyError(f"storage key {key!r} changed while opening") from None
            raise StorageError(f"cannot open object {key!r}: {exc}") from exc
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                # Permanent (no retry): a key naming a folder or a FIFO
                # will not name an image later.
                kind = "directory" if stat.S_ISDIR(mode) else "special file"
                raise StorageKeyError(f"key {key!r} names a {kind}, not a regular file")
            # Back to blocking reads: the descriptor is a regular file.
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def read_bytes(self, key: str, max_bytes: int) -> bytes:
        """The whole object under `key`; `ObjectTooLarge` if it is larger than `max_bytes`."""
        with self.open(key) as stream:
            # The size only gives a quick refusal; the read is capped too, because
            # a file can grow after it was stat'ed.
            size = os.fstat(stream.fileno()).st_size
            if size > max_bytes:
                raise ObjectTooLarge(
                    f"object {key!r} ({size} bytes) exceeds the cap of {max_bytes} bytes"
                )
            try:
                return read_capped(stream, max_bytes, label=repr(key))
            except OSError as exc:
                raise StorageError(f"cannot read object {key!r}: {exc}") from exc

    def _target(self, key: str) -> Path:
        """Where `key` is written: its folder created and checked to be under the root
        (the object itself may not exist yet, so `path_for` cannot be used)."""
        self._checked_key(key)
        root = self.root.resolve()
        relative = Path(key)
        try:
            folder = root / relative.parent
            folder.mkdir(parents=True, exist_ok=True)
            folder = folder.resolve(strict=True)
        except OSError as exc:
            raise StorageError(f"cannot make the folder of key {key!r}: {exc}") from exc
        if not folder.is_relative_to(root):
            raise StorageKeyError(f"storage key {key!r} resolves outside the storage root")
        return folder / relative.name

    def write_bytes(self, key: str, data: bytes, *, content_type: str) -> None:
        """Written to a temporary file beside the target, then renamed over it (atomic on
        POSIX). Files carry no content type: `content_type` is the caller's to keep."""
        target = self._target(key)
        temporary: str | None = None
        try:
            with tempfile.NamedTemporaryFile(
                dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
            ) as part:
                temporary = part.name
                part.write(data)
                part.flush()
                os.fsync(part.fileno())
            os.replace(temporary, target)
        except OSError as exc:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            raise StorageError(f"cannot write object {key!r}: {exc}") from exc

    def delete(self, key: str) -> None:
        target = self._target(key)
        try:
            target.unlink(missing_ok=True)
        except IsADirectoryError:
            raise StorageKeyError(f"key {key!r} names a directory, not an object") from None
        except OSError as exc:
            raise StorageError(f"cannot delete object {key!r}: {exc}") from exc


def open_storage(settings: Settings) -> Storage:
    """The store `settings` configure: today `LocalStorage(settings.storage_root)`.
    Every reader and writer of page images (worker, importer, admin) gets it here."""
    return LocalStorage(settings.storage_root)
