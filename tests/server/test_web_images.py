"""Images named by http(s) URL: refused while the setting is off (nothing loads, the next request is served);
when it is on, fetched before the job is queued, within a time limit and a size cap, as an image only, with no
credentials; every failure a 400 (413 when too large) naming `images`."""

from __future__ import annotations

import http.server
import io
import threading

import httpx
import pytest
from PIL import Image

from app.core.settings import ServerSettings
from app.server.web_images import WebImageFetcher

URL = "http://pictures.test/cat.png"


def png(color=(10, 120, 240)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (12, 8), color).save(out, format="PNG")
    return out.getvalue()


def ask(live, url: str, api: str = "openai"):
    if api == "anthropic":
        block = {"type": "image", "source": {"type": "url", "url": url}}
        body = {"model": "alpha", "max_tokens": 8, "messages": [{"role": "user", "content": [block]}]}
        return live.client.post("/v1/messages", json=body)
    if api == "responses":
        part = {"type": "input_image", "image_url": url}
        return live.client.post(
            "/v1/responses", json={"model": "alpha", "input": [{"role": "user", "content": [part]}]}
        )
    content = [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": url}}]
    return live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": content}]}
    )


def served(handler) -> WebImageFetcher:
    return WebImageFetcher(transport=httpx.MockTransport(handler), timeout_s=2.0)


def test_the_setting_is_off_by_default_and_a_url_is_refused_before_anything_runs(make_server):
    assert ServerSettings().fetch_image_urls is False
    live = make_server(script="ok", vision=True)
    generated = len(live.engines[0].generations)
    r = ask(live, URL)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "image_url_not_allowed" and error["param"] == "images"
    assert "Fetch images that requests name by URL" in error["message"]
    assert len(live.engines[0].generations) == generated
    assert ask(live, "data:image/png;base64,iVBORw0KGgo=").status_code == 400  # still parsed, as ever
    ok = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert ok.status_code == 200


@pytest.mark.parametrize("api", ["openai", "anthropic", "responses"])
def test_with_the_setting_on_the_image_is_fetched_and_reaches_the_engine(make_server, api):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "image/png"}, content=png())

    live = make_server(script="a blue box", vision=True)
    live.context.web_images = served(handler)
    r = ask(live, URL, api)
    assert r.status_code == 200, r.text[:300]
    images = [i for m in live.engines[0].generations[-1].messages for i in m.images or ()]
    assert [i.data for i in images] == [png()] and images[0].url is None
    assert [str(q.url) for q in seen] == [URL]
    assert "authorization" not in {k.lower() for k in seen[0].headers}  # the request's key never travels on
    assert seen[0].headers["accept"] == "image/*"


FAILURES = {
    "404": (lambda r: httpx.Response(404), 400, "image_url_unreadable", "HTTP 404"),
    "a web page": (
        lambda r: httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>"),
        400,
        "invalid_image",
        "text/html, not an image",
    ),
    "too large by header": (
        lambda r: httpx.Response(200, headers={"content-type": "image/png", "content-length": str(30 << 20)}),
        413,
        "request_too_large",
        "over the 20 MiB limit",
    ),
    "unreachable": (
        lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused")),
        400,
        "image_url_unreadable",
        "ConnectError",
    ),
    "slow": (lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow")), 400, "image_url_unreadable", "within 2 s"),
    "a loop": (
        lambda r: httpx.Response(302, headers={"location": URL}),
        400,
        "image_url_unreadable",
        "redirected more than 3 times",
    ),
    "not a picture": (
        lambda r: httpx.Response(200, headers={"content-type": "image/png"}, content=b"no png here"),
        400,
        "invalid_image",
        "could not be read",
    ),
}


@pytest.mark.parametrize(("handler", "status", "code", "why"), FAILURES.values(), ids=FAILURES.keys())
def test_a_fetch_that_fails_is_a_clear_4xx_and_the_next_request_is_served(make_server, handler, status, code, why):
    live = make_server(script="ok", vision=True)
    live.context.web_images = served(handler)
    r = ask(live, URL)
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert (error["code"], error["param"]) == (code, "images") and why in error["message"], error
    ok = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert ok.status_code == 200


def test_a_body_longer_than_its_header_says_is_cut_off_at_the_cap():
    def handler(request):
        return httpx.Response(200, headers={"content-type": "image/png"}, content=b"x" * 5000)

    fetcher = WebImageFetcher(transport=httpx.MockTransport(handler), max_bytes=4096)
    with pytest.raises(Exception, match="over the 0 MiB limit") as caught:
        fetcher.fetch(URL)
    assert caught.value.status == 413


def test_a_real_loopback_server_is_fetched_by_the_real_client():
    body = png((1, 2, 3))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert WebImageFetcher().fetch(f"http://127.0.0.1:{server.server_port}/x.png") == body
    finally:
        server.shutdown()
        server.server_close()
