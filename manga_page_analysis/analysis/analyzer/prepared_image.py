"""Turn stored page bytes into an image the vision server can take: PNG or JPEG, bounded size.

Pillow's global `Image.MAX_IMAGE_PIXELS` is honoured but never changed (it belongs to the host
process).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Final

from PIL import Image, ImageOps, UnidentifiedImageError

from manga_page_analysis.config import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_SIDE_PX
from manga_page_analysis.errors import ImageError, without_reprs

JPEG_QUALITY: Final = 90
"""Quality of re-encoded JPEGs: high enough to keep small lettering legible."""
READABLE_FORMATS: Final = "PNG, JPEG, WebP, GIF, BMP, TIFF, ..."
"""The common formats Pillow reads, named in the error for a file it cannot identify."""

_PASSTHROUGH_MIME: Final = {"PNG": "image/png", "JPEG": "image/jpeg", "MPO": "image/jpeg"}
"""Formats sent as they are. MPO is a camera JPEG with extra frames; its bytes are a JPEG."""
_EXIF_ORIENTATION: Final = 0x0112
_ALPHA_MODES: Final = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})


@dataclass(frozen=True)
class PreparedImage:
    """An image ready for the model: `data` is a PNG or JPEG file of `width` × `height`.

    `reencoded` is False when `data` is exactly the bytes read from storage.
    """

    mime: str
    data: bytes
    width: int
    height: int
    reencoded: bool
    original_size: tuple[int, int] | None = None
    """Width and height of the upright source image, when scaling changed them (OCR boxes
    are given in these pixels)."""


def prepare_image(
    data: bytes,
    *,
    max_side_px: int = DEFAULT_MAX_SIDE_PX,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> PreparedImage:
    """Validate `data` and return it as PNG or JPEG with a long side of at most `max_side_px`.

    Passes PNG/JPEG through unchanged (same bytes) when it needs no scaling, rotation or
    colour conversion. Re-encodes everything else (llama.cpp's stb_image reads neither WebP
    nor CMYK JPEG): to PNG when the image has transparency, to JPEG otherwise. Raises
    `ImageError` for undecodable data and, before decoding a pixel, for images declaring more
    than `max_pixels` pixels (the `MAX_IMAGE_PIXELS` setting: decoding costs about 4 bytes a
    pixel, and more while converting, whatever the file's size) or more than Pillow's
    `Image.MAX_IMAGE_PIXELS`.
    """
    if max_side_px < 1:
        raise ValueError(f"max_side_px must be >= 1, got {max_side_px}")
    if not data:
        raise ImageError("cannot decode page image: the file is empty (0 bytes)")
    source_format: str | None = None
    try:
        # Image.open reads only the header; it raises DecompressionBombError itself
        # for images past twice Pillow's limit. Under a host's `-W error` the
        # warning it emits past the limit arrives as an exception too.
        with Image.open(io.BytesIO(data)) as image:
            source_format = image.format
            refuse_bombs(image.size, max_pixels)
            return _prepare(image, data, max_side_px)
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError(f"page image refused as a decompression bomb: {exc}") from exc
    except Exception as exc:
        raise ImageError(f"cannot decode page image: {undecodable(exc, source_format)}") from exc


def undecodable(exc: Exception, source_format: str | None = None) -> str:
    """Why Pillow could not read an image, in words: `str()` of its errors can be a
    repr (`cannot identify image file <_io.BytesIO object at 0x7f…>`) or bare
    jargon (`Truncated File Read`). `source_format` is the format its header
    named, when Pillow got that far."""
    if isinstance(exc, UnidentifiedImageError):
        return f"not an image Pillow can read ({READABLE_FORMATS})"
    # Pillow's plugins signal corrupt input with many types (OSError,
    # SyntaxError, ValueError, struct.error, EOFError...); all mean the same here.
    detail = without_reprs(str(exc)) or type(exc).__name__
    what = f"the {source_format} file" if source_format else "the file"
    return f"{what} is damaged or cut short (Pillow: {detail})"


def data_url(image: PreparedImage) -> str:
    """`data:<mime>;base64,<data>`, the form OpenAI-compatible servers accept in `image_url`."""
    return f"data:{image.mime};base64,{base64.b64encode(image.data).decode('ascii')}"


def refuse_bombs(size: tuple[int, int], max_pixels: int) -> None:
    """Refuse by header size before decoding (`ImageError`): past `max_pixels`, or
    past Pillow's own `Image.MAX_IMAGE_PIXELS`.

    Pillow only warns between its limit and twice its limit, and turning that
    warning into an error would need `warnings.catch_warnings`, which mutates
    process-global state and is not thread-safe; comparing against the same
    limit here refuses exactly those images without touching global state.
    """
    width, height = size
    pixels = width * height
    pillow_limit = Image.MAX_IMAGE_PIXELS
    if pillow_limit is not None and pixels > pillow_limit:
        raise ImageError(
            f"page image refused as a decompression bomb: {width}x{height} "
            f"is {pixels} pixels, Pillow's limit is {pillow_limit}"
        )
    if pixels > max_pixels:
        raise ImageError(
            f"page image too large to decode: {width}x{height} is {pixels} pixels, "
            f"more than MAX_IMAGE_PIXELS ({max_pixels}); refused before decoding"
        )
    if width < 1 or height < 1:
        raise ImageError(f"cannot decode page image: empty size {width}x{height}")


def _prepare(image: Image.Image, original: bytes, max_side_px: int) -> PreparedImage:
    source_format = image.format or "unknown"
    width, height = image.size
    long_side = max(width, height)
    # Orientations 2..8 flip or rotate; anything else (1, missing, junk) means upright.
    orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
    needs_rotation = orientation in range(2, 9)
    # Orientations 5..8 turn the image a quarter: its upright width is the stored height.
    upright_size = (height, width) if orientation in range(5, 9) else (width, height)
    passthrough_mime = _PASSTHROUGH_MIME.get(source_format)
    # Model servers ignore EXIF orientation: a rotated photo is turned upright by re-encoding.
    if (
        passthrough_mime is not None
        and long_side <= max_side_px
        and image.mode not in ("CMYK", "YCbCr")
        and not needs_rotation
    ):
        # Decode once anyway: a truncated or corrupt file fails here with a
        # clear ImageError instead of as an opaque 400 from the model server.
        image.load()
        return PreparedImage(passthrough_mime, original, width, height, reencoded=False)

    if source_format == "JPEG" and long_side > max_side_px:
        # Let libjpeg decode at a reduced scale (1/2, 1/4, 1/8) that still
        # covers the target, which is much cheaper than a full decode.
        image.draft(None, _scaled_size(image.size, max_side_px))
    image.load()

    # Palette and single-colour transparency (GIF, paletted PNG/WebP) live in info.
    has_alpha = image.mode in _ALPHA_MODES or "transparency" in image.info
    oriented = ImageOps.exif_transpose(image) if needs_rotation else image
    converted = _convert_mode(oriented, has_alpha)
    if max(converted.size) > max_side_px:
        converted = converted.resize(
            _scaled_size(converted.size, max_side_px), Image.Resampling.LANCZOS
        )

    out = io.BytesIO()
    if has_alpha:
        converted.save(out, format="PNG")
        mime = "image/png"
    else:
        converted.save(out, format="JPEG", quality=JPEG_QUALITY)
        mime = "image/jpeg"
    out_width, out_height = converted.size
    original_size = None if upright_size == converted.size else upright_size
    return PreparedImage(
        mime, out.getvalue(), out_width, out_height, reencoded=True, original_size=original_size
    )


def _scaled_size(size: tuple[int, int], max_side_px: int) -> tuple[int, int]:
    """`size` scaled so its long side is `max_side_px`, keeping the aspect ratio."""
    width, height = size
    scale = max_side_px / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _convert_mode(image: Image.Image, has_alpha: bool) -> Image.Image:
    """A mode PNG/JPEG can store and resizing handles well (a palette would resize badly)."""
    if has_alpha:
        target = "LA" if image.mode in ("L", "LA", "La") else "RGBA"
    elif image.mode in ("L", "1"):
        # Most manga pages are greyscale: keep one channel, the JPEG is a third the size.
        target = "L"
    elif image.mode.startswith("I;16"):
        # 16-bit greyscale (PNG, TIFF): keep the top 8 bits instead of clipping at 255.
        return image.convert("I").point(lambda value: value / 256).convert("L")
    else:
        target = "RGB"
    return image if image.mode == target else image.convert(target)
