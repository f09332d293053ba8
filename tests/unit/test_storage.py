"""LocalStorage: keys stay under the root, only regular files are read, the byte cap holds."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from manga_page_analysis.errors import ObjectNotFound, ObjectTooLarge, StorageError, StorageKeyError
from manga_page_analysis.storage import LocalStorage, Storage, read_capped


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    (root / "manga" / "ch1").mkdir(parents=True)
    (root / "manga" / "ch1" / "001.png").write_bytes(b"page-one")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(b"not yours")
    return path


def test_local_storage_satisfies_the_protocol(root: Path) -> None:
    assert isinstance(LocalStorage(root), Storage)


def test_reads_a_page_by_key(root: Path) -> None:
    storage = LocalStorage(root)
    assert storage.read_bytes("manga/ch1/001.png", max_bytes=1024) == b"page-one"
    with storage.open("manga/ch1/001.png") as stream:
        assert stream.read() == b"page-one"
    assert stream.closed


def test_root_is_resolved_lazily(tmp_path: Path) -> None:
    root = tmp_path / "not-yet"
    storage = LocalStorage(root)
    # A root that is not there (a mount not up yet) is no verdict on the object:
    # a retryable error, where a missing object is permanent.
    with pytest.raises(StorageError, match="not a folder") as missing_root:
        storage.read_bytes("a.png", max_bytes=10)
    assert not isinstance(missing_root.value, ObjectNotFound)
    assert missing_root.value.retryable
    assert not ObjectNotFound("gone").retryable
    root.mkdir()
    (root / "a.png").write_bytes(b"abc")
    assert storage.read_bytes("a.png", max_bytes=10) == b"abc"


@pytest.mark.parametrize(
    "key", ["../secret.txt", "manga/../../secret.txt", "manga/ch1/../../../secret.txt"]
)
def test_dot_dot_escape_is_refused(root: Path, outside: Path, key: str) -> None:
    with pytest.raises(StorageKeyError) as caught:
        LocalStorage(root).read_bytes(key, max_bytes=1024)
    assert repr(key) in str(caught.value)


def test_absolute_path_is_refused(root: Path, outside: Path) -> None:
    key = str(outside)
    with pytest.raises(StorageKeyError, match="absolute") as caught:
        LocalStorage(root).read_bytes(key, max_bytes=1024)
    assert repr(key) in str(caught.value)


@pytest.mark.parametrize("key", ["", "manga/\x00.png"])
def test_empty_key_and_nul_byte_are_refused(root: Path, key: str) -> None:
    with pytest.raises(StorageKeyError):
        LocalStorage(root).open(key)


def test_symlink_pointing_outside_is_refused(root: Path, outside: Path) -> None:
    (root / "manga" / "evil.png").symlink_to(outside)
    with pytest.raises(StorageKeyError, match="outside the storage root") as caught:
        LocalStorage(root).read_bytes("manga/evil.png", max_bytes=1024)
    assert "'manga/evil.png'" in str(caught.value)


def test_symlinked_directory_pointing_outside_is_refused(root: Path, outside: Path) -> None:
    (root / "elsewhere").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(StorageKeyError):
        LocalStorage(root).read_bytes(f"elsewhere/{outside.name}", max_bytes=1024)


def test_symlink_inside_root_is_followed(root: Path) -> None:
    (root / "latest.png").symlink_to(root / "manga" / "ch1" / "001.png")
    assert LocalStorage(root).read_bytes("latest.png", max_bytes=1024) == b"page-one"


def test_root_reached_through_a_symlink_still_works(tmp_path: Path, root: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    assert LocalStorage(alias).read_bytes("manga/ch1/001.png", max_bytes=1024) == b"page-one"


def test_missing_key_names_the_key(root: Path) -> None:
    with pytest.raises(ObjectNotFound, match=r"'manga/ch1/404\.png'"):
        LocalStorage(root).read_bytes("manga/ch1/404.png", max_bytes=1024)


def test_path_through_a_file_is_missing(root: Path) -> None:
    with pytest.raises(ObjectNotFound):
        LocalStorage(root).read_bytes("manga/ch1/001.png/nested", max_bytes=1024)


def test_directory_is_not_an_object_and_no_retry_helps(root: Path) -> None:
    with pytest.raises(StorageKeyError, match="directory") as refused:
        LocalStorage(root).read_bytes("manga/ch1", max_bytes=1024)
    assert refused.value.retryable is False


def test_fifo_is_refused_without_blocking_and_no_retry_helps(root: Path) -> None:
    os.mkfifo(root / "pipe.png")
    # Opening a FIFO for reading blocks until a writer shows up; the storage must not.
    with pytest.raises(StorageKeyError, match="regular file") as refused:
        LocalStorage(root).open("pipe.png")
    assert refused.value.retryable is False


def test_errors_are_storage_errors() -> None:
    for error in (StorageKeyError, ObjectNotFound, ObjectTooLarge):
        assert issubclass(error, StorageError)


def test_file_exactly_at_the_cap_is_read(root: Path) -> None:
    (root / "exact.png").write_bytes(b"x" * 1000)
    assert LocalStorage(root).read_bytes("exact.png", max_bytes=1000) == b"x" * 1000


def test_file_one_byte_over_the_cap_is_refused(root: Path) -> None:
    (root / "big.png").write_bytes(b"x" * 1001)
    with pytest.raises(ObjectTooLarge, match="exceeds") as caught:
        LocalStorage(root).read_bytes("big.png", max_bytes=1000)
    assert "1000" in str(caught.value)
    assert "'big.png'" in str(caught.value)


class _EndlessStream(io.RawIOBase):
    """An endless source of bytes that counts what it hands out."""

    def __init__(self) -> None:
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        size = len(view)
        view[:size] = b"x" * size
        self.served += size
        return size


def test_capped_read_stops_just_past_the_cap() -> None:
    source = _EndlessStream()
    with pytest.raises(ObjectTooLarge, match="exceeds the cap of 5000000 bytes"):
        read_capped(source, 5_000_000, label="'endless'")  # type: ignore[arg-type]
    assert source.served == 5_000_001


def test_capped_read_of_a_short_stream_returns_everything() -> None:
    assert read_capped(io.BytesIO(b"abc"), 3, label="x") == b"abc"
    assert read_capped(io.BytesIO(b""), 0, label="x") == b""


class _PipeStorage(LocalStorage):
    """A storage whose object is a pipe: its metadata size says 0, its content never ends."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.read_end: _CountingReader | None = None

    def open(self, key: str) -> BinaryIO:
        read_fd, write_fd = os.pipe()
        threading.Thread(target=_fill_forever, args=(write_fd,), daemon=True).start()
        self.read_end = _CountingReader(io.FileIO(read_fd, "r"))
        return self.read_end


class _CountingReader(io.BufferedReader):
    returned = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.returned += len(data)
        return data


def _fill_forever(write_fd: int) -> None:
    chunk = b"y" * 65536
    try:
        while True:
            os.write(write_fd, chunk)
    except OSError:  # the reader closed its end: the storage stopped reading
        pass
    finally:
        os.close(write_fd)


def test_read_bytes_does_not_trust_the_size_metadata(root: Path) -> None:
    storage = _PipeStorage(root)
    with pytest.raises(ObjectTooLarge, match="exceeds the cap of 300000 bytes"):
        storage.read_bytes("anything.png", max_bytes=300_000)
    assert storage.read_end is not None
    assert storage.read_end.returned == 300_001
    assert storage.read_end.closed


def test_write_bytes_stores_the_object_whole_and_replaces_it(root: Path) -> None:
    storage = LocalStorage(root)
    storage.write_bytes("new/deep/page.png", b"first", content_type="image/png")
    assert storage.read_bytes("new/deep/page.png", 100) == b"first"
    storage.write_bytes("new/deep/page.png", b"second", content_type="image/png")
    assert storage.read_bytes("new/deep/page.png", 100) == b"second"
    # Nothing is left of the temporary file the write went through.
    assert sorted(p.name for p in (root / "new" / "deep").iterdir()) == ["page.png"]


@pytest.mark.parametrize("key", ["../escape.png", "/abs.png", "", "a\x00b"])
def test_write_bytes_refuses_a_key_that_is_no_plain_relative_path(root: Path, key: str) -> None:
    with pytest.raises(StorageKeyError):
        LocalStorage(root).write_bytes(key, b"x", content_type="image/png")
    assert not (root.parent / "escape.png").exists()


def test_write_bytes_refuses_a_folder_that_is_a_symlink_out_of_the_root(
    root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "link").symlink_to(elsewhere)
    with pytest.raises(StorageKeyError, match="outside the storage root"):
        LocalStorage(root).write_bytes("link/page.png", b"x", content_type="image/png")
    assert list(elsewhere.iterdir()) == []


def test_delete_removes_the_object_and_a_missing_one_is_no_error(root: Path) -> None:
    storage = LocalStorage(root)
    storage.delete("manga/ch1/001.png")
    with pytest.raises(ObjectNotFound):
        storage.read_bytes("manga/ch1/001.png", 100)
    storage.delete("manga/ch1/001.png")
    with pytest.raises(StorageKeyError):
        storage.delete("../secret.txt")
