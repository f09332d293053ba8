"""Django integration: `INSTALLED_APPS = [..., "app.web.django"]`.

- `request_analysis(page_id, *, force=False, using="default")` enqueues on
  Django's own connection, inside the open `transaction.atomic()`.
- `app.web.django.urls`: the admin API and page (see DESIGN, "Embedding in a
  web backend").
- `manage.py run_worker` and `manage.py page_analysis_migrate`.
- `PAGE_ANALYSIS = {"ADMIN_TOKEN": ..., "DATABASE_ALIAS": "default",
  "MAX_EVENT_STREAMS": 10, "EVENT_KEEPALIVE_SECONDS": 15}`, every key optional.
"""

from __future__ import annotations

import uuid

from app.web.django.conf import database_from_url

__all__ = ["database_from_url", "request_analysis"]


def request_analysis(
    page_id: uuid.UUID | str, *, force: bool = False, using: str = "default"
) -> uuid.UUID | None:
    """Enqueue analysis of `page_id` on Django's connection `using` and return
    the id of the job that will analyse it (an existing pending or running
    one is reused, as `app.queue.request_analysis` does).

    It runs inside whatever `transaction.atomic(using=...)` block is open, so
    a rollback leaves no job; no other connection is opened. Outside any
    atomic block it commits on its own, like any Django query in autocommit.
    """
    from app.web.django.apps import page_analysis_app
    from app.web.django.borrowed import request_analysis as borrowed_request_analysis

    if not isinstance(page_id, uuid.UUID):
        page_id = uuid.UUID(str(page_id))
    return borrowed_request_analysis(
        page_analysis_app().borrowed, page_id, force=force, using=using
    )
