"""What `add_page` takes as an image: decoded, typed by its format, capped."""

from __future__ import annotations

import pytest

from manga_page_analysis.errors import ImageTooLarge, NotAnImage
from manga_page_analysis.pages.image_format import check_image
from tests.worker_support import png_bytes


@pytest.mark.parametrize(
    ("fmt", "content_type", "extension"),
    [
        ("PNG", "image/png", "png"),
        ("JPEG", "image/jpeg", "jpg"),
        ("WEBP", "image/webp", "webp"),
        ("GIF", "image/gif", "gif"),
        ("BMP", "image/bmp", "bmp"),
    ],
)
def test_the_content_type_comes_from_the_decoded_format(fmt, content_type, extension):
    checked = check_image(png_bytes(size=(30, 40), fmt=fmt), max_bytes=10**6)
    assert (checked.content_type, checked.extension) == (content_type, extension)
    assert (checked.width, checked.height) == (30, 40)


def test_pixels_past_the_limit_are_refused_before_decoding():
    data = png_bytes(size=(100, 100))
    assert check_image(data, max_bytes=10**6, max_pixels=10_000).width == 100
    with pytest.raises(ImageTooLarge, match=r"10000 pixels, more than MAX_IMAGE_PIXELS \(9999\)"):
        check_image(data, max_bytes=10**6, max_pixels=9_999)


def test_a_text_file_named_like_an_image_is_not_one():
    with pytest.raises(NotAnImage, match="not an image Pillow can read"):
        check_image(b"hello, world\n" * 10, max_bytes=10**6)


@pytest.mark.parametrize("fmt", ["TIFF", "TGA", "PCX"])
def test_a_format_no_browser_shows_is_refused(fmt):
    with pytest.raises(NotAnImage, match=f"{fmt}, which a browser cannot show"):
        check_image(png_bytes(size=(30, 40), fmt=fmt), max_bytes=10**6)
