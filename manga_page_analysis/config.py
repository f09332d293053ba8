"""Settings, read from the environment and `.env`. Every default has a name and a
one-line docstring here, in one place; nothing is built at import time."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from manga_page_analysis.storage.s3 import S3Location

DEFAULT_VISION_URL = "http://127.0.0.1:8080"
"""llama-server's default address: what to suggest as `VISION_URL` (it is not a default)."""
DEFAULT_VISION_MAX_TOKENS = 4096
"""`max_tokens` of one answer: a text-heavy page needs room."""
DEFAULT_VISION_CONNECT_TIMEOUT_SECONDS = 5.0
"""Connect timeout of one request to the model server."""
DEFAULT_VISION_READ_TIMEOUT_SECONDS = 300.0
"""Read timeout of one request: how long the model may think (cut to the job's deadline)."""
DEFAULT_MAX_SIDE_PX = 1600
"""Long side of the image sent to the model; larger pages are scaled down."""

VisionBackend = Literal["http", "ocr"]
"""`http`: an OpenAI-compatible model server; `ocr`: in-process OCR
(`manga_page_analysis.analysis.reader.ocr_analyzer`)."""

DEFAULT_DEV_DIR = Path(".dev")
"""Local state for `make run-worker` without `DATABASE_URL`: embedded Postgres and storage."""

DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""Largest page image read from storage (20 MiB)."""
MAX_IMAGE_BYTES_LIMIT = 1024 * 1024 * 1024
"""The most `MAX_IMAGE_BYTES` may be (1 GiB)."""
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000
"""Largest page, in pixels, that is decoded: 40 MP (a 5,000 x 8,000 scan); its header
is checked before a pixel is decoded, since a small file can declare a huge image."""
MAX_IMAGE_PIXELS_LIMIT = 89_478_485
"""The most `MAX_IMAGE_PIXELS` may be: Pillow's own decompression-bomb limit."""

MAX_RETENTION_DAYS = 36_500
"""The most days done jobs may be kept before reaping (a century); more is no retention
Postgres can compute (`now() - interval` leaves the timestamp range)."""
MAX_WORKERS = 64
"""The most concurrent jobs one worker process runs (`ANALYSIS_WORKERS`)."""
MAX_TIMEOUT_SECONDS = 86_400.0
"""The most any timeout, grace or lease may be (a day): longer is a typo, and
far longer overflows the clocks the threads wait on."""
MAX_POLL_SECONDS = 3_600.0
"""The most any polling or sampling interval may be (an hour)."""

DEFAULT_SHUTDOWN_GRACE_SECONDS = 25.0
"""How long a page being analysed may finish after a stop signal: most pages take
seconds to a minute, and 25 s leaves a release and exit inside the 30 s a
container platform (Kubernetes, Docker) waits before it kills."""

DEFAULT_BREAKER_FAILURES = 5
"""Jobs of one kind failing in a row with one error class (none succeeding) that open a
worker's breaker: enough that a few bad pages do not, few enough that a sick worker
releases the queue after seconds, not after burning it."""
DEFAULT_BREAKER_PAUSE_SECONDS = 60.0
"""How long an open breaker leases nothing of its kind before it tries one again."""

StartupChecks = Literal["exit", "wait", "off"]
"""What `run-worker` does when its start-up checks find the store refusing its
credentials or the model missing: exit (code 2), wait until they pass, or not check."""

POSTGRES_URL_SCHEMES = ("postgresql+psycopg", "postgresql", "postgres")
"""What `DATABASE_URL` may start with (`postgresql://` and `postgres://` use psycopg 3)."""
POSTGRES_URL_EXAMPLE = "postgresql+psycopg://user:password@host:5432/dbname"

DATABASE_SCHEMA_PATTERN = r"^[a-z_][a-z0-9_]{0,39}$"
"""What `DATABASE_SCHEMA` may be: a plain lower-case name, short enough that its
`NOTIFY` channels (`<schema>.analysis_events`) fit Postgres' 63-byte names."""


def check_schema_name(name: str) -> str:
    """`name` if `DATABASE_SCHEMA` may be it, else `ValueError` in a plain sentence
    (what was given, what is accepted, an example): read by whoever set the variable."""
    if re.match(DATABASE_SCHEMA_PATTERN, name):
        return name
    given = "is empty"
    if name.strip():
        given = f"is {name[:60]!r}, which is not a schema name this package uses"
    raise ValueError(
        f"{given}: give a lower-case name of letters, digits and _ (not starting with a "
        "digit, at most 40 characters), e.g. page_analysis, or leave it unset for public"
    )


class Settings(BaseSettings):
    """Service configuration. Field names map to upper-case environment variables."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; unset means an embedded Postgres under `.dev/`.",
    )
    listen_database_url: str | None = Field(
        default=None,
        description="Direct connection for LISTEN (wake-ups, admin events); unset: DATABASE_URL.",
    )
    database_schema: str = Field(
        default="public",
        description="Postgres schema of every table of this package; `migrate` creates it.",
    )
    dev_dir: Path = Field(default=DEFAULT_DEV_DIR, description="Folder for local dev state.")

    vision_url: str | None = Field(
        default=None, description="OpenAI-compatible base URL; unset: the `ocr` backend."
    )
    vision_backend: VisionBackend | None = Field(
        default=None, description="`http` or `ocr`; unset: `http` iff VISION_URL is set."
    )
    vision_health_url: str | None = Field(
        default=None, description="Readiness probe; defaults to `{VISION_URL}/health`."
    )
    vision_model: str = Field(default="default", description="Model name sent in requests.")
    vision_api_key: str | None = Field(default=None, description="Bearer token, if any.")
    vision_max_tokens: int = Field(
        default=DEFAULT_VISION_MAX_TOKENS, ge=64, le=1_000_000, description="max_tokens per answer."
    )
    vision_connect_timeout_seconds: float = Field(
        default=DEFAULT_VISION_CONNECT_TIMEOUT_SECONDS, gt=0, le=MAX_TIMEOUT_SECONDS
    )
    vision_read_timeout_seconds: float = Field(
        default=DEFAULT_VISION_READ_TIMEOUT_SECONDS, gt=0, le=MAX_TIMEOUT_SECONDS
    )
    vision_max_side_px: int = Field(
        default=DEFAULT_MAX_SIDE_PX, ge=64, le=16_384, description="Long side cap for images."
    )

    storage_root: Path = Field(default=DEFAULT_DEV_DIR / "storage")
    storage_url: str | None = Field(
        default=None,
        description="`s3://bucket/prefix`: page images in an S3-compatible store (wins over "
        "STORAGE_ROOT); endpoint, region and credentials from the AWS_* variables or a profile.",
    )
    analysis_workers: int = Field(default=2, ge=1, le=MAX_WORKERS)
    job_timeout_seconds: float = Field(default=600.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    max_image_bytes: int = Field(default=DEFAULT_MAX_IMAGE_BYTES, gt=0, le=MAX_IMAGE_BYTES_LIMIT)
    max_image_pixels: int = Field(
        default=DEFAULT_MAX_IMAGE_PIXELS,
        ge=1,
        le=MAX_IMAGE_PIXELS_LIMIT,
        description="Largest page decoded, in pixels (width x height, read from the header).",
    )

    lease_seconds: float = Field(
        default=60.0, gt=0, le=MAX_TIMEOUT_SECONDS, description="Lease window; renewed at 1/3."
    )
    idle_poll_seconds: float = Field(
        default=1.0, gt=0, le=MAX_POLL_SECONDS, description="Sleep when the queue is empty."
    )
    queue_listen: bool = Field(
        default=True,
        description="LISTEN for new jobs (instant pickup); off behind PgBouncer transaction mode.",
    )
    readiness_poll_seconds: float = Field(
        default=2.0, gt=0, le=MAX_POLL_SECONDS, description="Re-probe interval."
    )
    breaker_failures: int = Field(
        default=DEFAULT_BREAKER_FAILURES,
        ge=0,
        le=10_000,
        description="Jobs of one kind failing in a row with the same error class (none "
        "succeeding) after which a worker stops leasing that kind for BREAKER_PAUSE_SECONDS; "
        "0: never.",
    )
    breaker_pause_seconds: float = Field(
        default=DEFAULT_BREAKER_PAUSE_SECONDS,
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        description="How long an open breaker leases nothing of its kind before trying again.",
    )
    startup_checks: StartupChecks = Field(
        default="exit",
        description="run-worker's start-up checks of the store's credentials and the model: "
        "`exit` (code 2) when one fails, `wait` until they pass, or `off`.",
    )
    shutdown_grace_seconds: float = Field(
        default=DEFAULT_SHUTDOWN_GRACE_SECONDS,
        ge=0,
        le=MAX_TIMEOUT_SECONDS,
        description="On a stop signal, how long running jobs may finish before they are "
        "released; 0 releases at once.",
    )
    reap_retention_days: int = Field(
        default=7, ge=0, le=MAX_RETENTION_DAYS, description="Keep done jobs; 0 keeps all."
    )
    leader_lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=600,
        description="How long the maintenance leader's lease lasts (renewed at 1/3); a "
        "leader that dies is replaced within it.",
    )
    reclaim_interval_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="How often the leader reclaims expired leases (and dead-letters crash loops).",
    )
    reap_interval_seconds: float = Field(
        default=3600.0,
        ge=60,
        le=86400,
        description="How often the leader deletes done jobs older than REAP_RETENTION_DAYS.",
    )

    log_format: Literal["text", "json"] = Field(
        default="text", description="`json`: one JSON object per log line (job fields included)."
    )
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Serve Prometheus /metrics here; unset: off."
    )
    # Loopback by default: the metrics name jobs and error rates, and there is
    # no auth on /metrics. Set 0.0.0.0 where Prometheus scrapes from another host.
    metrics_host: str = Field(default="127.0.0.1", description="Address /metrics listens on.")
    metrics_sample_seconds: float = Field(
        default=15.0,
        gt=0,
        le=MAX_POLL_SECONDS,
        description="How often queue depth is sampled for the metrics.",
    )

    @field_validator("database_url", "listen_database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        """`value` unchanged if it is a PostgreSQL URL this service can use, else `ValueError`
        saying what is accepted (naming only the scheme: the URL may hold a password)."""
        # Unset or empty (as in a copied .env) means the default: the embedded
        # database for DATABASE_URL, DATABASE_URL for LISTEN_DATABASE_URL.
        if not value:
            return None
        scheme, separator, rest = value.partition("://")
        if not separator or not scheme or not rest:
            raise ValueError(f"not a URL; expected {POSTGRES_URL_EXAMPLE}")
        if scheme.lower() not in POSTGRES_URL_SCHEMES:
            accepted = ", ".join(f"{name}://" for name in POSTGRES_URL_SCHEMES)
            raise ValueError(
                f"{scheme}:// is not supported; PostgreSQL only ({accepted}), "
                f"e.g. {POSTGRES_URL_EXAMPLE}"
            )
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except (ArgumentError, ValueError) as exc:
            raise ValueError(f"not a valid URL ({exc}); expected {POSTGRES_URL_EXAMPLE}") from None
        return value

    @field_validator("database_schema")
    @classmethod
    def _schema_name(cls, value: str) -> str:
        return check_schema_name(value)

    @field_validator("storage_url")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        # `STORAGE_URL=` (empty, as in a copied .env) means unset: STORAGE_ROOT.
        if not value:
            return None
        return str(S3Location.parse(value.strip()))

    @field_validator("vision_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str | None) -> str | None:
        # `VISION_URL=` (empty, as in a copied .env) means unset.
        return (value.rstrip("/") or None) if value else None

    @field_validator("vision_backend", mode="before")
    @classmethod
    def _backend_lower_case(cls, value: object) -> object:
        return (value.strip().lower() or None) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _http_needs_a_url(self) -> Settings:
        if self.vision_backend == "http" and not self.vision_url:
            raise ValueError(
                f"VISION_BACKEND=http needs VISION_URL (llama-server: {DEFAULT_VISION_URL})"
            )
        return self

    @property
    def backend(self) -> VisionBackend:
        """The analyzer: `VISION_BACKEND`, else `http` when `VISION_URL` is set, else `ocr`."""
        return self.vision_backend or ("http" if self.vision_url else "ocr")

    @property
    def health_url(self) -> str | None:
        """The readiness probe URL, `{VISION_URL}/health` unless set; `None` without a URL."""
        return self.vision_health_url or (f"{self.vision_url}/health" if self.vision_url else None)
