"""Workers on two machines, one bucket: pages imported on "machine A" are analysed by a
worker that has only the bucket (its STORAGE_ROOT is empty), and `storage copy` moves a
local store into a bucket a worker then reads. SeaweedFS is the real store
(testbed/seaweedfs.py); the vision model is the scripted server."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.cli.importer import import_folder
from manga_page_analysis.config import Settings
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.storage import open_storage
from manga_page_analysis.storage.s3 import S3Storage
from testbed.seaweedfs import S3Server
from tests.helpers import wait_until
from tests.tcp_proxy import TcpProxy
from tests.worker_support import Harness, png_bytes

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "examples" / "sample_manga"
SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)


def _settings(engine: Engine, **values: object) -> Settings:
    url = engine.url.render_as_string(hide_password=False)
    return Settings(_env_file=None, database_url=url, **values)  # type: ignore[arg-type]


def _put_page(harness: Harness, storage: S3Storage, data: bytes | None, key: str) -> uuid.UUID:
    if data is not None:
        storage.write_bytes(key, data, content_type="image/png")
    return harness.add_page(key=key)


def test_pages_imported_on_one_machine_are_analysed_by_a_worker_with_only_the_bucket(
    harness: Harness, vision_server, s3_env: S3Server, bucket: str, tmp_path: Path
) -> None:
    machine_a = _settings(
        harness.engine, storage_root=tmp_path / "a", storage_url=f"s3://{bucket}/pages"
    )
    imported = import_folder(
        harness.engine, open_storage(machine_a), SAMPLES, title="Two hosts", chapter=Decimal(1)
    )
    assert not (tmp_path / "a").exists()  # nothing went to machine A's disk
    listed = s3_env.client().list_objects_v2(Bucket=bucket, Prefix="pages/")
    assert len(listed["Contents"]) == len(imported.pages) == 6

    machine_b = tmp_path / "b"
    machine_b.mkdir()
    with harness.running(
        storage_root=machine_b, storage_url=f"s3://{bucket}/pages", analysis_workers=2
    ):
        for page_id in imported.page_ids:
            harness.events.wait_for("completed", page_id)
    assert list(machine_b.iterdir()) == []
    for page_id in imported.page_ids:
        assert harness.analysis(page_id).status == "done"
    sent = {
        body["messages"][1]["content"][1]["image_url"]["url"][:40]
        for body in vision_server.requests
    }
    assert len(vision_server.requests) == 6 and all(
        url.startswith("data:image/png") for url in sent
    )


def test_a_missing_or_oversized_object_fails_its_job_for_good_with_a_clear_error(
    harness: Harness, vision_server, s3_env: S3Server, bucket: str
) -> None:
    storage = S3Storage(f"s3://{bucket}/p")
    pages = {
        "missing": _put_page(harness, storage, None, "gone.png"),
        "oversized": _put_page(harness, storage, png_bytes(size=(800, 800)), "big.png"),
    }
    size = len(png_bytes(size=(800, 800)))
    jobs = {name: harness.request(page) for name, page in pages.items()}
    with harness.running(storage=storage, max_image_bytes=1000):
        for page in pages.values():
            harness.events.wait_for("failed", page)
        good = _put_page(harness, storage, png_bytes(), "good.png")
        harness.request(good)
        harness.events.wait_for("completed", good)
    expected = {
        "missing": f"no object stored under key 'gone.png' in s3://{bucket}/p",
        "oversized": f"object 'big.png' ({size} bytes) exceeds the cap of 1000 bytes",
    }
    for name, message in expected.items():
        job = harness.job(jobs[name])
        analysis = harness.analysis(pages[name])
        assert (job.state, job.attempts) == ("dead", 1), name
        assert message in job.last_error, (name, job.last_error)
        assert analysis.status == "failed" and analysis.error == job.last_error
    assert len(vision_server.requests) == 1


def test_a_store_down_from_the_start_costs_no_attempt(
    harness: Harness, vision_server, s3_env: S3Server, bucket: str, monkeypatch
) -> None:
    with TcpProxy(s3_env.port) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        storage = S3Storage(f"s3://{bucket}", max_attempts=2)
        page_id = _put_page(harness, storage, png_bytes(), "page.png")
        job_id = harness.request(page_id)
        proxy.answer(SERVICE_UNAVAILABLE)
        with harness.running(storage=storage) as runner:
            gate = runner._readiness
            wait_until(lambda: gate.ready is False and gate.part.startswith("page store s3://"))
            assert "answered 503" in gate.reason
            probes = proxy.connections
            wait_until(lambda: proxy.connections >= probes + 3)  # it keeps asking
            assert (harness.job(job_id).state, harness.job(job_id).attempts) == ("pending", 0)
            assert vision_server.requests == []
            proxy.answer(None)
            harness.events.wait_for("completed", page_id)
    assert harness.job(job_id).attempts == 1


def test_a_read_that_meets_a_503_store_gives_the_job_back_uncharged(
    harness: Harness, vision_server, s3_env: S3Server, bucket: str, monkeypatch
) -> None:
    """The read's own retries (2 tries here) run out: the store is at fault, not the page,
    so the job is released with its attempt refunded (no `failed`), again and again
    while the store answers 503; once it is back the job completes on its first charged
    attempt. The gate's probe goes straight to the store here, so the reads are what
    meet the outage (the breaker is off: it would pause the worker)."""
    direct = S3Storage(f"s3://{bucket}")
    page_id = _put_page(harness, direct, png_bytes(), "page.png")
    job_id = harness.request(page_id)
    with TcpProxy(s3_env.port) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        through_proxy = S3Storage(f"s3://{bucket}", max_attempts=2)
        storage = S3Storage(
            f"s3://{bucket}", client=through_proxy._client, probe_client=direct._probe_client
        )
        proxy.answer(SERVICE_UNAVAILABLE)
        with harness.running(storage=storage, breaker_failures=0):
            harness.events.wait_for("cancelled", page_id, n=2, timeout=30)
            assert proxy.connections >= 4  # two tries a read, each read released
            assert harness.events.of("failed") == []
            proxy.answer(None)
            harness.events.wait_for("completed", page_id, timeout=30)
    job = harness.job(job_id)
    assert (job.state, job.attempts) == ("done", 1)


def test_credentials_never_reach_events_or_logs(
    harness: Harness,
    vision_server,
    s3_env: S3Server,
    bucket: str,
    monkeypatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    S3Storage(f"s3://{bucket}").write_bytes("page.png", png_bytes(), content_type="image/png")
    page_id = harness.add_page(key="page.png")
    job_id = harness.request(page_id)
    probe_client = S3Storage(f"s3://{bucket}")._probe_client  # the gate opens: the read meets it
    wrong = "not-" + s3_env.secret_key
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    caplog.set_level(logging.DEBUG)
    reader = S3Storage(f"s3://{bucket}", max_attempts=1)
    storage = S3Storage(f"s3://{bucket}", client=reader._client, probe_client=probe_client)
    with harness.running(storage=storage):
        (given_back,) = harness.events.wait_for("cancelled", page_id)
    job = harness.job(job_id)
    assert (job.state, job.attempts) == ("pending", 0)  # the worker's fault: not charged
    assert "SignatureDoesNotMatch" in caplog.text
    event = str(given_back.to_json())
    for credential in (wrong, s3_env.secret_key, s3_env.access_key):
        assert credential not in event
    # A secret key is never sent, so not even botocore's own DEBUG lines hold it; the
    # access key id is in those (the signed headers), which the CLI's logging silences.
    assert wrong not in caplog.text and s3_env.secret_key not in caplog.text
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("manga_page_analysis")]
    assert ours and not [line for line in ours if s3_env.access_key in line]


@pytest.fixture
def local_store_of_the_sample(harness: Harness, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "local-store"
    import_folder(harness.engine, root, SAMPLES, title="Copied", chapter=Decimal(1))
    yield root


def _storage_copy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", "storage", "copy", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_storage_copy_moves_the_sample_manga_into_a_bucket_verified_and_resumable(
    harness: Harness,
    vision_server,
    s3_env: S3Server,
    bucket: str,
    local_store_of_the_sample: Path,
    tmp_path: Path,
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STORAGE_"))},
        **s3_env.env(),
        "DATABASE_URL": harness.engine.url.render_as_string(hide_password=False),
    }
    to = f"s3://{bucket}/moved"
    first = _storage_copy(env, "--to", to, "--from", str(local_store_of_the_sample))
    assert first.returncode == 0, first.stderr
    assert "6 copied, 0 already there, 0 missing from the folder, 0 failed" in first.stdout

    client = s3_env.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"])
    assert len(keys) == 6
    for key in keys:
        local = local_store_of_the_sample / key.removeprefix("moved/")
        stored = client.get_object(Bucket=bucket, Key=key)
        assert stored["Body"].read() == local.read_bytes()
        assert stored["ContentType"] == "image/png"

    # Resumable: one object gone, one replaced by other bytes, one file missing locally,
    # and one replaced by bytes of the same size under a forged checksum.
    client.delete_object(Bucket=bucket, Key=keys[0])
    client.put_object(Bucket=bucket, Key=keys[1], Body=b"not the page")
    (local_store_of_the_sample / keys[2].removeprefix("moved/")).unlink()
    genuine = (local_store_of_the_sample / keys[3].removeprefix("moved/")).read_bytes()
    client.put_object(
        Bucket=bucket,
        Key=keys[3],
        Body=genuine[::-1],
        Metadata={"sha256": hashlib.sha256(genuine).hexdigest()},
    )
    copy_env = {**env, "STORAGE_URL": to, "STORAGE_ROOT": str(local_store_of_the_sample)}
    again = _storage_copy(copy_env)
    assert again.returncode == 1
    # The bytes are compared, not the store's metadata; a different object stays unless told.
    assert "1 copied, 2 already there, 1 missing from the folder, 2 failed" in again.stdout
    assert f"missing: {keys[2].removeprefix('moved/')}" in again.stderr
    assert again.stderr.count("a different object is already under this key") == 2
    assert client.get_object(Bucket=bucket, Key=keys[1])["Body"].read() == b"not the page"
    assert s3_env.secret_key not in again.stdout + again.stderr
    forced = _storage_copy(copy_env, "--overwrite")
    assert "2 copied, 3 already there, 1 missing from the folder, 0 failed" in forced.stdout
    assert client.get_object(Bucket=bucket, Key=keys[3])["Body"].read() == genuine

    # A worker with only the bucket analyses the pages whose images made it.
    with harness.engine.begin() as conn:
        conn.execute(text("DELETE FROM crawler_jobs"))
        page_ids = [row.id for row in conn.execute(text("SELECT id FROM pages ORDER BY number"))]
        for page_id in page_ids:
            request_analysis(conn, page_id)
    empty = tmp_path / "empty"
    empty.mkdir()
    with harness.running(storage_root=empty, storage_url=to, analysis_workers=2):
        for page_id in page_ids:
            harness.events.wait_for("completed", page_id)
    assert len(vision_server.requests) == 6


def test_storage_copy_without_a_bucket_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STORAGE_"))}
    result = _storage_copy(env, "--from", str(tmp_path))
    assert result.returncode == 2
    assert "give --to s3://bucket/prefix, or set STORAGE_URL" in result.stderr
