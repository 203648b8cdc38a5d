"""Images on every API route, over the FakeEngine (each image is IMAGE_WORDS prompt words): OpenAI's image_url
parts, Responses' input_image, Anthropic's image blocks and Ollama's images reach the engine as the same
ImageInput at the right offset; base64 does not count as prompt text; what cannot be read is a 400 naming the
field in the route's own shape, nothing runs, and the next request is served."""

from __future__ import annotations

import base64
import io
import os

import pytest
from PIL import Image

from tests.fixtures.fake_engine import IMAGE_WORDS

ollama = pytest.importorskip("ollama")


def png(color=(200, 30, 60), size=(24, 16)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


RED = png()


def sent(live):
    """The last request the engine got: its messages' texts and their images' (bytes, offset)."""
    request = live.engines[0].generations[-1]
    return [(m.content, [(i.data, i.offset) for i in m.images or ()]) for m in request.messages]


def test_openai_image_url_parts_reach_the_engine_in_place(make_server):
    live = make_server(script="a red square", vision=True)
    content = [
        {"type": "text", "text": "What is "},
        {"type": "image_url", "image_url": {"url": data_uri(RED), "detail": "low"}},
        {"type": "text", "text": " this?"},
    ]
    r = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": content}]}
    )
    assert r.status_code == 200, r.text[:300]
    assert sent(live) == [("What is  this?", [(RED, 8)])]
    text_only = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": "What is  this?"}]}
    )
    assert r.json()["usage"]["prompt_tokens"] == text_only.json()["usage"]["prompt_tokens"] + IMAGE_WORDS


def test_a_bare_string_image_url_is_taken_too(make_server):
    live = make_server(script="ok", vision=True)
    content = [{"type": "image_url", "image_url": data_uri(RED)}, {"type": "text", "text": "hi"}]
    r = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": content}]}
    )
    assert r.status_code == 200 and sent(live) == [("hi", [(RED, 0)])]


def test_the_official_openai_client_sends_an_image(make_server):
    from openai import OpenAI

    live = make_server(script="red", vision=True)
    client = OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    content = [{"type": "text", "text": "Colour?"}, {"type": "image_url", "image_url": {"url": data_uri(RED)}}]
    reply = client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": content}])
    assert reply.choices[0].message.content == "red" and sent(live) == [("Colour?", [(RED, 7)])]


def test_base64_images_do_not_count_as_prompt_characters(make_server):
    live = make_server(script="ok", vision=True)
    noise = Image.frombytes("RGB", (900, 800), os.urandom(900 * 800 * 3))
    out = io.BytesIO()
    noise.save(out, format="PNG", compress_level=0)
    uri = data_uri(out.getvalue())
    assert 2_000_000 < len(uri) < 7 * 2**20  # over the prompt's character cap, under the body cap
    content = [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "hi"}]
    r = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": content}]}
    )
    assert r.status_code == 200, r.text[:300]


BAD_URLS = {
    "a web URL": ("https://example.com/cat.png", "image_url_not_allowed"),
    "not base64": ("data:image/png;base64,@@@not-base64@@@", "invalid_image"),
    "not an image type": ("data:text/plain;base64," + base64.b64encode(b"hello").decode(), "invalid_image"),
    "not a picture": ("data:image/png;base64," + base64.b64encode(b"not a png at all").decode(), "invalid_image"),
}


@pytest.mark.parametrize("url, code", BAD_URLS.values(), ids=BAD_URLS.keys())
def test_an_unreadable_image_is_a_400_naming_it_and_the_next_request_is_served(make_server, url, code):
    live = make_server(script="ok", vision=True)
    content = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}}]
    r = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": content}]}
    )
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == code and "image" in error["param"], error
    ok = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert ok.status_code == 200


def test_a_model_without_vision_refuses_an_image_clearly_on_every_route(make_server):
    live = make_server(script="ok")
    image = {"type": "image_url", "image_url": {"url": data_uri(RED)}}
    r = live.client.post(
        "/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": [image]}]}
    )
    assert r.status_code == 400 and "cannot see images" in r.json()["error"]["message"], r.text[:300]
    r = live.client.post(
        "/api/chat",
        json={
            "model": "alpha",
            "stream": False,
            "messages": [{"role": "user", "content": "x", "images": [base64.b64encode(RED).decode()]}],
        },
    )
    assert r.status_code == 400 and "cannot see images" in r.json()["error"]


def test_responses_input_image(make_server):
    live = make_server(script="ok", vision=True)
    content = [{"type": "input_text", "text": "Look:"}, {"type": "input_image", "image_url": data_uri(RED)}]
    r = live.client.post("/v1/responses", json={"model": "alpha", "input": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text[:300]
    assert sent(live) == [("Look:", [(RED, 5)])]
    follow = {"model": "alpha", "previous_response_id": r.json()["id"], "input": "And now?"}
    assert live.client.post("/v1/responses", json=follow).status_code == 200
    assert sent(live)[0] == ("Look:", [(RED, 5)])  # the stored conversation kept its image
    by_id = [{"type": "input_image", "file_id": "file-1"}]
    r = live.client.post("/v1/responses", json={"model": "alpha", "input": [{"role": "user", "content": by_id}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input.0.content.0"


def test_anthropic_image_blocks(make_server):
    live = make_server(script="ok", vision=True)
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(RED).decode()}
    content = [{"type": "image", "source": source}, {"type": "text", "text": "Describe it."}]
    body = {"model": "alpha", "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    r = live.client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text[:300]
    assert sent(live) == [("Describe it.", [(RED, 0)])]
    url = [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]
    r = live.client.post("/v1/messages", json={**body, "messages": [{"role": "user", "content": url}]})
    assert r.status_code == 400 and r.json()["type"] == "error", r.text[:300]
    assert r.json()["error"]["type"] == "invalid_request_error" and "fetch" in r.json()["error"]["message"]


def test_ollama_images_through_the_official_client(make_server):
    live = make_server(script="red", vision=True)
    c = ollama.Client(host=live.url)
    reply = c.chat("alpha", messages=[{"role": "user", "content": "Colour?", "images": [RED]}])
    assert reply.message.content == "red" and sent(live) == [("Colour?", [(RED, 0)])]
    made = c.generate("alpha", prompt="Colour?", images=[RED])
    assert made.response == "red" and sent(live)[-1] == ("Colour?", [(RED, 0)])
    with pytest.raises(ollama.ResponseError) as err:
        c.generate("alpha", prompt="x", images=[RED], raw=True)
    assert err.value.status_code == 400 and "template" in str(err.value)
