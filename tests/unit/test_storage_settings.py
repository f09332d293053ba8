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
    "url", ["http://bucket/x", "s3://", "s3:///prefix", "s3://key:secret@bucket/x", "/srv/pages"]
)
def test_storage_url_must_name_a_bucket_and_hold_no_credentials(url: str) -> None:
    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        S3Location.parse(url)
    with pytest.raises(ValidationError) as error:
        _settings(storage_url=url)
    # What the command line prints of a bad setting: the message, never the value.
    assert "secret" not in error.value.errors()[0]["msg"]
