"""Images attached in the chat: read, checked and thumbnailed on a worker before the composer shows them.

An image is checked by the same decoder the engine uses (images.py: formats, size and pixel limits), so a
file the model would refuse is refused when it is attached, with the reason, not after the send. What is
stored is the file itself when the engine would read it at full size, else the engine's scaled picture
re-encoded: a 48-megapixel photo is kept at most MAX_SIDE on its longer side, as the model sees it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.core.engines.base import ImageInput
from app.core.engines.inputs.images import MAX_IMAGE_BYTES, ImageRejected, decode_image

THUMB_SIDE = 96  # the composer's and the thread's thumbnails: their longer side, in pixels
MAX_ATTACHED = 8  # one message's images; a request takes 16 in all (images.MAX_IMAGES)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")


@dataclass(frozen=True)
class Attachment:
    """An image ready to send: `image` is what is stored and sent, `thumbnail` a small PNG to show."""

    image: ImageInput
    thumbnail: bytes
    name: str
    width: int
    height: int

    @property
    def label(self) -> str:
        return f"{self.name} · {self.width}×{self.height}"


def _png(picture) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def _thumbnail(width: int, height: int, rgb: bytes) -> bytes:
    from PIL import Image

    picture = Image.frombytes("RGB", (width, height), rgb)
    picture.thumbnail((THUMB_SIDE, THUMB_SIDE), Image.Resampling.BICUBIC)
    return _png(picture)


def prepare_image(data: bytes, name: str = "Pasted image") -> Attachment:
    """Any thread: `data` checked as the engine will check it, kept or scaled, and its thumbnail made.
    Raises ImageRejected with the reason."""
    from PIL import Image

    decoded = decode_image(data)
    with Image.open(io.BytesIO(data)) as original:  # decode_image read it: this is its header only
        full_size = original.size
    kept = data
    if full_size != (decoded.width, decoded.height):  # scaled down: keep what the model will see
        out = io.BytesIO()
        Image.frombytes("RGB", (decoded.width, decoded.height), decoded.rgb).save(out, format="JPEG", quality=92)
        kept = out.getvalue()
    return Attachment(
        ImageInput(data=kept),
        _thumbnail(decoded.width, decoded.height, decoded.rgb),
        name,
        decoded.width,
        decoded.height,
    )


def read_image_file(path: Path) -> Attachment:
    """Any thread: the image file at `path`, as `prepare_image`; its size is checked before it is read."""
    try:
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise ImageRejected(f"{path.name} is {size / 2**20:.1f} MiB, over the {MAX_IMAGE_BYTES >> 20} MiB limit")
        data = path.read_bytes()
    except OSError as exc:
        raise ImageRejected(f"{path.name} could not be read: {exc.strerror or exc}") from exc
    try:
        return prepare_image(data, path.name)
    except ImageRejected as exc:
        raise ImageRejected(f"{path.name}: {exc}") from exc


def thumbnails(images: Mapping[int, Sequence[ImageInput]]) -> dict[int, list[bytes]]:
    """Any thread: stored images' thumbnails by message id; one that no longer decodes gets b"" (shown as
    a blank tile), so a damaged image never hides the others."""
    out: dict[int, list[bytes]] = {}
    for msg_id, shown in images.items():
        tiles = []
        for image in shown:
            try:
                decoded = decode_image(image.data)
            except ImageRejected:
                tiles.append(b"")
            else:
                tiles.append(_thumbnail(decoded.width, decoded.height, decoded.rgb))
        out[msg_id] = tiles
    return out
