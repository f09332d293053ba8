from django.contrib import admin
from django.urls import include, path

from example_site import views

urlpatterns = [
    # Before Django's admin, whose catch-all would otherwise answer first.
    path("admin/analysis/", include("manga_page_analysis.web.django.urls")),
    path("admin/", admin.site.urls),
    path("pages/<uuid:page_id>/reanalyse", views.reanalyse),
]
