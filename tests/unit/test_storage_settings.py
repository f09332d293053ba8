"""Which store the settings pick (STORAGE_URL wins over STORAGE_ROOT), and what an
s3:// URL may say; no server needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from manga_page_analysis.config import Settings
from manga_page_analysis.storage import LocalStorage, open_storage
from manga_page_analysis.storage.s3 import S3Location


def _settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


def test_without_storage_url_the_folder_is_the_store(tmp_path: Path) -> None:
    for unset in ({}, {"storage_url": ""}):
        storage = open_storage(_settings(storage_root=tmp_path, **unset))
        assert isinstance(storage, LocalStorage) and storage.root == tmp_path


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("s3://pages", S3Location("pages", "")),
        ("s3://pages/", S3Location("pages", "")),
        ("s3://pages/prod/v2/", S3Location("pages", "prod/v2")),
    ],
)
def test_an_s3_url_names_a_bucket_and_a_prefix(url: str, location: S3Location) -> None:
    assert S3Location.parse(url) == location
    assert location.object_key("m/1/0001.png") == "/".join(
        part for part in (location.prefix, "m/1/0001.png") if part
    )
    assert _settings(storage_url=url).storage_url == str(location)


@pytest.mark.parametrize(
    "url",
    [
        "http://bucket/x",
        "s3://",
        "s3:///prefix",
        "s3://key:secret@bucket/x",
        "/srv/pages",
        # What S3 could never store: a bucket name off its rule, a prefix that climbs.
        "s3://pro be/x",
        "s3://Probe/x",
        "s3://..",
        "s3://a..b/x",
        "s3://ab",
        "s3://-probe/x",
        "s3://192.168.1.1/x",
        "s3://probe/../victim",
        "s3://probe/a/./b",
        "s3://probe/a//b",
        "s3://probe/a\x00b",
    ],
)
def test_storage_url_must_name_a_bucket_and_hold_no_credentials(url: str) -> None:
    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        S3Location.parse(url)
    with pytest.raises(ValidationError) as error:
        _settings(storage_url=url)
    # What the command line prints of a bad setting: the message, never the value.
    assert "secret" not in error.value.errors()[0]["msg"]


@pytest.mark.parametrize("url", ["s3://probe/../victim"])
def test_run_worker_with_a_malformed_storage_url_exits_with_the_configuration_code(
    url: str, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "STORAGE_URL": url, "DATABASE_URL": "postgresql+psycopg://x@127.0.0.1:9/x"}
    done = subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", "run-worker"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "bucket" in done.stderr or "prefix" in done.stderr
