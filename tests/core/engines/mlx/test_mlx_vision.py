"""Images on MLX models through mlx-vlm, with a tiny random LLaVA: an image's tokens join the prompt, a second
question about it reads it from the cache, two images are not confused, a bad image is refused and loses
nothing, an image request batched beside text requests leaves every one as it is alone, and a model whose
images cannot run here (no mlx-vlm, M-RoPE, embeddings that disagree) still chats and says why it cannot see."""

from __future__ import annotations

import threading

import pytest

from app.core.engines.base import GenerateRequest, LoadSpec
from app.core.engines.errors import Unsupported
from app.core.engines.inputs.images import ImageRejected
from app.core.engines.mlx.vision import MlxVision
from app.core.models.vision_config import uses_mrope
from tests.core.engines.llamacpp.test_llamacpp_vision import BLUE, RED, ask, png
from tests.fixtures.tiny_mlx_vlm import TOKENS_PER_IMAGE

pytestmark = pytest.mark.slow


def load(path, **spec):
    from app.core.engines.mlx.engine import MlxEngine

    engine = MlxEngine()
    engine.load(LoadSpec(path=path, n_ctx=1024, **spec))
    return engine


@pytest.fixture(scope="module", params=[1, 4], ids=["single", "batched"])
def vision(request, tiny_llava_mlx):
    engine = load(tiny_llava_mlx, slots=request.param)
    yield engine
    engine.unload()


def run(engine, request: GenerateRequest):
    chunks = list(engine.generate(request, threading.Event()))
    return [c.token for c in chunks if c.token is not None], chunks


def forget(engine) -> None:
    if engine.sequences is not None:
        engine.sequences.forget()
    else:
        engine._held.forget()


def test_the_model_says_it_sees_and_an_image_adds_its_tokens(vision):
    assert vision.capabilities.vision and vision.info.extra["projector"] == "mlx-vlm"
    with_image, text_only = vision.check(ask(RED)), vision.check(ask(None))
    assert sum(1 for t in with_image if t < 0) == TOKENS_PER_IMAGE
    assert len(with_image) == len(text_only) + TOKENS_PER_IMAGE
    tokens, chunks = run(vision, ask(RED))
    assert len(tokens) == 4 and chunks[-1].finish_reason == "length"
    assert chunks[-1].stats.prompt_tokens == len(with_image)


def test_a_second_question_about_the_same_image_reads_it_from_the_cache(vision):
    forget(vision)
    first = run(vision, ask(RED, "Describe it."))[1][-1].stats
    assert first.prompt_tokens_evaluated == first.prompt_tokens and first.images_encoded <= 1
    follow = run(vision, ask(RED, "Describe it. What colour is it?"))[1][-1].stats
    assert follow.images_encoded == 0
    assert follow.prompt_tokens_evaluated < follow.prompt_tokens - TOKENS_PER_IMAGE  # the image came from the cache


def test_two_different_images_are_not_confused(vision):
    def first_logprobs(image):
        forget(vision)
        chunks = run(vision, ask(image, logprobs=5))[1]
        return [(t.token, round(t.logprob, 4)) for t in chunks[0].logprobs.top]

    assert vision.check(ask(RED)) != vision.check(ask(BLUE))
    red = first_logprobs(RED)
    assert red == first_logprobs(RED)
    assert red != first_logprobs(BLUE)
    # and after BLUE's turn, RED is not read from BLUE's cells
    run(vision, ask(BLUE, logprobs=5))
    again = run(vision, ask(RED, logprobs=5))[1]
    assert [(t.token, round(t.logprob, 4)) for t in again[0].logprobs.top] == red


@pytest.mark.parametrize("data", [b"not an image", png((1, 2, 3))[:50]], ids=["junk", "cut off"])
def test_a_bad_image_is_refused_before_anything_runs_and_the_engine_serves_on(vision, data):
    with pytest.raises(ImageRejected):
        vision.generate(ask(data), threading.Event())
    if vision.sequences is not None:
        assert vision.sequences.active() == 0
    assert len(run(vision, ask(RED))[0]) == 4


def alone_and_together(model, requests: list[GenerateRequest], on_step=None) -> tuple[list, list]:
    """Each request's tokens run one at a time on the single path, and run together on four slots."""
    from tests.core.engines.mlx.test_mlx_batch import run_together

    single = load(model)
    try:
        solo = [run(single, r)[0] for r in requests]
    finally:
        single.unload()
    batched = load(model, slots=4)
    try:
        together = [tokens for tokens, _ in run_together(batched, requests, on_step=on_step)]
    finally:
        batched.unload()
    return solo, together


def test_batched_beside_three_text_requests_each_gets_what_it_gets_alone(tiny_llava_mlx):
    requests = [ask(RED), ask(None, "Hello there"), ask(None, "Count to three"), ask(None, "A B C")]
    solo, together = alone_and_together(tiny_llava_mlx, requests)
    assert together == solo


def test_a_text_model_refuses_images_with_the_reason(tiny_mlx_model):
    engine = load(tiny_mlx_model)
    try:
        assert not engine.capabilities.vision and not engine.info.extra["projector"]
        with pytest.raises(Unsupported, match="cannot see images: it is a text model"):
            engine.generate(ask(RED), threading.Event())
    finally:
        engine.unload()


def test_without_mlx_vlm_the_model_chats_and_says_what_would_let_it_see(tiny_llava_mlx, monkeypatch):
    monkeypatch.setattr("app.core.models.vision_config.mlx_vlm_installed", lambda: False)
    engine = load(tiny_llava_mlx)
    try:
        assert not engine.capabilities.vision and "mlx-vlm" in engine.info.extra["no_vision"]
        assert len(run(engine, ask(None))[0]) == 4
        with pytest.raises(Unsupported, match="mlx-vlm, which is not installed"):
            engine.generate(ask(RED), threading.Event())
    finally:
        engine.unload()


def test_embeddings_that_do_not_give_mlx_lms_logits_turn_images_off_with_the_reason(tiny_llava_mlx, monkeypatch):
    real = MlxVision.text_embeddings
    monkeypatch.setattr(MlxVision, "text_embeddings", lambda self, ids: real(self, ids) * 2)  # a scaled table
    engine = load(tiny_llava_mlx)
    try:
        assert not engine.capabilities.vision
        assert "same logits" in engine.info.extra["no_vision"]
        assert len(run(engine, ask(None))[0]) == 4
    finally:
        engine.unload()


def test_m_rope_families_are_refused_before_mlx_vlm_loads_anything():
    qwen = {"text_config": {"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}, "vision_config": {}}
    assert uses_mrope(qwen) and uses_mrope({"rope_scaling": {"mrope_section": [2, 3, 3]}})
    assert not uses_mrope({"text_config": {"rope_scaling": {"type": "linear", "factor": 2.0}}})
    with pytest.raises(Unsupported, match="M-RoPE"):
        MlxVision(None, qwen, None, None)  # type: ignore[arg-type]


class CancelAfter(threading.Event):
    """Set once it has been asked `n` times: a Stop pressed while the image is being read."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.asked, self.n = 0, n

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > self.n or super().is_set()


def test_a_stop_while_the_image_is_read_leaves_a_cache_the_next_question_reads_right(tiny_llava_mlx):
    from app.core.engines.mlx.engine import MlxEngine

    engine = MlxEngine(prefill_step=4)  # the image's 16 positions in four passes
    engine.load(LoadSpec(path=tiny_llava_mlx, n_ctx=1024))
    try:
        question = ask(RED, logprobs=5)
        expected = [(t.token, round(t.logprob, 4)) for t in run(engine, question)[1][0].logprobs.top]
        engine._held.forget()
        chunks = list(engine.generate(question, CancelAfter(2)))
        assert chunks[-1].finish_reason == "cancelled"
        assert 0 < engine._held.offset() < len(engine.check(question))  # it stopped inside the image
        again = run(engine, question)[1]
        assert again[-1].stats.images_encoded == 0
        assert [(t.token, round(t.logprob, 4)) for t in again[0].logprobs.top] == expected
    finally:
        engine.unload()


def test_image_prompts_arriving_together_are_read_one_a_step(tiny_llava_mlx):
    green = png((30, 200, 40))
    requests = [ask(None, "Hello there", max_tokens=6), ask(RED), ask(BLUE), ask(green)]
    waiting: list[int] = []

    def on_step(step, seqs, chunks):
        waiting.append(sum(1 for uid in seqs._running if uid < 0))

    solo, together = alone_and_together(tiny_llava_mlx, requests, on_step)
    assert together == solo
    assert waiting[:3] == [2, 1, 0]  # one image prompt's images read a step, beside the others' decoding


def test_a_request_stopped_while_its_image_waits_ends_cancelled_and_frees_its_slot(tiny_llava_mlx):
    engine = load(tiny_llava_mlx, slots=2)
    try:
        seqs, cancel = engine.sequences, threading.Event()
        key = seqs.admit(ask(BLUE), cancel)
        cancel.set()
        chunks = [c for k, c in seqs.step() if k is key]
        assert chunks[-1].finish_reason == "cancelled" and seqs.active() == 0 and seqs.free_slots() == 2
        assert len(run(engine, ask(BLUE))[0]) == 4  # and the same image is read afresh, whole
    finally:
        engine.unload()


def test_an_image_prompt_is_read_a_chunk_a_step_while_a_text_request_streams(tiny_llava_mlx):
    from app.core.engines.mlx.engine import MlxEngine

    requests = [ask(None, "Hello there", max_tokens=12), ask(RED, logprobs=3)]
    single = MlxEngine(prefill_step=8)
    single.load(LoadSpec(path=tiny_llava_mlx, n_ctx=1024))
    try:
        solo = [run(single, r)[0] for r in requests]
    finally:
        single.unload()
    engine = MlxEngine(prefill_step=8)  # the image prompt's 21 positions up to its image's end: 3 chunks
    engine.load(LoadSpec(path=tiny_llava_mlx, n_ctx=1024, slots=2))
    seqs, streamed = engine.sequences, []
    try:
        text = seqs.admit(requests[0], threading.Event())
        while not any(k is text and c.token is not None for k, c in seqs.step()):
            pass  # the text request is decoding before the image request arrives
        image = seqs.admit(requests[1], threading.Event())
        tokens: dict = {text: [], image: []}
        while seqs.active():
            waiting = any(uid < 0 for uid in seqs._running)
            got = [(k, c) for k, c in seqs.step()]
            for k, c in got:
                if c.token is not None:
                    tokens.setdefault(k, []).append(c.token)
            streamed.append((waiting, any(k is text and c.token is not None for k, c in got)))
    finally:
        engine.unload()
    assert sum(1 for waiting, _ in streamed if waiting) >= 3  # read in pieces, a step each
    assert all(moved for waiting, moved in streamed if waiting)  # and the text streamed at every one
    assert tokens[image] == solo[1]
