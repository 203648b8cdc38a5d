"""Images on real llama.cpp through libmtmd, with the tiny random model and a tiny random projector made for it:
an image's tokens are evaluated into its own sequence (the prompt grows by its count), a second question about
the same image reads it from the slot's cache, two images are not confused, a bad image is refused before
anything runs and loses nothing, and an image request batched beside text requests leaves their tokens as
they are alone."""

from __future__ import annotations

import io
import threading

import pytest
from PIL import Image

from app.core.engines.base import ChatMessage, GenerateRequest, ImageInput, SamplingParams
from app.core.engines.errors import Unsupported
from app.core.engines.images import ImageRejected
from tests.core.engines.fixtures import load_llamacpp
from tests.core.engines.test_llamacpp_batch import alone, run_together

pytestmark = pytest.mark.slow


def png(color: tuple[int, int, int], size=(48, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


RED, BLUE = png((220, 20, 30)), png((20, 40, 230))


def ask(image: bytes | None, question: str = "What is in the picture?", **sampling) -> GenerateRequest:
    images = [ImageInput(data=image)] if image is not None else None
    return GenerateRequest(
        messages=[ChatMessage(role="user", content=question, images=images)],
        sampling=SamplingParams(temperature=0.0, max_tokens=4, **sampling),
    )


@pytest.fixture(scope="module")
def vision(tiny_gguf_f16, tiny_mmproj):
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=1024, slots=4, projector=tiny_mmproj)
    yield engine
    engine.unload()


def image_tokens(engine, request: GenerateRequest) -> int:
    return sum(1 for t in engine.prompt_tokens(request) if t < 0)


def test_the_model_says_it_sees_and_an_image_adds_its_tokens_to_the_prompt(vision):
    assert vision.capabilities.vision and vision.info.extra["projector"]
    with_image, text_only = vision.prompt_tokens(ask(RED)), vision.prompt_tokens(ask(None))
    n_image = image_tokens(vision, ask(RED))
    assert n_image > 0 and len(with_image) >= len(text_only) + n_image
    tokens, final = alone(vision, ask(RED))
    assert len(tokens) == 4 and final.finish_reason == "length"
    assert final.stats.prompt_tokens == len(with_image)  # usage counts the image's tokens


def test_a_second_question_about_the_same_image_reads_it_from_the_cache(vision):
    vision.sequences.forget()
    first = alone(vision, ask(RED, "Describe it."))[1].stats
    assert first.prompt_tokens_evaluated == first.prompt_tokens  # read whole the first time
    assert first.images_encoded == 1 and first.image_s > 0
    follow = alone(vision, ask(RED, "Describe it. What colour is it?"))[1].stats
    n_image = image_tokens(vision, ask(RED))
    assert follow.prompt_tokens_evaluated < follow.prompt_tokens - n_image  # the image came from the cache
    assert follow.images_encoded == 0 and follow.image_s == 0


def test_two_different_images_are_not_confused(vision):
    vision.sequences.forget()
    red = alone(vision, ask(RED, logprobs=3))[1]
    blue = alone(vision, ask(BLUE, logprobs=3))
    assert blue[1].stats.prompt_tokens_evaluated >= image_tokens(vision, ask(BLUE))  # encoded, not reused
    assert vision.prompt_tokens(ask(RED)) != vision.prompt_tokens(ask(BLUE))
    again = alone(vision, ask(RED, logprobs=3))[1]
    assert again.stats.prompt_tokens == red.stats.prompt_tokens


def test_the_image_changes_what_the_model_computes(vision):
    def first_logprobs(image):
        vision.sequences.forget()
        chunks = list(vision.generate(ask(image, logprobs=5), threading.Event()))
        return [(t.token, round(t.logprob, 4)) for t in chunks[0].logprobs.top]

    assert first_logprobs(RED) == first_logprobs(RED)
    assert first_logprobs(RED) != first_logprobs(BLUE)


@pytest.mark.parametrize("data", [b"not an image", png((1, 2, 3))[:50]], ids=["junk", "cut off"])
def test_a_bad_image_is_refused_before_anything_runs_and_the_engine_serves_on(vision, data):
    with pytest.raises(ImageRejected):
        vision.generate(ask(data), threading.Event())
    assert vision.sequences.active() == 0
    assert len(alone(vision, ask(RED))[0]) == 4


def test_batched_beside_three_text_requests_each_gets_what_it_gets_alone(vision):
    requests = [ask(RED), ask(None, "Hello there"), ask(None, "Count to three"), ask(None, "A B C")]
    solo = [alone(vision, r)[0] for r in requests]
    vision.sequences.forget()
    together = [tokens for tokens, _ in run_together(vision, requests)]
    assert together == solo


def test_a_model_without_a_projector_refuses_images(tiny_gguf_f16):
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=256)
    try:
        assert not engine.capabilities.vision
        with pytest.raises(Unsupported, match="cannot see images"):
            engine.generate(ask(RED), threading.Event())
    finally:
        engine.unload()
