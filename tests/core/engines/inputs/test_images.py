"""Images are decoded in pure Python before any native code sees them: bounded in bytes, pixels and sides,
only in formats Pillow reads itself, flattened to RGB; a bad one is an ImageRejected naming `images`. Their
markers are written at the messages' offsets and cannot be forged by text."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from app.core.engines.base import ChatMessage, ImageInput
from app.core.engines.inputs import images
from app.core.engines.inputs.images import ImageRejected, decode_image, split_markers, with_markers


def encoded(size=(40, 30), color=(200, 30, 60), fmt="PNG", mode="RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color).save(out, format=fmt)
    return out.getvalue()


def test_a_png_becomes_rgb_rows_and_its_digest_is_its_pixels():
    image = decode_image(encoded())
    assert (image.width, image.height, len(image.rgb)) == (40, 30, 40 * 30 * 3)
    assert image.rgb[:3] == bytes((200, 30, 60))
    # The same pixels in another format are the same image to the cache; other pixels are not.
    assert decode_image(encoded(fmt="BMP")).digest == image.digest
    assert decode_image(encoded(color=(200, 30, 61))).digest != image.digest


def test_transparency_and_palettes_are_flattened_to_rgb():
    assert len(decode_image(encoded(mode="RGBA", color=(1, 2, 3, 128))).rgb) == 40 * 30 * 3
    assert len(decode_image(encoded(fmt="GIF", mode="P", color=5)).rgb) == 40 * 30 * 3


def test_a_large_image_is_scaled_down_to_the_longest_side():
    image = decode_image(encoded(size=(images.MAX_SIDE * 2, 100), fmt="JPEG"))
    assert image.width == images.MAX_SIDE and image.height == 50


BAD = {
    "empty": b"",
    "not an image": b"hello, this is text",
    "cut off": encoded()[:60],
    "a format read by other programs": b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n",
    "TIFF, not accepted": encoded(fmt="TIFF"),
}


@pytest.mark.parametrize("data", BAD.values(), ids=BAD.keys())
def test_what_cannot_be_read_safely_is_refused_naming_images(data):
    with pytest.raises(ImageRejected) as caught:
        decode_image(data)
    assert caught.value.details["param"] == "images" and caught.value.code == "invalid_image"


def test_a_decompression_bomb_is_refused_before_it_is_decoded(monkeypatch):
    bomb = encoded(size=(3000, 3000), color=(0, 0, 0))  # a few KiB of PNG, 9 megapixels
    monkeypatch.setattr(images, "MAX_PIXELS", 4_000_000)
    with pytest.raises(ImageRejected, match="megapixel"):
        decode_image(bomb)


def test_too_many_bytes_is_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 100)
    with pytest.raises(ImageRejected, match="MiB"):
        decode_image(encoded())


def test_markers_sit_at_the_offsets_and_text_cannot_forge_one():
    red, blue = encoded(), encoded(color=(0, 0, 255))
    message = ChatMessage(
        role="user",
        content="HEARTHIMG0N0X look: and this",
        images=[ImageInput(data=blue, offset=28), ImageInput(data=red, offset=19)],
    )
    marked, nonce, data = with_markers([ChatMessage(role="system", content="hi"), message])
    assert marked[0].content == "hi" and marked[1].images is None
    assert data == [red, blue]  # in the order they appear
    assert split_markers(marked[1].content, nonce) == ["HEARTHIMG0N0X look:", 0, " and this", 1]


def test_more_images_than_a_request_takes_is_refused():
    many = [ImageInput(data=b"x", offset=0)] * (images.MAX_IMAGES + 1)
    with pytest.raises(ImageRejected, match="images"):
        with_markers([ChatMessage(role="user", content="", images=many)])
