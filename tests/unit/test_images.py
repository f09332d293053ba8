"""prepare_image: pass PNG/JPEG through, re-encode the rest, scale down, refuse bombs."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from PIL import Image, PngImagePlugin

from manga_page_analysis.analysis.analyzer.prepared_image import (
    PreparedImage,
    data_url,
    prepare_image,
)
from manga_page_analysis.errors import ImageError


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **params)
    return out.getvalue()


def decode(prepared: PreparedImage) -> Image.Image:
    image = Image.open(io.BytesIO(prepared.data))
    image.load()
    return image


def gradient(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    """A non-uniform image, so encoders cannot hide mistakes behind a flat colour."""
    image = Image.linear_gradient("L").resize(size)
    return image if mode == "L" else image.convert(mode)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares `width` × `height` (1-bit grey) but carries almost no data.

    Enough for Pillow's header parser; decoding it would fail, so a refusal that
    mentions a bomb proves the refusal came from the header.
    """

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture
def no_png_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any PNG pixel data is decoded."""

    def refuse(self: Image.Image) -> None:
        raise AssertionError("PNG pixels were decoded")

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", refuse)


@pytest.mark.parametrize("fmt, mime", [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_png_and_jpeg_within_limits_pass_through_unchanged(fmt: str, mime: str) -> None:
    data = encode(gradient((300, 200)), fmt)
    prepared = prepare_image(data)
    assert prepared == PreparedImage(mime, data, 300, 200, reencoded=False)


def test_greyscale_and_paletted_png_pass_through() -> None:
    for image in (gradient((64, 64), "L"), gradient((64, 64)).convert("P")):
        data = encode(image, "PNG")
        assert prepare_image(data).data == data


def test_image_exactly_at_the_side_limit_passes_through() -> None:
    data = encode(gradient((1600, 900)), "JPEG")
    assert prepare_image(data, max_side_px=1600).reencoded is False


def test_webp_is_reencoded_to_jpeg() -> None:
    source = gradient((320, 240))
    prepared = prepare_image(encode(source, "WEBP", quality=95))
    assert (prepared.mime, prepared.reencoded) == ("image/jpeg", True)
    assert (prepared.width, prepared.height) == (320, 240)
    image = decode(prepared)
    assert (image.format, image.size, image.mode) == ("JPEG", (320, 240), "RGB")
    # Same picture, not just any JPEG of the right size.
    assert abs(image.getpixel((160, 200))[0] - source.getpixel((160, 200))[0]) < 12  # type: ignore[index]


def test_rgba_webp_keeps_its_alpha_as_png() -> None:
    source = gradient((100, 80), "RGBA")
    source.putalpha(Image.linear_gradient("L").resize((100, 80)))
    prepared = prepare_image(encode(source, "WEBP", lossless=True))
    assert (prepared.mime, prepared.reencoded) == ("image/png", True)
    image = decode(prepared)
    assert image.format == "PNG"
    assert image.mode == "RGBA"
    assert image.getpixel((50, 0))[3] < 10  # type: ignore[index]
    assert image.getpixel((50, 79))[3] > 245  # type: ignore[index]


def test_gif_with_palette_transparency_becomes_png_and_without_becomes_jpeg() -> None:
    opaque = gradient((60, 40)).convert("P")
    transparent = opaque.copy()
    transparent.info["transparency"] = 0
    assert prepare_image(encode(transparent, "GIF", transparency=0)).mime == "image/png"
    assert prepare_image(encode(opaque, "GIF")).mime == "image/jpeg"


def test_greyscale_bmp_stays_greyscale_jpeg() -> None:
    prepared = prepare_image(encode(gradient((50, 50), "L"), "BMP"))
    assert prepared.mime == "image/jpeg"
    assert decode(prepared).mode == "L"


def test_cmyk_jpeg_is_reencoded_as_rgb() -> None:
    # llama.cpp's image decoder cannot read CMYK JPEGs.
    prepared = prepare_image(encode(gradient((80, 60), "CMYK"), "JPEG"))
    assert prepared.reencoded
    assert decode(prepared).mode == "RGB"


@pytest.mark.parametrize(
    "size, expected", [((4000, 1000), (1600, 400)), ((1000, 4000), (400, 1600))]
)
def test_large_image_is_scaled_down_keeping_aspect(
    size: tuple[int, int], expected: tuple[int, int]
) -> None:
    prepared = prepare_image(encode(gradient(size), "PNG", compress_level=1))
    assert prepared.reencoded
    assert (prepared.width, prepared.height) == expected
    assert decode(prepared).size == expected


def test_large_jpeg_is_scaled_to_exactly_the_limit() -> None:
    # JPEG takes the reduced-scale decoding path first; the result must still be exact.
    prepared = prepare_image(encode(gradient((3300, 2200)), "JPEG"), max_side_px=1000)
    assert (prepared.width, prepared.height) == (1000, 667)
    assert decode(prepared).size == (1000, 667)


def test_exif_rotated_jpeg_is_turned_upright() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways; viewers rotate 90° clockwise
    prepared = prepare_image(encode(gradient((120, 60)), "JPEG", exif=exif))
    assert prepared.reencoded
    assert (prepared.width, prepared.height) == (60, 120)


def test_pixel_limit_is_inclusive() -> None:
    data = encode(gradient((100, 100)), "PNG")
    assert prepare_image(data, max_pixels=10_000).reencoded is False
    with pytest.raises(ImageError, match="more than MAX_IMAGE_PIXELS"):
        prepare_image(encode(gradient((100, 101)), "PNG"), max_pixels=10_000)


@pytest.mark.usefixtures("no_png_decoding")
def test_bomb_is_refused_from_its_header_before_decoding() -> None:
    with pytest.raises(
        ImageError,
        match=r"too large to decode: 6000x5000 is 30000000 pixels, more than "
        r"MAX_IMAGE_PIXELS \(20000000\); refused before decoding",
    ):
        prepare_image(png_header_only(6000, 5000), max_pixels=20_000_000)


@pytest.mark.usefixtures("no_png_decoding")
def test_the_default_cap_refuses_a_9400_square_page_from_its_header() -> None:
    # 343 KB of flat RGBA PNG decodes to 353 MB: the file's size says nothing.
    with pytest.raises(ImageError, match=r"9400x9400 is 88360000 pixels.*MAX_IMAGE_PIXELS"):
        prepare_image(png_header_only(9400, 9400))


@pytest.mark.usefixtures("no_png_decoding")
def test_bomb_past_pillows_hard_limit_is_an_image_error() -> None:
    # 20000 × 20000 is more than twice Image.MAX_IMAGE_PIXELS: Image.open itself raises.
    with pytest.raises(ImageError, match="decompression bomb"):
        prepare_image(png_header_only(20_000, 20_000), max_pixels=10**12)


@pytest.mark.usefixtures("no_png_decoding")
@pytest.mark.filterwarnings("error::PIL.Image.DecompressionBombWarning")
def test_pillow_bomb_warning_raised_as_error_becomes_image_error() -> None:
    # Between Pillow's limit and twice it, Image.open warns; under `-W error` that raises.
    with pytest.raises(ImageError, match="decompression bomb"):
        prepare_image(png_header_only(9500, 9500))


@pytest.mark.usefixtures("no_png_decoding")
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_pillow_limit_applies_even_when_max_pixels_is_higher() -> None:
    assert Image.MAX_IMAGE_PIXELS is not None
    assert Image.MAX_IMAGE_PIXELS < 9500 * 9500
    with pytest.raises(ImageError, match="decompression bomb"):
        prepare_image(png_header_only(9500, 9500), max_pixels=10**9)


@pytest.mark.parametrize(
    "data",
    [b"", b"definitely not an image", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40],
    ids=["empty", "text", "png-signature-only"],
)
def test_undecodable_bytes_are_an_image_error(data: bytes) -> None:
    with pytest.raises(ImageError, match="cannot decode page image"):
        prepare_image(data)


def test_truncated_png_is_caught_before_it_is_sent() -> None:
    data = encode(gradient((200, 200)), "PNG", compress_level=0)
    with pytest.raises(ImageError, match="cannot decode page image"):
        prepare_image(data[: len(data) // 2])


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"definitely not an image", "not an image Pillow can read (PNG, JPEG, WebP"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "not an image Pillow can read"),
        (encode(gradient((300, 300)), "JPEG")[:2000], "the JPEG file is damaged or cut short"),
        (encode(gradient((200, 200)), "PNG", compress_level=0)[:20000], "the PNG file is damaged"),
    ],
    ids=["text", "png-signature-only", "truncated-jpeg", "truncated-png"],
)
def test_decode_errors_say_what_is_wrong_without_python_reprs(data: bytes, expected: str) -> None:
    with pytest.raises(ImageError) as caught:
        prepare_image(data)
    message = str(caught.value)
    assert message.startswith("cannot decode page image: ") and expected in message
    assert "object at 0x" not in message and "BytesIO" not in message


def test_data_url_round_trips() -> None:
    data = encode(gradient((10, 10)), "PNG")
    prepared = prepare_image(data)
    url = data_url(prepared)
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    assert base64.b64decode(url[len(prefix) :]) == data
    jpeg = PreparedImage("image/jpeg", b"\xff\xd8", 1, 1, reencoded=False)
    assert data_url(jpeg) == "data:image/jpeg;base64,/9g="


def test_pillow_global_limit_is_left_alone() -> None:
    before = Image.MAX_IMAGE_PIXELS
    prepare_image(encode(gradient((10, 10)), "PNG"), max_pixels=100)
    with pytest.raises(ImageError):
        prepare_image(encode(gradient((10, 10)), "PNG"), max_pixels=99)
    assert before == Image.MAX_IMAGE_PIXELS
