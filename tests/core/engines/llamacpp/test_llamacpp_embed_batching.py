"""Many embedding inputs share each llama.cpp decode (issue 46, item 4): 2,048 two-word inputs took 93 s when
each was decoded alone, and 512 "hi"s held a concurrent chat for 24 s. Packed as llama-server packs them (each
input its own sequence, pooled on its own), a request takes about its tokens over the context in decodes, the
vectors and rerank scores are those of each input decoded alone, and a cancel still lands between decodes."""

from __future__ import annotations

import math
import threading

import pytest

from app.core.engines.inputs.embed_limits import EmbeddingCancelled
from app.core.engines.llamacpp.embed import packed
from tests.core.engines.fixtures import load_llamacpp

# Inputs of very different lengths (1 to some 90 words), so sequences of every size share a decode.
TEXTS = [
    "cat",
    "the fire is warm",
    "paris is the capital of france and a city by a river " * 6,
    "tea",
    "a kettle in the garden at night, a lamp and a book by the hearth stone",
    "what is it?",
    "bread " * 40,
    "the dog and the cat",
]


def _alone(engine, texts: list[str]) -> list[list[float]]:
    """Each input embedded in a request of its own: one decode each, whatever the packing."""
    return [engine.embed([text]).vectors[0] for text in texts]


def _assert_same_vectors(batched: list[list[float]], alone: list[list[float]], tol: float) -> None:
    """Equal within rounding: llama.cpp sums in another order for another batch (a sequence's offset in the
    KV cache), and a quantized model's activations, rounded to 8 bits before each product, can turn that
    into a step of their grid (F16 BERT: ~1e-4; SmolLM2 Q4_1: ~1e-2, cosine over 0.9995). A neighbour's
    tokens leaking into a sequence would move it far more."""
    assert len(batched) == len(alone)
    for i, (a, b) in enumerate(zip(batched, alone)):
        assert len(a) == len(b)
        worst = max(abs(x - y) for x, y in zip(a, b))
        cosine = sum(x * y for x, y in zip(a, b))
        assert worst < tol and cosine > 1 - tol / 10, f"input {i} differs from its vector alone by {worst:.2e}"


def _count_decodes(monkeypatch, embedder) -> list[int]:
    """The native decode (or encode) calls the embedder makes, each as its batch's token count."""
    calls: list[int] = []
    ctx = embedder._ctx
    for name in ("decode", "encode"):
        real = getattr(ctx, name)

        def counted(batch, real=real):
            calls.append(batch.n_tokens())
            return real(batch)

        monkeypatch.setattr(ctx, name, counted)
    return calls


# -- packing ------------------------------------------------------------------------------------------


def test_inputs_are_packed_in_order_up_to_the_tokens_and_the_sequences_of_a_decode():
    assert packed([], 10, 4) == []
    assert packed([3, 3, 3, 3], 10, 4) == [range(0, 3), range(3, 4)]  # 9 tokens, then the fourth
    assert packed([1] * 9, 100, 4) == [range(0, 4), range(4, 8), range(8, 9)]  # four sequences a decode
    assert packed([10, 1, 10], 10, 4) == [range(0, 1), range(1, 2), range(2, 3)]  # a whole pack alone
    assert packed([2, 30, 2, 2], 10, 4) == [range(0, 1), range(1, 2), range(2, 4)]  # longer than a pack: alone
    assert packed([5, 5, 2], 10, 1) == [range(0, 1), range(1, 2), range(2, 3)]  # one sequence: one each


# -- the tiny BERT: an encoder's non-causal decode, CLS and mean pooling, rank pooling -----------------


def test_the_encoder_embeds_many_inputs_in_few_decodes_as_each_alone(tiny_encoder_engine, monkeypatch):
    engine = tiny_encoder_engine
    embedder = engine._vectors.embedder()
    assert embedder.n_seqs > 1
    alone = _alone(engine, TEXTS)
    decodes = _count_decodes(monkeypatch, embedder)
    result = engine.embed(TEXTS)
    _assert_same_vectors(result.vectors, alone, 5e-4)
    # 8 inputs in 2 or 3 decodes of up to 256 tokens, where there were 8.
    assert sum(decodes) == result.prompt_tokens and len(decodes) <= math.ceil(result.prompt_tokens / 256) + 1


@pytest.fixture(scope="module")
def mean_pooled_encoder(tiny_encoder_gguf):
    """The tiny BERT pooled by mean: each sequence's own tokens averaged, none of its neighbours'."""
    engine = load_llamacpp(tiny_encoder_gguf, n_ctx=256, n_batch=256, n_ubatch=256, embedding=True, pooling="mean")
    yield engine
    engine.unload()


def test_mean_pooling_averages_each_input_alone_in_a_shared_decode(mean_pooled_encoder, monkeypatch):
    alone = _alone(mean_pooled_encoder, TEXTS)
    decodes = _count_decodes(monkeypatch, mean_pooled_encoder._vectors.embedder())
    _assert_same_vectors(mean_pooled_encoder.embed(TEXTS).vectors, alone, 5e-4)
    assert len(decodes) < len(TEXTS)


def test_many_short_inputs_take_their_tokens_over_the_context_in_decodes(tiny_encoder_engine, monkeypatch):
    engine = tiny_encoder_engine
    embedder = engine._vectors.embedder()
    decodes = _count_decodes(monkeypatch, embedder)
    result = engine.embed(["hi"] * 512)  # issue 46: 512 decodes, each some 45 ms on SmolLM2
    assert len(result.vectors) == 512 and result.vectors[0] == result.vectors[-1]
    assert len(decodes) <= _fewest_decodes(512, result.prompt_tokens, embedder) + 1, len(decodes)


def _fewest_decodes(n_inputs: int, tokens: int, embedder) -> int:
    """What a request of short inputs takes at the least: its tokens over a pack's (the sequences a decode
    holds, up to 256, are not what binds for inputs of a few tokens)."""
    return math.ceil(tokens / embedder.pack_tokens)


def test_the_reranker_scores_pairs_in_shared_decodes_as_each_alone(tiny_reranker_engine, monkeypatch):
    engine = tiny_reranker_engine
    query = "what is the capital of france"
    alone = [engine.rerank(query, [text]).scores[0] for text in TEXTS]
    decodes = _count_decodes(monkeypatch, engine._vectors.embedder())
    ranked = engine.rerank(query, TEXTS)
    assert ranked.scores == pytest.approx(alone, abs=1e-3)
    assert len(decodes) <= math.ceil(ranked.prompt_tokens / 256) + 1 < len(TEXTS)


def test_a_cancelled_rerank_stops_between_decodes(tiny_reranker_engine, monkeypatch):
    engine = tiny_reranker_engine
    engine.rerank("cat", ["dog"])
    monkeypatch.setattr(engine._vectors.embedder(), "n_seqs", 3)  # three pairs a decode: 10 documents take 4
    cancel = threading.Event()
    decodes = _count_decodes(monkeypatch, engine._vectors.embedder())
    real = engine._vectors.embedder()._ctx.decode

    def decode_then_leave(batch):
        real(batch)
        if len(decodes) == 2:
            cancel.set()

    monkeypatch.setattr(engine._vectors.embedder()._ctx, "decode", decode_then_leave)
    with pytest.raises(EmbeddingCancelled, match="reranking cancelled after 6 of 10 documents"):
        engine.rerank("cat", [f"dog {i}" for i in range(10)], cancel)
    assert len(decodes) == 2


# -- SmolLM2: a causal decoder's shared KV cache, beside a chat model and loaded for embeddings -----------


@pytest.mark.slow
def test_smollm2_beside_its_chat_embeds_many_inputs_in_few_decodes_as_each_alone(smollm2_engine, monkeypatch):
    alone = _alone(smollm2_engine, TEXTS)  # also opens the side context
    embedder = smollm2_engine._vectors.embedder()
    decodes = _count_decodes(monkeypatch, embedder)
    _assert_same_vectors(smollm2_engine.embed(TEXTS).vectors, alone, 2e-2)
    assert max(abs(x - y) for x, y in zip(alone[0], alone[3])) > 0.1  # two texts: far beyond that rounding
    assert len(decodes) == 1  # some 160 tokens: one pack
    # 512 "hi"s made a concurrent chat wait 24 s: each its own decode. Now their tokens over the context.
    decodes.clear()
    result = smollm2_engine.embed(["hi"] * 512)
    assert len(decodes) <= _fewest_decodes(512, result.prompt_tokens, embedder) + 1, len(decodes)
    assert all(_cos(v, result.vectors[0]) > 0.9999 for v in result.vectors)


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


@pytest.fixture(scope="module")
def smollm2_last_pooled(smollm2_gguf):
    """SmolLM2 loaded for embeddings, pooled by its last token: each sequence's own last token."""
    engine = load_llamacpp(smollm2_gguf, n_ctx=512, embedding=True, pooling="last")
    yield engine
    engine.unload()


@pytest.mark.slow
def test_smollm2_loaded_for_embeddings_pools_each_input_alone_in_a_shared_decode(smollm2_last_pooled, monkeypatch):
    engine = smollm2_last_pooled
    alone = _alone(engine, TEXTS)
    decodes = _count_decodes(monkeypatch, engine._vectors.embedder())
    result = engine.embed(TEXTS)
    _assert_same_vectors(result.vectors, alone, 2e-2)
    assert len(decodes) <= math.ceil(result.prompt_tokens / engine._vectors.embedder().pack_tokens) + 1 < len(TEXTS)
