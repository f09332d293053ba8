"""S3Storage against a real S3-compatible server (SeaweedFS, testbed/seaweedfs.py), reached
through the standard AWS_* variables; faults through a TCP proxy in front of it."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator

import pytest

from manga_page_analysis.config import Settings
from manga_page_analysis.errors import (
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
    StorageKeyError,
    StorageUnavailable,
)
from manga_page_analysis.storage import ProbedStorage, Storage, open_storage
from manga_page_analysis.storage.s3 import S3Location, S3Storage
from testbed.seaweedfs import S3Server, free_ports
from tests.tcp_proxy import TcpProxy

SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)


@pytest.fixture
def proxy(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[TcpProxy]:
    """The store as this process sees it: SeaweedFS behind a proxy that can fail."""
    with TcpProxy(s3_env.port) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        yield proxy


def test_writes_reads_describes_and_deletes_with_the_content_type(
    s3_env: S3Server, bucket: str
) -> None:
    storage = S3Storage(f"s3://{bucket}/pages")
    assert isinstance(storage, Storage) and isinstance(storage, ProbedStorage)
    storage.write_bytes("manga/1/0001.png", b"page-one", content_type="image/png")

    assert storage.read_bytes("manga/1/0001.png", max_bytes=100) == b"page-one"
    stored = s3_env.client().get_object(Bucket=bucket, Key="pages/manga/1/0001.png")
    assert stored["ContentType"] == "image/png" and stored["Body"].read() == b"page-one"
    info = storage.describe("manga/1/0001.png")
    assert info is not None
    assert (info.size, info.sha256, info.content_type) == (
        8,
        hashlib.sha256(b"page-one").hexdigest(),
        "image/png",
    )

    storage.delete("manga/1/0001.png")
    storage.delete("manga/1/0001.png")  # a missing object is no error
    assert storage.describe("manga/1/0001.png") is None


def test_a_missing_object_is_permanent_and_named(s3_env: S3Server, bucket: str) -> None:
    storage = S3Storage(f"s3://{bucket}")
    with pytest.raises(ObjectNotFound) as missing:
        storage.read_bytes("manga/404.png", max_bytes=100)
    assert str(missing.value) == f"no object stored under key 'manga/404.png' in s3://{bucket}"
    assert missing.value.retryable is False


def test_a_missing_bucket_is_retryable_and_names_the_setting(s3_env: S3Server) -> None:
    with pytest.raises(StorageError, match=r"bucket 'no-such-bucket' does not exist") as error:
        S3Storage("s3://no-such-bucket/x").read_bytes("a.png", max_bytes=100)
    assert error.value.retryable and not isinstance(error.value, ObjectNotFound)


def test_keys_follow_the_same_rules_as_on_disk(s3_env: S3Server, bucket: str) -> None:
    storage = S3Storage(f"s3://{bucket}")
    for key in ("", "../up.png", "/abs.png", "a\x00b"):
        with pytest.raises(StorageKeyError):
            storage.read_bytes(key, max_bytes=100)
        with pytest.raises(StorageKeyError):
            storage.write_bytes(key, b"x", content_type="image/png")


def test_an_object_over_the_cap_is_refused_before_its_body_is_downloaded(
    proxy: TcpProxy, bucket: str
) -> None:
    storage = S3Storage(f"s3://{bucket}")
    large = 24 * 1024 * 1024
    storage.write_bytes("huge.png", bytes(large), content_type="image/png")
    before = proxy.bytes_from_target
    with pytest.raises(ObjectTooLarge, match=rf"\({large} bytes\) exceeds the cap of 1048576"):
        storage.read_bytes("huge.png", max_bytes=1024 * 1024)
    # The announced size refused it: of 24 MiB, at most what was in flight arrived.
    assert proxy.bytes_from_target - before < large // 4
    assert storage.read_bytes("huge.png", max_bytes=large) == bytes(large)  # the pool recovered


def test_a_store_that_drips_gives_up_at_the_whole_read_deadline(
    proxy: TcpProxy, bucket: str
) -> None:
    # Never silent for read_timeout (a byte every 0.2 s), so only the deadline ends the read:
    # 20 KB at that pace would take more than an hour.
    storage = S3Storage(f"s3://{bucket}", read_timeout=5, read_deadline=2)
    storage.write_bytes("slow.png", bytes(20_000), content_type="image/png")
    proxy.drip(0.2, after=2048)  # the answer's head and its first bytes flow
    with pytest.raises(StorageUnavailable, match=r"too slowly: not whole after 2 s"):
        storage.read_bytes("slow.png", max_bytes=10**6)
    proxy.drip(None)
    assert storage.read_bytes("slow.png", max_bytes=10**6) == bytes(20_000)


def test_a_503_store_is_retried_then_fails_the_attempt_and_the_probe_says_so(
    proxy: TcpProxy, bucket: str
) -> None:
    storage = S3Storage(f"s3://{bucket}", max_attempts=3)
    storage.write_bytes("page.png", b"page", content_type="image/png")
    assert storage.readiness().ready
    quiet = proxy.connections
    assert storage.readiness().ready and storage.readiness().ready
    assert proxy.connections == quiet  # a store that answers is not asked again

    proxy.answer(SERVICE_UNAVAILABLE)
    connections = proxy.connections
    with pytest.raises(StorageUnavailable, match=r"answered 503 .* after 3 tries") as error:
        storage.read_bytes("page.png", max_bytes=100)
    assert error.value.retryable
    assert proxy.connections - connections == 3  # botocore's bounded retries, no more
    answer = storage.readiness()
    assert not answer.ready and "answered 503" in answer.reason

    assert not storage.readiness().ready  # asked again while it is down

    proxy.answer(None)
    assert storage.readiness().ready
    assert storage.read_bytes("page.png", max_bytes=100) == b"page"


def test_an_unreachable_store_fails_the_attempt_with_a_retryable_error(
    s3_env: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    [nobody] = free_ports(1)  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{nobody}")
    storage = S3Storage(f"s3://{bucket}", max_attempts=2, connect_timeout=1, read_timeout=1)
    with pytest.raises(StorageUnavailable, match="unreachable") as error:
        storage.read_bytes("page.png", max_bytes=100)
    assert error.value.retryable
    assert not storage.readiness().ready


def test_wrong_credentials_never_show_the_secret(
    s3_env: S3Server,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong_secret = "wrong-" + s3_env.secret_key
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong_secret)
    caplog.set_level(logging.DEBUG)  # botocore's own debug lines included
    storage = S3Storage(f"s3://{bucket}")
    with pytest.raises(StorageError) as error:
        storage.read_bytes("page.png", max_bytes=100)
    assert "SignatureDoesNotMatch" in str(error.value) or "AccessDenied" in str(error.value)
    for secret in (wrong_secret, s3_env.secret_key):
        assert secret not in str(error.value)
        assert secret not in caplog.text


def test_open_storage_prefers_storage_url_and_shares_one_client_per_process(
    s3_env: S3Server, bucket: str, tmp_path
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        storage_root=tmp_path,
        storage_url=f"s3://{bucket}/p/",
        analysis_workers=16,
    )
    storage = open_storage(settings)
    assert isinstance(storage, S3Storage)
    assert storage.location == S3Location(bucket, "p")
    assert open_storage(settings) is storage
    assert storage._client.meta.config.max_pool_connections >= 16

    # The shared client under concurrent use: every thread reads what it wrote.
    failures: list[BaseException] = []

    def round_trip(index: int) -> None:
        try:
            data = f"page {index}".encode()
            storage.write_bytes(f"t/{index}.png", data, content_type="image/png")
            assert storage.read_bytes(f"t/{index}.png", max_bytes=100) == data
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=round_trip, args=(index,)) for index in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
