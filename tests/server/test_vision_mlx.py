"""Vision on MLX end to end: a tiny LLaVA checkpoint imported into the library is listed as seeing (mlx-vlm is
installed), an image through the API counts its tokens in `usage` and is read from the cache for a second
question, and an MLX text model refuses an image before it loads, naming the one that can see."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.core.library import Library
from tests.fixtures.tiny_mlx_vlm import TOKENS_PER_IMAGE
from tests.server.test_vision_real import counted_and_cached, listed_as_seeing, refused_naming_the_seeing_one, serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tiny_llava_mlx, tiny_mlx_model, tmp_path_factory) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    from app.core.library import import_path

    folder = tmp_path_factory.mktemp("mlx-vision-server")
    library = Library(folder / "models", folder / "library.db")
    names = {
        "seeing": import_path(library, tiny_llava_mlx).imported[0].name,
        "blind": import_path(library, tiny_mlx_model).imported[0].name,
    }
    with serving(library, "test-mlx-vision-host") as client:
        yield client, names


def test_the_mlx_vision_checkpoint_is_listed_as_seeing(served):
    listed_as_seeing(*served)


def test_an_image_counts_in_usage_and_a_second_question_reads_it_from_the_cache(served):
    client, names = served
    counted_and_cached(client, names["seeing"], TOKENS_PER_IMAGE)


def test_an_mlx_text_model_refuses_an_image_naming_one_that_can_see(served):
    refused_naming_the_seeing_one(*served)
