"""Settings of the example project: Django's admin for logging in, and the
page-analysis app on the same database as `make run-worker`."""

import os

from manga_page_analysis.config import Settings
from manga_page_analysis.db import database_url
from manga_page_analysis.web.django import database_from_url

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-never-in-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "manga_page_analysis.web.django",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "example_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# The database `python -m manga_page_analysis ...` and `make run-worker` use: DATABASE_URL,
# else the embedded Postgres under .dev/ (started on first use). Run every
# command from the repository root so `.dev/` is the same folder.
DATABASES = {"default": database_from_url(database_url(Settings()))}

# Staff users get in without a token; with PAGE_ANALYSIS_TOKEN set, so does
# `Authorization: Bearer <token>` (what the admin page sends in token mode).
PAGE_ANALYSIS = {"ADMIN_TOKEN": os.environ.get("PAGE_ANALYSIS_TOKEN") or None}

# Staff sign in through Django's admin; the admin page links there (with
# `next` back to it) when a logged-out visitor opens it.
LOGIN_URL = "admin:login"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
