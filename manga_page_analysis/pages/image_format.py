"""What a page's bytes are: checked by decoding them (Pillow), never by the
file's name. The content type and the stored object's extension come from the
decoded format."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Final

from PIL import Image

from manga_page_analysis.analysis.analyzer.prepared_image import refuse_bombs, undecodable
from manga_page_analysis.config import DEFAULT_MAX_IMAGE_PIXELS
from manga_page_analysis.errors import ImageError, ImageTooLarge, NotAnImage

_CONTENT_TYPES: Final = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    # A camera JPEG with extra frames: its bytes are a JPEG.
    "MPO": ("image/jpeg", "jpg"),
    "WEBP": ("image/webp", "webp"),
    "GIF": ("image/gif", "gif"),
    "BMP": ("image/bmp", "bmp"),
}
"""Content type and extension per Pillow format: the formats a browser shows (the
admin page shows the page's image). Others Pillow reads (TIFF, TGA, PCX...) are
refused: the admin could only offer them as a download."""


@dataclass(frozen=True, slots=True)
class CheckedImage:
    content_type: str
    extension: str
    width: int
    height: int


def check_image(
    data: bytes, *, max_bytes: int, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
) -> CheckedImage:
    """`data` decoded to prove it is an image: `ImageTooLarge` past `max_bytes`
    or past `max_pixels` (or Pillow's `Image.MAX_IMAGE_PIXELS`, when lower;
    checked from the header, before decoding), `NotAnImage` when Pillow cannot
    decode it or a browser could not show it (`_CONTENT_TYPES`)."""
    if len(data) > max_bytes:
        raise ImageTooLarge(
            f"page image is {len(data)} bytes, more than the cap of {max_bytes} bytes"
        )
    if not data:
        raise NotAnImage("page image is empty (0 bytes)")
    source_format: str | None = None
    try:
        with Image.open(io.BytesIO(data)) as image:
            source_format = image.format or "unknown"
            width, height = image.size
            try:
                refuse_bombs(image.size, max_pixels)
            except ImageError as exc:
                raise ImageTooLarge(str(exc)) from None
            image.load()
    except ImageTooLarge:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageTooLarge(f"page image refused as a decompression bomb: {exc}") from exc
    except Exception as exc:
        raise NotAnImage(f"page data is not an image: {undecodable(exc, source_format)}") from exc
    if source_format not in _CONTENT_TYPES:
        raise NotAnImage(
            f"page image is {source_format}, which a browser cannot show; "
            "convert it to PNG, JPEG, WebP, GIF or BMP"
        )
    content_type, extension = _CONTENT_TYPES[source_format]
    return CheckedImage(content_type, extension, width, height)
