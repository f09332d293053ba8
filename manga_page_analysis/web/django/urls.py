"""`path("admin/analysis/", include("manga_page_analysis.web.django.urls"))`: the admin routes (docs/admin-api.md).

Every `api/` route of `manga_page_analysis.web.api.ROUTES`, under its name (`page_analysis:stats`, ...).
"""

from django.urls import path

from manga_page_analysis.web.api import ROUTES
from manga_page_analysis.web.django import views

app_name = "page_analysis"

urlpatterns = [
    path("", views.admin_page, name="page"),
    *(path(route.pattern, views.api_view(route), name=route.name) for route in ROUTES),
]
