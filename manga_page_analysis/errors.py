"""One exception base class for the service; adapters translate driver errors into these."""

import re
import uuid

_OBJECT_REPR = re.compile(r" ?<[\w.]+ object at 0x[0-9a-fA-F]+>")
_CUT = " …[truncated]"


def without_reprs(message: str) -> str:
    """`message` with Python object reprs (`<_io.BytesIO object at 0x7f…>`) taken out:
    messages end up in `last_error`, events and the admin page, read by people."""
    return _OBJECT_REPR.sub("", message).strip()


def truncated(message: str, max_chars: int) -> str:
    """`message` cut to at most `max_chars` characters, ending ` …[truncated]` when cut:
    the one rule for error text stored in a bounded column."""
    if len(message) <= max_chars:
        return message
    return message[: max_chars - len(_CUT)] + _CUT


class ServiceError(Exception):
    """Base class of every error this package raises on purpose.

    `retryable` is `False` for errors no retry can fix: the runner then
    dead-letters the job at once instead of burning its attempts on backoff.
    `job_at_fault` is `False` for errors the job did not cause (the worker's
    credentials refused, a store or model server down for everyone, a model that
    is not there): the runner then gives the job back with its attempt refunded
    (docs/worker.md, "What is charged to a job").
    """

    retryable: bool = True
    job_at_fault: bool = True


class DatabaseUnavailable(ServiceError):
    """The database cannot take the call now: unreachable, shutting down, or
    refusing writes (a standby not yet promoted, a primary being demoted). The
    host's transaction is broken: roll it back, and try again later (a
    failover takes seconds). The driver's error is the `__cause__`."""


class PayloadError(ServiceError, ValueError):
    """A job payload that does not decode into one of the known kinds."""


class StorageError(ServiceError):
    """A page image that cannot be read: missing, too large, or outside the storage root."""


class ImageError(ServiceError):
    """A page image that cannot be decoded or prepared for the vision model."""

    retryable = False


class VisionError(ServiceError):
    """The vision model did not produce a valid analysis. `status_code` is the
    server's last HTTP status when there was one, else `None`."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class DispatchTimeout(ServiceError):
    """A dispatch ran past its deadline."""


class StorageKeyError(StorageError):
    """A storage key that is empty, malformed, resolves outside the storage root, or
    names something other than a regular file (a folder, a FIFO, a device)."""

    retryable = False


class ObjectNotFound(StorageError):
    """No object is stored under the key (no regular file, for a folder). Permanent:
    a page whose image is gone cannot be analysed by trying again."""

    retryable = False


class StorageUnavailable(StorageError):
    """The store could not be reached, timed out or answered 5xx, after the store
    client's own retries. Not the job's fault: the job is released, attempt refunded,
    and the worker leases nothing until the store answers reads again."""

    job_at_fault = False


class StorageRefused(StorageError):
    """The store refused the worker's credentials (401/403: `SignatureDoesNotMatch`,
    `InvalidAccessKeyId`, `AccessDenied` on a read the worker must be allowed to do),
    or the configured bucket does not exist: the worker's configuration, not the job."""

    job_at_fault = False


class ObjectTooLarge(StorageError):
    """A stored object is larger than the byte cap the caller asked for."""

    retryable = False


class VisionUnavailable(VisionError):
    """The vision server could not be reached or answered with 429/5xx.

    Transient: raised for one attempt inside the client's retry loop, and again
    (naming the last cause) once the client's retries run out. Not the job's fault:
    the job is released, attempt refunded (a job that keeps meeting it while other
    jobs succeed is charged: see `worker.breaker`).
    """

    job_at_fault = False


class VisionRejected(VisionError):
    """The vision server refused the request with a 4xx other than 429; retrying won't help."""


class VisionRefused(VisionRejected):
    """The vision server (or a proxy before it) refused our credentials (401/403):
    `VISION_API_KEY` is the worker's configuration, not the job's fault."""

    job_at_fault = False


class VisionModelMissing(VisionRejected):
    """The vision server answered 404: it has no model of the configured name
    (`VISION_MODEL`), or no chat route at `VISION_URL`. Not the job's fault."""

    job_at_fault = False


class VisionCancelled(VisionError):
    """The caller's cancel event was set; no further attempt was started."""


class VisionProtocolError(VisionError):
    """The server answered 2xx with something that is not an OpenAI chat completion."""


class AdminError(ServiceError):
    """An admin request that cannot be served as asked; `status`/`code` say how to answer."""

    status: int = 400
    code: str = "bad_request"
    retryable = False


class BadRequest(AdminError):
    """400 `bad_request`, the defaults of `AdminError`."""


class NotFound(AdminError):
    status = 404
    code = "not_found"


class Conflict(AdminError):
    status = 409
    code = "conflict"


class UnsupportedImage(AdminError):
    """415: a stored page image is in no format a browser shows; it is not served."""

    status = 415
    code = "unsupported_media_type"


class NoSuchPage(ServiceError, LookupError):
    """A request for analysis named ids that are no page; nothing was queued.
    `page_ids` are the unknown ones, in the order asked."""

    retryable = False

    def __init__(self, page_ids: list[uuid.UUID]) -> None:
        self.page_ids = page_ids
        shown = ", ".join(str(page_id) for page_id in page_ids[:5])
        more = f" and {len(page_ids) - 5} more" if len(page_ids) > 5 else ""
        super().__init__(f"no such page: {shown}{more}")


class NoSuchManga(ServiceError, LookupError):
    """A chapter was asked for in a manga id that is no manga."""

    retryable = False


class NoSuchChapter(ServiceError, LookupError):
    """A page was added to a chapter id that is no chapter."""

    retryable = False


class PageExists(ServiceError):
    """The chapter already has a page of that number; `page_id` is that page."""

    retryable = False

    def __init__(self, message: str, *, page_id: uuid.UUID) -> None:
        super().__init__(message)
        self.page_id = page_id


class PageRefused(ServiceError, ValueError):
    """Data given as a page that cannot be one: nothing was stored."""

    retryable = False


class NotAnImage(PageRefused):
    """The page's data does not decode as an image."""


class ImageTooLarge(PageRefused):
    """The page's data is larger than the byte cap, or declares more pixels than allowed."""


class NotAPageId(ServiceError, ValueError):
    """A page id that is not a UUID (nor its text); nothing was queued."""

    retryable = False

    def __init__(self, value: object) -> None:
        self.value = value
        shown = truncated(repr(value), 80)
        super().__init__(
            f"{shown} is not a page id: give the page's UUID, as a uuid.UUID or its text "
            "(such as '0b6f4c4e-6a0e-4d55-9a39-2f6f6d3c1a7e')"
        )


class TablesNotFound(ServiceError):
    """A table of this package is not where the engine's options say it is: the
    database was never migrated there, or the engine lacks `schema_options`."""

    retryable = False
