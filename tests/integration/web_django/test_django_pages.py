"""The pages-in API on Django's own connection: rows and jobs in the host's
`atomic()` block, and the stored object of a page gone again when that block,
or a savepoint around the page, rolls back."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine

from manga_page_analysis.storage import LocalStorage
from tests.helpers import count
from tests.worker_support import png_bytes

pytestmark = pytest.mark.usefixtures("django_db")


class Rollback(Exception):
    pass


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "storage")


def _stored(storage: LocalStorage) -> list[str]:
    root = storage.root
    if not root.exists():
        return []
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def _chapter() -> uuid.UUID:
    from manga_page_analysis.web.django import ensure_chapter, ensure_manga

    manga_id = ensure_manga(source_id="site", source_key="blame", title="Blame!")
    return ensure_chapter(manga_id, number="1")


def test_a_page_added_in_the_hosts_block_commits_with_it(
    django_engine: Engine, storage: LocalStorage
) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from manga_page_analysis.web.django import add_page, ensure_chapter, ensure_manga

    with transaction.atomic():
        manga_id = ensure_manga(source_id="site", source_key="blame", title="Blame!")
        assert ensure_manga(source_id="site", source_key="blame", title="other") == manga_id
        chapter_id = ensure_chapter(manga_id, number="2.5", title="Extra")
        added = add_page(chapter_id, number=1, data=png_bytes(), analyze=True, storage=storage)
        User.objects.create(username="host-write")
        assert count(django_engine, "SELECT count(*) FROM pages") == 0  # not committed yet
    assert added.job_id is not None and _stored(storage) == [added.storage_key]
    assert count(django_engine, "SELECT count(*) FROM pages WHERE id = :id", id=added.page_id) == 1
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'pending'") == 1


def test_rollback_of_the_hosts_block_leaves_no_row_and_no_object(
    django_engine: Engine, storage: LocalStorage
) -> None:
    from django.db import transaction

    from manga_page_analysis.web.django import add_page

    with pytest.raises(Rollback), transaction.atomic():
        chapter_id = _chapter()
        added = add_page(chapter_id, number=1, data=png_bytes(), analyze=True, storage=storage)
        assert _stored(storage) == [added.storage_key]
        raise Rollback
    assert _stored(storage) == []
    assert count(django_engine, "SELECT count(*) FROM pages") == 0
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_a_rolled_back_savepoint_deletes_only_its_own_object(
    django_engine: Engine, storage: LocalStorage
) -> None:
    from django.db import transaction

    from manga_page_analysis.web.django import add_page

    with transaction.atomic():
        chapter_id = _chapter()
        kept = add_page(chapter_id, number=1, data=png_bytes(), storage=storage)
        with transaction.atomic():
            released = add_page(chapter_id, number=2, data=png_bytes(), storage=storage)
        with pytest.raises(Rollback), transaction.atomic():
            add_page(chapter_id, number=3, data=png_bytes(), storage=storage)
            raise Rollback
        assert _stored(storage) == sorted([kept.storage_key, released.storage_key])
    assert _stored(storage) == sorted([kept.storage_key, released.storage_key])
    assert count(django_engine, "SELECT count(*) FROM pages") == 2


def test_outside_atomic_each_call_commits_on_its_own(
    django_engine: Engine, storage: LocalStorage
) -> None:
    from manga_page_analysis.web.django import add_page

    added = add_page(_chapter(), number=1, data=png_bytes(), storage=storage)
    assert _stored(storage) == [added.storage_key]
    assert count(django_engine, "SELECT count(*) FROM pages") == 1


def test_a_refused_page_leaves_the_block_usable_and_stores_nothing(
    django_engine: Engine, storage: LocalStorage, tmp_path: Path
) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from manga_page_analysis.pages import NotAnImage, PageExists
    from manga_page_analysis.web.django import add_page

    (tmp_path / "notes.png").write_text("not a page")
    with transaction.atomic():
        chapter_id = _chapter()
        first = add_page(chapter_id, number=1, data=png_bytes(), storage=storage)
        with pytest.raises(PageExists):
            add_page(chapter_id, number=1, data=png_bytes(), storage=storage)
        with pytest.raises(NotAnImage):
            add_page(chapter_id, number=2, file=tmp_path / "notes.png", storage=storage)
        User.objects.create(username="still-usable")
    assert _stored(storage) == [first.storage_key]
    assert User.objects.count() == 1
    assert count(django_engine, "SELECT count(*) FROM pages") == 1
