"""Images attached in the chat are checked as the engine checks them, kept as sent when the engine reads them
at full size, scaled when it would scale them, and thumbnailed; history carries them and keeps a request under
the engine's image limit."""

from __future__ import annotations

import io
import time

import pytest
from PIL import Image

from app.core.chat.attachments import THUMB_SIDE, prepare_image, read_image_file, thumbnails
from app.core.chat.context import history_for_request
from app.core.chat.models import Message
from app.core.engines.base import ImageInput
from app.core.engines.inputs import images
from app.core.engines.inputs.images import ImageRejected, decode_image


def encoded(size=(120, 60), color=(10, 200, 30), fmt="PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def test_a_small_image_is_kept_byte_for_byte_with_a_thumbnail_of_its_shape():
    data = encoded()
    attached = prepare_image(data, "leaf.png")
    assert attached.image.data == data and attached.image.offset == 0
    assert (attached.width, attached.height, attached.label) == (120, 60, "leaf.png · 120×60")
    with Image.open(io.BytesIO(attached.thumbnail)) as thumb:
        assert thumb.format == "PNG" and thumb.size == (THUMB_SIDE, THUMB_SIDE // 2)
        assert thumb.convert("RGB").getpixel((5, 5)) == (10, 200, 30)


def test_a_huge_photo_is_stored_as_the_model_will_see_it():
    data = encoded(size=(images.MAX_SIDE * 2, 1000), fmt="JPEG")
    attached = prepare_image(data)
    assert attached.image.data != data
    kept = decode_image(attached.image.data)
    assert (kept.width, kept.height) == (images.MAX_SIDE, 500) == (attached.width, attached.height)


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"", "empty"), (b"%PDF-1.7 not a picture", "could not be read"), (encoded()[:60], "damaged")],
)
def test_what_the_engine_would_refuse_is_refused_when_attached(data, why):
    with pytest.raises(ImageRejected, match=why):
        prepare_image(data)


def test_a_file_is_read_with_its_name_in_any_refusal(tmp_path):
    good = tmp_path / "ok.webp"
    good.write_bytes(encoded(fmt="WEBP"))
    assert read_image_file(good).name == "ok.webp"
    bad = tmp_path / "notes.png"
    bad.write_text("hello")
    with pytest.raises(ImageRejected, match=r"^notes\.png: "):
        read_image_file(bad)
    with pytest.raises(ImageRejected, match=r"gone\.png could not be read"):
        read_image_file(tmp_path / "gone.png")
    big = tmp_path / "big.png"
    with big.open("wb") as f:  # sparse: its size is refused before a byte is read
        f.truncate(images.MAX_IMAGE_BYTES + 1)
    with pytest.raises(ImageRejected, match=r"big\.png is 20\.0 MiB, over"):
        read_image_file(big)


def test_stored_thumbnails_survive_a_damaged_image():
    tiles = thumbnails({7: [ImageInput(data=encoded()), ImageInput(data=b"junk")]})
    assert tiles[7][1] == b"" and tiles[7][0].startswith(b"\x89PNG")


def _message(i: int, role: str, text: str) -> Message:
    now = time.time()
    return Message(i, 1, i - 1 or None, role, text, "done", now, now)


def test_history_keeps_the_newest_images_under_the_request_limit():
    old = [ImageInput(data=b"old%d" % i) for i in range(images.MAX_IMAGES - 2)]
    turns = [_message(1, "user", "first"), _message(2, "assistant", "seen")]

    class Unsent:
        role, content, status = "user", "and these?", "done"
        images = tuple(ImageInput(data=b"new%d" % i) for i in range(4))

    history = history_for_request("", [*turns, Unsent()], {1: old})
    assert history[-1].images == list(Unsent.images)  # the turn being sent keeps all of its own
    assert history[0].images == old[-(images.MAX_IMAGES - 4) :]  # the oldest two are left out
    assert sum(len(m.images or ()) for m in history) == images.MAX_IMAGES
