"""Django integration: `INSTALLED_APPS = [..., "manga_page_analysis.web.django"]`.

Settings, URLs and commands: docs/embedding.md, "Django".
"""

from __future__ import annotations

import uuid

from manga_page_analysis.web.django.conf import database_from_url

__all__ = ["database_from_url", "request_analysis"]


def request_analysis(
    page_id: uuid.UUID | str, *, force: bool = False, using: str = "default"
) -> uuid.UUID | None:
    """`manga_page_analysis.queue.request_analysis` on Django's connection `using`: the id of
    the job that will analyse the page.

    It joins the open `transaction.atomic(using=...)` block (no savepoint: the
    enqueue raises nothing on a duplicate), so a rollback leaves no job; no
    other connection is opened. Outside any atomic block it runs in a
    transaction of its own. `ImproperlyConfigured` unless PostgreSQL.
    `NoSuchPage` when the id is no page: nothing queued, and the host's block
    stays usable (the refusal is raised once the block is left intact).
    """
    from django.db import connections, transaction

    from manga_page_analysis.queue import NoSuchPage
    from manga_page_analysis.queue import request_analysis as queue_request_analysis
    from manga_page_analysis.web.django.apps import page_analysis_app

    page_id = uuid.UUID(str(page_id))  # a bad id raises here, outside the host's transaction
    engine = page_analysis_app().borrowed.engine(using)
    refused: NoSuchPage | None = None
    with transaction.atomic(using=using, savepoint=False):
        connections[using].validate_no_broken_transaction()
        with engine.connect() as conn:
            try:
                return queue_request_analysis(conn, page_id, force=force)
            except NoSuchPage as exc:
                refused = exc
    assert refused is not None
    raise refused
