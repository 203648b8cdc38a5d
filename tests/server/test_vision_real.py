"""Vision end to end on real llama.cpp: a tiny model imported with its projector beside it (LM Studio's layout)
is listed as seeing, loads with the projector when a request names it, counts the image's tokens in `usage`,
reads the image from the cache for a second question (`cached_tokens`), and a text-only model refuses an
image naming the one that can see."""

from __future__ import annotations

import base64
import io
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from PIL import Image

from app.core.library import Library
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.server.app import create_app
from app.server.context import ServerContext
from app.server.runner import ServerThread
from tests.fixtures.tiny_projector import TOKENS_PER_IMAGE

pytestmark = pytest.mark.slow


def data_uri(color: tuple[int, int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@contextmanager
def serving(library: Library, name: str) -> Iterator[httpx.Client]:
    """The API over `library`, with its own pool and server thread, on a loopback port."""
    from app.core.engines import default_registry

    resolver = ModelResolver(library)
    host = ModelPool(default_registry(), resolver=resolver, name=name)
    context = ServerContext(host, library, resolver)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    client = httpx.Client(base_url=runner.url, timeout=120)
    try:
        yield client
    finally:
        client.close()
        runner.stop(5)
        host.shutdown(10)
        library.close()


@pytest.fixture(scope="module")
def served(tiny_gguf_f16, tiny_mmproj, tmp_path_factory) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    from app.core.library import import_path

    folder = tmp_path_factory.mktemp("vision-server")
    seeing = folder / "imports" / "seeing"
    seeing.mkdir(parents=True)
    shutil.copy(tiny_gguf_f16, seeing / "tiny-seeing-F16.gguf")
    shutil.copy(tiny_mmproj, seeing / "mmproj-tiny-seeing-F16.gguf")
    blind = folder / "imports" / "blind"
    blind.mkdir()
    shutil.copy(tiny_gguf_f16, blind / "tiny-blind-F16.gguf")
    library = Library(folder / "models", folder / "library.db")
    names = {
        "seeing": import_path(library, seeing / "tiny-seeing-F16.gguf").imported[0].name,
        "blind": import_path(library, blind / "tiny-blind-F16.gguf").imported[0].name,
    }
    with serving(library, "test-vision-host") as client:
        yield client, names


def ask(client: httpx.Client, model: str, question: str, image: str | None) -> httpx.Response:
    content: list[dict] = [{"type": "text", "text": question}]
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": image}})
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 3, "temperature": 0}
    return client.post("/v1/chat/completions", json=body)


def listed_as_seeing(client: httpx.Client, names: dict[str, str]) -> None:
    listed = {m["id"]: m["capabilities"]["vision"] for m in client.get("/v1/models").json()["data"]}
    assert listed == {names["seeing"]: True, names["blind"]: False}
    shown = client.post("/api/show", json={"model": names["seeing"]}).json()
    assert "vision" in shown["capabilities"]


def counted_and_cached(client: httpx.Client, model: str, tokens_per_image: int) -> None:
    red = data_uri((220, 20, 30))
    text_only = ask(client, model, "What is this?", None).json()["usage"]["prompt_tokens"]
    first = ask(client, model, "What is this?", red)
    assert first.status_code == 200, first.text[:300]
    assert first.json()["usage"]["prompt_tokens"] == text_only + tokens_per_image
    again = ask(client, model, "What is this?", red).json()["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] >= tokens_per_image  # not encoded again


def refused_naming_the_seeing_one(client: httpx.Client, names: dict[str, str]) -> None:
    r = ask(client, names["blind"], "What is this?", data_uri((20, 40, 230)))
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "images" and names["seeing"] in error["message"], error
    assert ask(client, names["blind"], "Hello", None).status_code == 200


def test_the_model_with_a_projector_beside_it_is_listed_as_seeing(served):
    listed_as_seeing(*served)


def test_an_image_counts_in_usage_and_a_second_question_reads_it_from_the_cache(served):
    client, names = served
    counted_and_cached(client, names["seeing"], TOKENS_PER_IMAGE)


def test_a_text_only_model_refuses_an_image_naming_one_that_can_see(served):
    refused_naming_the_seeing_one(*served)
