"""Page image storage: the `Storage` seam (`manga_page_analysis.storage.base`), a folder on
disk (`LocalStorage`) and an S3-compatible bucket (`S3Storage`, the `[s3]` extra), and
`open_storage(settings)`, the one place a configured store is built."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Protocol

from manga_page_analysis.errors import StorageError
from manga_page_analysis.storage.base import (
    READ_CHUNK_BYTES,
    ProbedStorage,
    Storage,
    StoreReadiness,
    check_key,
    read_capped,
)
from manga_page_analysis.storage.local import LocalStorage
from manga_page_analysis.storage.s3 import S3Storage

__all__ = [
    "READ_CHUNK_BYTES",
    "LocalStorage",
    "ProbedStorage",
    "Storage",
    "StorageSettings",
    "StoreReadiness",
    "check_key",
    "open_storage",
    "read_capped",
]


class StorageSettings(Protocol):
    """What `open_storage` reads of the settings; `manga_page_analysis.config.Settings` has it
    (storage sits below the settings: it knows no `Settings`)."""

    @property
    def storage_url(self) -> str | None: ...
    @property
    def storage_root(self) -> Path: ...
    @property
    def analysis_workers(self) -> int: ...


_s3_stores: dict[tuple[str, int], S3Storage] = {}
_s3_lock = threading.Lock()


def open_storage(settings: StorageSettings) -> Storage:
    """The store `settings` configure: `S3Storage` when `STORAGE_URL` is set (it wins over
    `STORAGE_ROOT`), else `LocalStorage(settings.storage_root)`. Every reader and writer of
    page images (worker, importer, admin) gets it here.

    S3 stores are built once per process and URL, then shared: one boto3 client, its
    connection pool sized for `ANALYSIS_WORKERS` threads."""
    if not settings.storage_url:
        return LocalStorage(settings.storage_root)
    key = (settings.storage_url, settings.analysis_workers)
    with _s3_lock:
        store = _s3_stores.get(key)
        if store is None:
            store = _s3_stores[key] = _build_s3(settings)
        return store


def _build_s3(settings: StorageSettings) -> S3Storage:
    if importlib.util.find_spec("boto3") is None:  # pragma: no cover - depends on the extras
        raise StorageError(
            "STORAGE_URL=s3://... needs boto3: pip install 'manga-page-analysis[s3]'"
        )
    assert settings.storage_url is not None
    # Two connections above the workers: the importer or the admin route in the same process.
    return S3Storage(settings.storage_url, max_pool_connections=settings.analysis_workers + 2)
