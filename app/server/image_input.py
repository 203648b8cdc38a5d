"""Images in API requests, as each API spells them, turned into the engine's ImageInput.

OpenAI's `image_url` parts and Responses' `input_image` carry a URL; Anthropic's `image` blocks a base64
`source` (or a URL); Ollama's `images` bare base64. A data URI or base64 is decoded here (its size bounded
before decoding). A web URL is kept as a URL (`WebImage`): the server fetches it before the job is queued
only if its settings allow, else refuses it with a clear 400 (web_images.py). Decoding the picture itself,
with its pixel bounds, is the engine's (app.core.engines.inputs.images), which answers a bad image with a 400
naming `images` before anything runs.
"""

from __future__ import annotations

import base64
import binascii
import re

from app.core.engines.base import ChatMessage, ImageInput
from app.core.engines.inputs.images import MAX_IMAGE_BYTES
from app.server.errors import APIError

DATA_URI = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[\w.+-]+=[^;,]*)*)(?P<b64>;base64)?,", re.I)


class WebImage(str):
    """An image named by an http(s) URL, to be fetched (or refused) before the job is queued."""


def image_bytes(text: str, param: str, *, bare_base64: bool = False) -> bytes | WebImage:
    """The file's bytes in a data URI (or, with `bare_base64`, plain base64 too), or the web URL to fetch
    (not with `bare_base64`: Ollama's images are base64 only); a 400 naming `param`."""
    match = DATA_URI.match(text)
    if match is None:
        if text.startswith(("http://", "https://")) and not bare_base64:
            return WebImage(text)
        if text.startswith(("http://", "https://")):
            raise APIError(
                "Hearth does not fetch images from the web: send the image itself as a data: URI "
                "(data:image/png;base64,…) or base64",
                param=param,
                code="image_url_not_allowed",
            )
        if not bare_base64:
            raise APIError("an image URL must be a data: URI (data:image/png;base64,…)", param=param)
        payload = text
    else:
        if match.group("type") and not match.group("type").lower().startswith("image/"):
            raise APIError(f"{match.group('type')} is not an image", param=param, code="invalid_image")
        if not match.group("b64"):
            raise APIError("an image data: URI must be base64 (;base64,)", param=param, code="invalid_image")
        payload = text[match.end() :]
    return decode_base64(payload, param)


def decode_base64(payload: str, param: str) -> bytes:
    if len(payload) * 3 // 4 > MAX_IMAGE_BYTES:
        raise APIError(
            f"an image is over the {MAX_IMAGE_BYTES >> 20} MiB limit", "request_too_large", param=param, status=413
        )
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise APIError(f"an image is not valid base64: {exc}", param=param, code="invalid_image") from exc


class PartsText:
    """A message's text and images as its parts come, each image at the offset where it sits in the text."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.images: list[ImageInput] = []
        self._length = 0

    def text(self, text: str) -> None:
        self.texts.append(text)
        self._length += len(text)

    def image(self, data: bytes | WebImage) -> None:
        if isinstance(data, WebImage):
            self.images.append(ImageInput(data=b"", offset=self._length, url=str(data)))
        else:
            self.images.append(ImageInput(data=data, offset=self._length))

    def message(self, role: str, **fields: object) -> ChatMessage:
        return ChatMessage(role=role, content="".join(self.texts), images=self.images or None, **fields)
