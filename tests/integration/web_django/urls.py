"""URLconf of the Django tests: the admin mounted where the README says, and a
stand-in login page (`LOGIN_URL = "login"`) for the admin page's sign-in link."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("<!doctype html><title>Log in</title><h1>Log in</h1>")


urlpatterns = [
    path("admin/analysis/", include("manga_page_analysis.web.django.urls")),
    path("accounts/login/", login, name="login"),
]
