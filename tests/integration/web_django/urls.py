"""URLconf of the Django tests: the admin mounted where the README says."""

from django.urls import include, path

urlpatterns = [path("admin/analysis/", include("app.web.django.urls"))]
