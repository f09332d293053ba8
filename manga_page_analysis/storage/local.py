"""`LocalStorage`: page images in a folder on disk.

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
from typing import BinaryIO

from manga_page_analysis.errors import ObjectNotFound, ObjectTooLarge, StorageError, StorageKeyError
from manga_page_analysis.storage.base import check_key, read_capped


class LocalStorage:
    """Objects are files under `root` (resolved on every call: a missing root is a
    retryable `StorageError`); a key is a path relative to it. Symlinks are
    followed as long as the final target stays under the root."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r})"

    def path_for(self, key: str) -> Path:
        """The resolved path of `key`, checked to be under the root: `StorageKeyError`
        for a malformed or escaping key, `ObjectNotFound` when nothing is there."""
        check_key(key)
        root = self.root.resolve()
        if not root.is_dir():
            # Not the object's fault: a mount that is not there (yet) or a wrong
            # STORAGE_ROOT. Retryable, where a missing object is not.
            raise StorageError(f"the storage root {str(root)!r} is not a folder (STORAGE_ROOT)")
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
        check_key(key)
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
