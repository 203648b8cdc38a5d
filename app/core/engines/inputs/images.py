"""Images for vision models, made safe before native code sees them.

An image arrives as a file's bytes from a request or the chat. It is decoded here, with Pillow, and only in
formats Pillow reads with its own code (no external delegates), with the encoded size, the pixel count (a
decompression bomb is refused before it is decoded) and the sides bounded; it is then flattened to RGB and
scaled down so its longer side is at most MAX_SIDE (a projector works at a few hundred pixels: more only costs
memory and time). The projector gets raw RGB rows, never the file. Its identity, for the prompt cache, is
the SHA-256 of those pixels: the same picture sent twice is read once.

Where images sit in a prompt: ChatMessage.images carry character offsets into the message's text; the engine
writes an unguessable marker at each offset before the template renders, and finds them in its output
(`with_markers`, `split_markers`), so text in a request can never stand for an image.
"""

from __future__ import annotations

import hashlib
import io
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from app.core.engines.base import ChatMessage
from app.core.engines.errors import InvalidRequest, Unsupported

MAX_IMAGE_BYTES = 20 << 20  # an encoded file; OpenAI's own limit for an image input
MAX_PIXELS = 40_000_000  # before decoding: a 40-megapixel photo is fine, a 50,000² bomb is not
MAX_SIDE = 2048  # after decoding: the longer side is scaled down to this
MAX_IMAGES = 16  # one request's images: each is hundreds of tokens and an encoder pass
# Formats Pillow decodes itself; nothing that hands the bytes to another program (EPS, PDF, ...).
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")


class ImageRejected(InvalidRequest):
    """An image that cannot be read safely; the message says why, for the user."""

    code = "invalid_image"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="images")


@dataclass(frozen=True)
class DecodedImage:
    """RGB pixels, rows top to bottom, 3 bytes a pixel."""

    width: int
    height: int
    rgb: bytes
    digest: str  # SHA-256 of the pixels and size: the image's identity in the prompt cache


def decode_image(data: bytes) -> DecodedImage:
    """The image in `data`, bounded and as RGB; raises ImageRejected with the reason."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise ImageRejected("an image is empty")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageRejected(f"an image is {len(data) / 2**20:.1f} MiB, over the {MAX_IMAGE_BYTES >> 20} MiB limit")
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            width, height = image.size
            if width < 1 or height < 1 or width * height > MAX_PIXELS:
                raise ImageRejected(
                    f"an image is {width}×{height} pixels, over the {MAX_PIXELS / 1e6:.0f}-megapixel limit"
                )
            image.seek(0)  # an animation: its first frame
            image.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a reduced scale when it can
            rgb = image.convert("RGB")
    except ImageRejected:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ImageRejected(f"an image could not be read ({', '.join(FORMATS)} are accepted): {exc}") from exc
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # truncated or corrupt data
        raise ImageRejected(f"an image is damaged and could not be decoded: {exc}") from exc
    if max(rgb.size) > MAX_SIDE:
        scale = MAX_SIDE / max(rgb.size)
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        rgb = rgb.resize(size, Image.Resampling.BICUBIC)
    pixels = rgb.tobytes()
    digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode() + pixels).hexdigest()
    return DecodedImage(rgb.width, rgb.height, pixels, digest)


def no_vision(model: str) -> Unsupported:
    """The refusal of an image by a model loaded without a projector."""
    return Unsupported(
        f"{model} cannot see images: it was loaded without a vision projector (an mmproj file)", param="images"
    )


def has_images(messages: list[ChatMessage] | None) -> bool:
    return any(m.images for m in messages or ())


def with_markers(messages: list[ChatMessage]) -> tuple[list[ChatMessage], str, list[bytes]]:
    """The messages with a marker at each image's offset, the markers' nonce, and the images' bytes in the
    order their markers appear."""
    nonce = secrets.token_hex(8)
    out: list[ChatMessage] = []
    images: list[bytes] = []
    for message in messages:
        if not message.images:
            out.append(message)
            continue
        text, pos, parts = message.content, 0, []
        for image in sorted(message.images, key=lambda i: i.offset):
            at = min(image.offset, len(text))
            parts += [text[pos:at], f"HEARTHIMG{nonce}N{len(images)}X"]
            images.append(image.data)
            pos = at
        parts.append(text[pos:])
        out.append(message.model_copy(update={"content": "".join(parts), "images": None}))
    if len(images) > MAX_IMAGES:
        raise ImageRejected(f"the request has {len(images)} images, over the {MAX_IMAGES} one request takes")
    return out, nonce, images


def split_markers(text: str, nonce: str) -> list[str | int]:
    """`text` cut at the image markers: the text pieces, and in between each marker's image index."""
    pieces: list[str | int] = []
    pos = 0
    for m in re.finditer(f"HEARTHIMG{nonce}N(\\d+)X", text):
        if m.start() > pos:
            pieces.append(text[pos : m.start()])
        pieces.append(int(m.group(1)))
        pos = m.end()
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces


def prompt_with_images(
    messages: list[ChatMessage],
    render: Callable[[list[ChatMessage]], list[tuple[str, bool]]],
    tokenize: Callable[[str, bool], list[int]],
    image_tokens: Callable[[DecodedImage], list[int]],
) -> list[int]:
    """A chat's prompt tokens, each image as the tokens `image_tokens` gives it. `render` gives the template's
    segments (text, is_content); images are found in the content by their markers, and decoded here."""
    marked, nonce, images = with_markers(messages)
    ids: list[int] = []
    for text, is_content in render(marked):
        for piece in split_markers(text, nonce) if is_content else [text]:
            if isinstance(piece, str):
                ids += tokenize(piece, not is_content) if piece else []
            else:
                ids += image_tokens(decode_image(images[piece]))
    return ids


# -- an image's place in the prompt cache ------------------------------------------------------------
# An image's positions enter a prompt as a run of one pseudo token id, negative so it can never be a vocabulary
# id, derived from the image's pixel hash: the caches compare prompts token by token, so a conversation that
# keeps its image finds it already computed, and a different image differs at its first position.


def pseudo_id(digest: str) -> int:
    """The id that stands for every position of one image: negative, 28 bits of its hash."""
    return -1 - int(digest[:7], 16)


def is_image(token: int) -> bool:
    return token < 0


def text_run(pending: list[int]) -> int:
    """How many of the pending tokens come before the next image: a batched step reads that text in its
    batch, and the image at a step of its own."""
    return next((i for i, t in enumerate(pending) if is_image(t)), len(pending))


def image_start(tokens: list[int], at: int) -> int:
    """`at`, or the start of the image run `at` falls inside: a cache hit never ends mid-image (its positions
    are encoded together, and bidirectionally in some families)."""
    if 0 < at < len(tokens) and is_image(tokens[at]):
        while at > 0 and tokens[at - 1] == tokens[at]:
            at -= 1
    return at
