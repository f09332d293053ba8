"""`S3Storage`: page images in an S3-compatible bucket (AWS S3, Cloudflare R2, Backblaze B2,
MinIO, SeaweedFS, Ceph), through boto3 (the optional `[s3]` extra).

Endpoint, region and credentials come from boto3's own chain: the `AWS_*` variables
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL` for a
store that is not AWS), `AWS_PROFILE` and the shared config files, instance roles.
Nothing here reads or keeps a credential; error messages are built from the store's
error code and HTTP status, never from a request, so no credential can reach a log
line, an event or `last_error`.

One `S3Storage` holds one boto3 client (thread-safe once built; a boto3 session is
not, so the session is used only here, in the constructor) with a connection pool
for every worker thread, plus a second client without retries for `readiness()`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from manga_page_analysis.errors import (
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from manga_page_analysis.storage.base import StoreReadiness, check_key, read_capped

S3_SCHEME: Final = "s3://"
DEFAULT_MAX_ATTEMPTS: Final = 4
"""Tries of one request (botocore's `standard` retry mode: 5xx, throttling, timeouts and
dropped connections are retried with jittered exponential backoff, at most 1+2+4 s)."""
DEFAULT_CONNECT_TIMEOUT_SECONDS: Final = 5.0
"""Connect timeout of one request to the store."""
DEFAULT_READ_TIMEOUT_SECONDS: Final = 30.0
"""Longest silence of the store while answering one request."""
DEFAULT_READ_DEADLINE_SECONDS: Final = 150.0
"""Longest whole read of one object, retries and body included: a store that sends a
byte every 20 s is never silent for `read_timeout`, and would hold a worker (or a web
thread serving a page's image) for as long as it likes."""
PROBE_TIMEOUT_SECONDS: Final = 2.0
"""Connect and read timeout of one readiness probe (no retries)."""
MIN_POOL_CONNECTIONS: Final = 10
"""Connections kept open to the store at least (botocore's default)."""
CHECKSUM_METADATA: Final = "sha256"
"""User metadata (`x-amz-meta-sha256`) written with every object: its bytes' SHA-256, hex."""
BUCKET_NAME: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
"""S3's rule for a bucket name: 3 to 63 lower-case letters, digits, `.` and `-`,
starting and ending with a letter or a digit (and no `..`, no IP address)."""
_IP_ADDRESS: Final = re.compile(r"\d+\.\d+\.\d+\.\d+")
PROBE_KEY: Final = ".readiness-probe"
"""The key `readiness()` reads while it knows no page key that was read: it need not exist
(a 404 `NoSuchKey` proves the store answers and took our signature)."""
CREDENTIAL_CODES: Final = frozenset(
    {
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidSecurity",
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "Unauthorized",
        "Forbidden",
    }
)
"""Error codes of a store that refuses the worker (its credentials or its rights), not
the object asked for."""


@dataclass(frozen=True, slots=True)
class S3Location:
    """Where `STORAGE_URL=s3://bucket/prefix` points: `prefix` has no leading or trailing `/`."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """`ValueError` (saying what is accepted) unless `url` is `s3://bucket[/prefix]`."""
        if not url.startswith(S3_SCHEME):
            raise ValueError(f"{url!r} is not an s3:// URL; expected s3://bucket/prefix")
        bucket, _, prefix = url.removeprefix(S3_SCHEME).partition("/")
        if "@" in bucket or ":" in bucket:
            # Not echoed: what stands before the `@` may be a secret key.
            raise ValueError(
                "an s3:// URL holds no credentials; expected s3://bucket/prefix, with the "
                "credentials in the AWS_* variables or a profile"
            )
        if not bucket:
            raise ValueError(f"{url!r} names no bucket; expected s3://bucket/prefix")
        if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket or _IP_ADDRESS.fullmatch(bucket):
            raise ValueError(
                f"{bucket[:80]!r} is not a valid bucket name (3 to 63 lower-case letters, "
                "digits, '.' and '-', starting and ending with a letter or a digit); "
                "expected s3://bucket/prefix"
            )
        prefix = prefix.strip("/")
        if prefix:
            try:
                check_key(prefix)
            except StorageError as exc:
                raise ValueError(
                    f"the prefix of {url[:120]!r} is not a plain path ({exc}); "
                    "expected s3://bucket/prefix"
                ) from None
        return cls(bucket, prefix)

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    def object_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What `S3Storage.describe` knows of a stored object; `sha256` is `None` when it was
    written by something else than this package."""

    size: int
    sha256: str | None
    content_type: str | None


class S3Storage:
    """Objects under `location` (a bucket and a key prefix); a page's key is appended to
    the prefix. `client` and `probe_client` default to clients built from boto3's chain."""

    def __init__(
        self,
        location: S3Location | str,
        *,
        max_pool_connections: int = MIN_POOL_CONNECTIONS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        read_timeout: float = DEFAULT_READ_TIMEOUT_SECONDS,
        read_deadline: float = DEFAULT_READ_DEADLINE_SECONDS,
        client: Any = None,
        probe_client: Any = None,
    ) -> None:
        self.location = S3Location.parse(location) if isinstance(location, str) else location
        self.max_attempts = max_attempts
        self.read_deadline = read_deadline
        if client is None or probe_client is None:
            import boto3.session
            from botocore.config import Config

            session = boto3.session.Session()

            def build(config: Config) -> Any:
                built = session.client("s3", config=config)
                if _on_aws(built.meta.endpoint_url):
                    return built
                # MinIO, SeaweedFS, Ceph, R2, B2 behind AWS_ENDPOINT_URL all serve
                # path-style requests; a bucket as a host name needs DNS set up for it.
                return session.client("s3", config=config.merge(Config(s3=_PATH_STYLE)))

            if client is None:
                client = build(
                    Config(
                        retries={"mode": "standard", "total_max_attempts": max_attempts},
                        connect_timeout=connect_timeout,
                        read_timeout=read_timeout,
                        max_pool_connections=max(max_pool_connections, MIN_POOL_CONNECTIONS),
                    )
                )
            if probe_client is None:
                probe_client = build(
                    Config(
                        retries={"mode": "standard", "total_max_attempts": 1},
                        connect_timeout=PROBE_TIMEOUT_SECONDS,
                        read_timeout=PROBE_TIMEOUT_SECONDS,
                        max_pool_connections=1,
                    )
                )
        self._client = client
        self._probe_client = probe_client
        # Whether the store may be down: true until a probe has seen it answer, and again
        # after a request that found it unreachable. While false, `readiness` sends nothing.
        self._suspect = True
        # The last page object read whole: what `readiness` reads to tell a store whose
        # data answers from one whose metadata alone does.
        self._good_key: str | None = None

    def __repr__(self) -> str:
        return f"S3Storage({str(self.location)!r})"

    @property
    def name(self) -> str:
        """What log lines call it: the bucket, the prefix and the endpoint."""
        endpoint = getattr(self._client.meta, "endpoint_url", "")
        return f"{self.location} at {endpoint}" if endpoint else str(self.location)

    def read_bytes(self, key: str, max_bytes: int) -> bytes:
        """The whole object; `ObjectTooLarge` past `max_bytes` (refused on its announced
        size before any byte is read, and again while streaming), `ObjectNotFound` when
        there is none, `StorageUnavailable` once the retries for a timeout or a 5xx ran out,
        or when the whole read took longer than `read_deadline` (a watchdog then shuts
        the connection's socket, which ends a receive that is waiting)."""
        check_key(key)
        deadline = time.monotonic() + self.read_deadline
        response = self._call("get", key, self._client.get_object)
        body = response["Body"]
        try:
            size = response.get("ContentLength")
            if size is not None and size > max_bytes:
                raise ObjectTooLarge(
                    f"object {key!r} ({size} bytes) exceeds the cap of {max_bytes} bytes"
                )
            dropped: tuple[type[Exception], ...] = (OSError, *_stream_errors())
            # botocore's own body is read (it checks the length, and a checksum the
            # store sends); the watchdog ends it from outside when the time is up.
            watchdog = _Watchdog(body, deadline - time.monotonic())
            data = b""
            try:
                data = read_capped(body, max_bytes, label=repr(key))
            except dropped as exc:
                if not watchdog.fired.is_set():
                    self._suspect = True
                    raise StorageUnavailable(
                        f"the page store dropped the read of {key!r}: {type(exc).__name__}"
                    ) from None
            finally:
                watchdog.cancel()
            if watchdog.fired.is_set():
                self._suspect = True
                raise StorageUnavailable(
                    f"the page store sent object {key!r} too slowly: not whole after "
                    f"{self.read_deadline:g} s"
                )
            self._good_key = key
            return data
        finally:
            # Before the end of the body this drops the connection rather than
            # reading on: a 2 GB object costs a reconnect, not a download.
            body.close()

    def write_bytes(self, key: str, data: bytes, *, content_type: str) -> None:
        """One PutObject: the store shows the old object or the whole new one, never a part.
        `Content-MD5` makes the store check the bytes it got; their SHA-256 goes along
        as metadata for `describe` (and `storage copy`'s verification)."""
        check_key(key)
        self._call(
            "put",
            key,
            self._client.put_object,
            Body=data,
            ContentType=content_type,
            ContentMD5=base64.b64encode(hashlib.md5(data).digest()).decode(),
            Metadata={CHECKSUM_METADATA: hashlib.sha256(data).hexdigest()},
        )

    def delete(self, key: str) -> None:
        check_key(key)
        self._call("delete", key, self._client.delete_object)

    def describe(self, key: str) -> ObjectInfo | None:
        """Size, checksum and content type of the object under `key`; `None` when there is none."""
        check_key(key)
        try:
            head = self._call("head", key, self._client.head_object)
        except ObjectNotFound:
            return None
        metadata = head.get("Metadata") or {}
        return ObjectInfo(
            size=int(head["ContentLength"]),
            sha256=metadata.get(CHECKSUM_METADATA),
            content_type=head.get("ContentType"),
        )

    def readiness(self) -> StoreReadiness:
        """Ready without a request while the store is known to answer (reads succeed);
        otherwise (before the first probe, after a read that found the store down or
        refusing us) one real read, no retries, 2 s: the first byte of the last page
        object read, or `PROBE_KEY` before any was (its 404 is a ready answer). A store
        whose metadata answers while its data does not (half back from a restart) is
        not ready; one that refuses our credentials says so."""
        if not self._suspect:
            return StoreReadiness(ready=True)
        answer = self.probe_read(self._good_key)
        if answer.ready:
            self._suspect = False
        return answer

    def probe_read(self, key: str | None = None) -> StoreReadiness:
        """Read the first byte of `key` (`PROBE_KEY` when `None`) with the probe client
        (no retries): ready when it arrives, or when the store says there is no such
        object; not ready, with the reason naming the store, for anything else."""
        from botocore.exceptions import BotoCoreError, ClientError

        asked = key or PROBE_KEY
        try:
            response = self._probe_client.get_object(
                Bucket=self.location.bucket, Key=self.location.object_key(asked), Range="bytes=0-0"
            )
            response["Body"].close()
        except ClientError as exc:
            error = self._translated(exc, "read", asked)
            if key is None and _code(exc) == "AccessDenied":
                # S3 answers a missing key with 403 AccessDenied to credentials that may
                # not list the bucket: signed correctly, the store took them.
                return StoreReadiness(ready=True)
            if isinstance(error, ObjectNotFound):
                if key is not None and self._good_key == key:
                    self._good_key = None  # gone since: the next probe reads PROBE_KEY
                return StoreReadiness(ready=True)
            refused = isinstance(error, StorageRefused)
            return StoreReadiness(
                ready=False, reason=self._probe_reason(exc, error), refused=refused
            )
        except BotoCoreError as exc:
            return StoreReadiness(ready=False, reason=f"unreachable ({type(exc).__name__})")
        return StoreReadiness(ready=True)

    def _probe_reason(self, exc: Any, error: StorageError) -> str:
        """Why a probe read failed, as the end of a line that begins with the store's name."""
        status = _status(exc)
        code = str(exc.response.get("Error", {}).get("Code", "")) or "no error code"
        if code == "NoSuchBucket":
            return f"has no bucket {self.location.bucket!r} (STORAGE_URL)"
        if isinstance(error, StorageRefused):
            return f"refused our credentials ({status} {code})"
        return f"answered {status} {code} to a read"

    def _call(self, verb: str, key: str, operation: Any, **arguments: Any) -> Any:
        """`operation` on `key`, its botocore errors turned into `StorageError`s."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return operation(
                Bucket=self.location.bucket, Key=self.location.object_key(key), **arguments
            )
        except ClientError as exc:
            error = self._translated(exc, verb, key)
            if not error.job_at_fault:
                self._suspect = True  # readiness reads again before the next lease
            raise error from None
        except BotoCoreError as exc:
            # Connection refused or reset, timeouts: botocore already retried them.
            self._suspect = True
            raise StorageUnavailable(
                f"cannot {verb} object {key!r} in {self.location}: the page store is "
                f"unreachable ({type(exc).__name__}) after {self.max_attempts} tries"
            ) from None

    def _translated(self, exc: Any, verb: str, key: str) -> StorageError:
        status = _status(exc)
        code = str(exc.response.get("Error", {}).get("Code", "")) or "no error code"
        tries = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        if code in ("NoSuchKey", "NotFound") or (status == 404 and code != "NoSuchBucket"):
            return ObjectNotFound(f"no object stored under key {key!r} in {self.location}")
        if code == "NoSuchBucket":
            return StorageRefused(f"bucket {self.location.bucket!r} does not exist (STORAGE_URL)")
        if status is None or status >= 500 or code in ("SlowDown", "RequestTimeout"):
            return StorageUnavailable(
                f"cannot {verb} object {key!r} in {self.location}: the page store answered "
                f"{status} {code} after {tries} tries"
            )
        refused = (
            StorageRefused if status in (401, 403) or code in CREDENTIAL_CODES else StorageError
        )
        return refused(
            f"the page store refused to {verb} object {key!r} in {self.location}: "
            f"{code} (HTTP {status})"
        )


class _Watchdog:
    """Shuts the socket under a response body down once `seconds` have passed: a
    store that sends a byte every 20 s is never silent for `read_timeout`, and a
    receive waiting on it can only be ended from outside. `fired` says it did."""

    def __init__(self, body: Any, seconds: float) -> None:
        self.fired = threading.Event()
        self._socket = _socket_of(body)
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired.set()
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def _socket_of(body: Any) -> socket.socket | None:
    # botocore's StreamingBody -> urllib3's HTTPResponse -> its connection's socket.
    connection = getattr(getattr(body, "_raw_stream", None), "_connection", None)
    sock = getattr(connection, "sock", None)
    return sock if isinstance(sock, socket.socket) else None


_PATH_STYLE: Final = {"addressing_style": "path"}


def _on_aws(endpoint_url: str) -> bool:
    from urllib.parse import urlsplit

    host = urlsplit(endpoint_url).hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: Any) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _stream_errors() -> tuple[type[Exception], ...]:
    """What a StreamingBody's read raises when the connection fails mid-body."""
    from botocore.exceptions import BotoCoreError
    from urllib3.exceptions import HTTPError

    return (BotoCoreError, HTTPError)
