"""`path("admin/analysis/", include("app.web.django.urls"))`: DESIGN's admin routes."""

from django.urls import path

from app.web.django import views

app_name = "page_analysis"

urlpatterns = [
    path("", views.admin_page, name="page"),
    path("api/stats", views.stats, name="stats"),
    path("api/jobs", views.jobs, name="jobs"),
    # `str`, not `uuid`: a malformed id gets the API's JSON 400, not an HTML 404.
    path("api/jobs/<str:job_id>/retry", views.retry, name="retry"),
    path("api/pages/<str:page_id>/analysis", views.page_analysis, name="page-analysis"),
    path("api/events", views.events, name="events"),
    path("api/", views.unknown),
    path("api/<path:rest>", views.unknown, name="unknown"),
]
