"""Vision on MLX end to end: a tiny LLaVA checkpoint imported into the library is listed as seeing (mlx-vlm is
installed), an image through the API counts its tokens in `usage` and is read from the cache for a second
question, and an MLX text model refuses an image before it loads, naming the one that can see."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import httpx
import pytest
from PIL import Image

from app.core.library import Library
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.server.app import create_app
from app.server.context import ServerContext
from app.server.runner import ServerThread
from tests.fixtures.tiny_mlx_vlm import TOKENS_PER_IMAGE
from tests.server.test_vision_real import ask

pytestmark = pytest.mark.slow


def data_uri(color: tuple[int, int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.fixture(scope="module")
def served(tiny_llava_mlx, tiny_mlx_model, tmp_path_factory) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    from app.core.engines import default_registry
    from app.core.library import import_path

    folder = tmp_path_factory.mktemp("mlx-vision-server")
    library = Library(folder / "models", folder / "library.db")
    names = {
        "seeing": import_path(library, tiny_llava_mlx).imported[0].name,
        "blind": import_path(library, tiny_mlx_model).imported[0].name,
    }
    resolver = ModelResolver(library)
    host = ModelPool(default_registry(), resolver=resolver, name="test-mlx-vision-host")
    context = ServerContext(host, library, resolver)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    client = httpx.Client(base_url=runner.url, timeout=120)
    yield client, names
    client.close()
    runner.stop(5)
    host.shutdown(10)
    library.close()


def test_the_mlx_vision_checkpoint_is_listed_as_seeing(served):
    client, names = served
    listed = {m["id"]: m["capabilities"]["vision"] for m in client.get("/v1/models").json()["data"]}
    assert listed == {names["seeing"]: True, names["blind"]: False}
    assert "vision" in client.post("/api/show", json={"model": names["seeing"]}).json()["capabilities"]


def test_an_image_counts_in_usage_and_a_second_question_reads_it_from_the_cache(served):
    client, names = served
    red = data_uri((220, 20, 30))
    text_only = ask(client, names["seeing"], "What is this?", None).json()["usage"]["prompt_tokens"]
    first = ask(client, names["seeing"], "What is this?", red)
    assert first.status_code == 200, first.text[:300]
    assert first.json()["usage"]["prompt_tokens"] == text_only + TOKENS_PER_IMAGE
    again = ask(client, names["seeing"], "What is this?", red).json()["usage"]
    assert again["prompt_tokens_details"]["cached_tokens"] >= TOKENS_PER_IMAGE  # not encoded again


def test_an_mlx_text_model_refuses_an_image_naming_one_that_can_see(served):
    client, names = served
    r = ask(client, names["blind"], "What is this?", data_uri((20, 40, 230)))
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "images" and names["seeing"] in error["message"], error
    assert ask(client, names["blind"], "Hello", None).status_code == 200
