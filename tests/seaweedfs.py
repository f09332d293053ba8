"""The S3-compatible server fixtures (a pytest plugin); the server itself is
`testbed.seaweedfs`, which the benchmarks use too.

`s3_server` (session scope: one per test process, like Postgres) runs `weed server -s3`
on free ports of 127.0.0.1, in a folder of its own, with one identity whose secret key
is random for the session (so a test can look for it in logs and errors). `s3_env` puts
the standard `AWS_*` variables of that server into the environment (boto3's own chain
reads them, as in production); `bucket` is a new, empty bucket.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.seaweedfs import S3Server, start_s3_server, stop_s3_server

_START_ATTEMPTS = 3


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    folder = Path(tempfile.mkdtemp(prefix="seaweedfs-"))
    access_key = f"test-{secrets.token_hex(4)}"
    secret_key = f"secret-{secrets.token_hex(16)}"
    try:
        for attempt in range(_START_ATTEMPTS):
            try:
                server = start_s3_server(folder, access_key, secret_key)
                break
            except RuntimeError:
                if attempt == _START_ATTEMPTS - 1:
                    raise
        try:
            yield server
        finally:
            stop_s3_server(server.process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This test's process reaches `s3_server` through the standard `AWS_*` variables."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    """A new, empty bucket of `s3_server`."""
    return s3_server.new_bucket()
