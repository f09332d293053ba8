"""A host view: enqueue inside the request's own transaction."""

import uuid

from django.contrib.admin.views.decorators import staff_member_required
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from manga_page_analysis.queue import NoSuchPage
from manga_page_analysis.web.django import request_analysis


@require_POST
@staff_member_required
def reanalyse(request: HttpRequest, page_id: uuid.UUID) -> JsonResponse:
    try:
        with transaction.atomic():
            # ... the host's own writes go here; if anything below raises, the
            # job is rolled back with them.
            job_id = request_analysis(page_id, force=True)
    except NoSuchPage:
        return JsonResponse({"error": {"code": "not_found", "message": "no such page"}}, status=404)
    return JsonResponse({"job_id": str(job_id)}, status=202)
