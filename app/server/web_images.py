"""Images a request names by http(s) URL: fetched only when the server's settings allow it (off by default),
before the job is queued, with a time limit, a size cap and no credentials; else refused with a 400.

Fetching makes the server a client of any address a request names (T49 in docs/security.md): what comes back
is only ever decoded as an image, never echoed, and a failure says no more than the status or the type.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from app.core.engines.base import ChatMessage, GenerateRequest, ImageInput
from app.core.engines.inputs.images import MAX_IMAGE_BYTES
from app.server.errors import APIError

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 10.0
MAX_REDIRECTS = 3
_SHOWN_URL = 120  # characters of a URL an error repeats


def _shown(url: str) -> str:
    return url if len(url) <= _SHOWN_URL else url[:_SHOWN_URL] + "…"


def _refused(url: str, why: str, code: str = "image_url_unreadable", status: int = 400) -> APIError:
    return APIError(f"the image at {_shown(url)} could not be used: {why}", code=code, param="images", status=status)


class WebImageFetcher:
    """Fetches one image by URL (any thread; the server calls it off its event loop)."""

    def __init__(
        self,
        timeout_s: float = FETCH_TIMEOUT_S,
        max_bytes: int = MAX_IMAGE_BYTES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`transport`: for tests (httpx.MockTransport)."""
        self.timeout_s, self.max_bytes, self.transport = timeout_s, max_bytes, transport

    def fetch(self, url: str) -> bytes:
        """The image's bytes; an APIError (400, or 413 when too large) with the reason."""
        # No environment: no .netrc credentials or proxy settings meant for other programs ride along.
        client = httpx.Client(
            timeout=self.timeout_s,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            trust_env=False,
            transport=self.transport,
            headers={"Accept": "image/*", "User-Agent": "Hearth"},
        )
        try:
            with client, client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise _refused(url, f"the server answered HTTP {response.status_code}")
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if not kind.startswith("image/"):
                    raise _refused(url, f"it is {kind or 'of no stated type'}, not an image", "invalid_image")
                too_big = _refused(
                    url, f"it is over the {self.max_bytes >> 20} MiB limit", "request_too_large", status=413
                )
                if int(response.headers.get("content-length") or 0) > self.max_bytes:
                    raise too_big
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > self.max_bytes:  # a length header can lie, or be absent
                        raise too_big
                return bytes(data)
        except httpx.TimeoutException as exc:
            raise _refused(url, f"it did not arrive within {self.timeout_s:g} s") from exc
        except httpx.TooManyRedirects as exc:
            raise _refused(url, f"it redirected more than {MAX_REDIRECTS} times") from exc
        except httpx.HTTPError as exc:
            raise _refused(url, f"it could not be fetched ({type(exc).__name__})") from exc


def web_urls(request: GenerateRequest) -> list[str]:
    return [i.url for m in request.messages or () for i in m.images or () if i.url]


async def fetch_web_images(request: GenerateRequest, fetcher: WebImageFetcher | None) -> dict[str, bytes]:
    """Every image `request` names by URL, fetched (at once, off the event loop), by URL; a 400 naming `images`
    when fetching is off (`fetcher` None) or one cannot be used. Nothing is queued until all have arrived."""
    urls = list(dict.fromkeys(web_urls(request)))
    if not urls:
        return {}
    if fetcher is None:
        raise APIError(
            "Hearth does not fetch images from the web unless Settings → Server → “Fetch images that requests"
            " name by URL” is on: send the image itself as a data: URI (data:image/png;base64,…) or base64",
            param="images",
            code="image_url_not_allowed",
        )
    fetched = await asyncio.gather(*(asyncio.to_thread(fetcher.fetch, url) for url in urls))
    logger.info("fetched %d image(s) named by URL for a request", len(urls))
    return dict(zip(urls, fetched, strict=True))


def with_fetched(request: GenerateRequest, fetched: dict[str, bytes]) -> GenerateRequest:
    """`request` with each image named by URL replaced by its fetched bytes (any thread)."""
    if not fetched:
        return request

    def resolved(message: ChatMessage) -> ChatMessage:
        if not any(i.url for i in message.images or ()):
            return message
        images = [ImageInput(data=fetched[i.url], offset=i.offset) if i.url else i for i in message.images or ()]
        return message.model_copy(update={"images": images})

    return request.model_copy(update={"messages": [resolved(m) for m in request.messages or ()]})
