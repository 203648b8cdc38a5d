"""Images on real llama.cpp through libmtmd, with the tiny random model and a tiny random projector made for it:
an image's tokens are evaluated into its own sequence (the prompt grows by its count), a second question about
the same image reads it from the slot's cache, two images are not confused, a bad image is refused before
anything runs and loses nothing, and an image request batched beside text requests leaves their tokens as
they are alone. Each runs twice: with LLaVA's layout (a position a token) and with Qwen2-VL's (M-RoPE: an image
takes fewer positions than tokens), where every cut of the cache, copy of a prefix and saved state must land on
positions, not token counts, or the cached answer would differ from the fresh one."""

from __future__ import annotations

import io
import threading

import pytest
from PIL import Image

from app.core.engines.base import ChatMessage, GenerateRequest, ImageInput, SamplingParams
from app.core.engines.errors import Unsupported
from app.core.engines.inputs.images import ImageRejected
from tests.core.engines.fixtures import load_llamacpp
from tests.core.engines.llamacpp.test_llamacpp_batch import alone, run_together

pytestmark = pytest.mark.slow


def png(color: tuple[int, int, int], size=(48, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


RED, BLUE = png((220, 20, 30)), png((20, 40, 230))


def ask(image: bytes | None, question: str = "What is in the picture?", **sampling) -> GenerateRequest:
    images = [ImageInput(data=image)] if image is not None else None
    sampling.setdefault("max_tokens", 4)
    return GenerateRequest(
        messages=[ChatMessage(role="user", content=question, images=images)],
        sampling=SamplingParams(temperature=0.0, **sampling),
    )


@pytest.fixture(scope="module", params=["llava", "qwen2vl"])
def vision(request):
    if request.param == "llava":
        model, projector = request.getfixturevalue("tiny_gguf_f16"), request.getfixturevalue("tiny_mmproj")
    else:
        model, projector = request.getfixturevalue("tiny_qwen2vl_pair")
    engine = load_llamacpp(model, n_ctx=1024, slots=4, projector=projector)
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


# -- positions: what a slot keeps, restores or copies reads as a fresh prompt would ----------------------------

FOLLOW_UP = "Describe it. Then say what colour it is, in one word."


def first_logprobs(engine, request: GenerateRequest):
    """The first token's top choices (rounded: a prompt read in other pieces sums in another order) and the
    final stats."""
    chunks = list(engine.generate(request, threading.Event()))
    return [(t.token, round(t.logprob, 3)) for t in chunks[0].logprobs.top], chunks[-1].stats


def fresh(engine, request: GenerateRequest):
    engine.sequences.forget()
    return first_logprobs(engine, request)[0]


def holding(engine, image: bytes) -> list:
    pid = next(t for t in engine.prompt_tokens(ask(image)) if t < 0)
    return [s for s in engine.sequences.runner.slots if pid in s.tokens]


def test_an_image_takes_its_positions_and_the_text_after_it_follows_on(vision):
    runner = vision.sequences.runner
    runner.forget()
    alone(vision, ask(RED))
    (slot,) = holding(vision, RED)
    n_image = image_tokens(vision, ask(RED))
    # Qwen2-VL's grid for 48×40 px: 6 columns by 5 rows of tokens, six positions; LLaVA's, one a token.
    assert slot.pos_gap == (n_image - 6 if runner.vision.mrope else 0)
    last = runner._lib.llama_memory_seq_pos_max(runner._memory, slot.seq_id)
    assert last == len(slot.tokens) - slot.pos_gap - 1


def test_a_follow_up_cut_from_the_slot_after_the_image_answers_as_a_fresh_one(vision):
    expected = fresh(vision, ask(RED, FOLLOW_UP, logprobs=5))
    vision.sequences.forget()
    alone(vision, ask(RED, "Describe it. What is it?"))  # the follow-up drops this one's end
    got, stats = first_logprobs(vision, ask(RED, FOLLOW_UP, logprobs=5))
    assert stats.images_encoded == 0
    assert stats.prompt_tokens_evaluated < stats.prompt_tokens - image_tokens(vision, ask(RED))
    assert got == expected


def test_a_conversation_set_aside_to_ram_and_restored_answers_as_a_fresh_one(vision):
    expected = fresh(vision, ask(RED, FOLLOW_UP, logprobs=5))
    vision.sequences.forget()
    alone(vision, ask(RED, "Describe it."))
    for other in ("Count to three", "A B C", "Hello there", "Name a river"):  # every slot taken: RED's to RAM
        alone(vision, ask(None, other))
    assert not holding(vision, RED)
    got, stats = first_logprobs(vision, ask(RED, FOLLOW_UP, logprobs=5))
    assert stats.images_encoded == 0
    assert got == expected


def test_a_second_conversation_starts_from_a_copy_of_the_image_another_slot_holds(vision):
    question = ask(RED, "Describe it. Is it a flag?", logprobs=5)
    expected = fresh(vision, question)
    vision.sequences.forget()
    alone(vision, ask(RED, "Describe it. Then tell a long story about the sea and the ships that sail on it."))
    got, stats = first_logprobs(vision, question)
    assert stats.images_encoded == 0 and len(holding(vision, RED)) == 2  # copied; the story kept its slot
    assert got == expected


def test_with_one_shared_cache_a_copied_prefix_ends_where_the_image_does(tiny_qwen2vl_pair):
    model, projector = tiny_qwen2vl_pair
    engine = load_llamacpp(model, n_ctx=1024, slots=2, kv_unified=True, projector=projector)
    try:
        test_a_second_conversation_starts_from_a_copy_of_the_image_another_slot_holds(engine)
        test_a_follow_up_cut_from_the_slot_after_the_image_answers_as_a_fresh_one(engine)
    finally:
        engine.unload()


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
