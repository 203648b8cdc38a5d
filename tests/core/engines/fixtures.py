"""Real-model engine fixtures (a plain module: conftests import the fixtures they need).

`smollm2_engine` is loaded and warmed once per test session (the first generation in a
process is slow on these machines). Tests that use it must leave it loaded and idle.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams

# SmolLM2 answers in English only with a system prompt. With just "You are a helpful assistant." its first
# token is a near-tie: on an AVX2 EPYC without flash attention it answers the capital question in French.
SYSTEM_PROMPT = "You are a helpful assistant who answers in English."


def chat_request(user: str, **sampling) -> GenerateRequest:
    """A greedy SmolLM2 chat request with the system prompt it needs to answer in English."""
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(
        messages=[ChatMessage(role="system", content=SYSTEM_PROMPT), ChatMessage(role="user", content=user)],
        sampling=SamplingParams(**sampling),
    )


def load_llamacpp(path: Path, **spec):
    """A loaded LlamaCppEngine, or a skip when llama-cpp-python cannot be imported here."""
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.core.engines.llamacpp.engine import LlamaCppEngine
    from app.core.engines.llamacpp.options import default_threads

    spec.setdefault("n_threads", default_threads())
    # The single-stream path unless a test asks for slots (test_llamacpp_batch.py covers the batched one).
    spec.setdefault("slots", 1)
    engine = LlamaCppEngine()
    engine.load(LoadSpec(path=path, **spec))
    return engine


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_gguf: Path):
    """SmolLM2-135M-Instruct on llama.cpp, n_ctx 2048, physical-core threads, warmed once."""
    engine = load_llamacpp(smollm2_gguf, n_ctx=2048)
    warm = GenerateRequest(prompt="Hello", sampling=SamplingParams(temperature=0.0, max_tokens=2))
    for _ in engine.generate(warm, threading.Event()):
        pass
    yield engine
    engine.unload()


@pytest.fixture(scope="session")
def tiny_encoder_engine(tiny_encoder_gguf: Path):
    """The tiny BERT embedding model on llama.cpp, loaded for embeddings as the resolver plans it."""
    engine = load_llamacpp(tiny_encoder_gguf, n_ctx=256, n_batch=256, n_ubatch=256, embedding=True)
    yield engine
    engine.unload()


@pytest.fixture(scope="session")
def tiny_reranker_engine(tiny_reranker_gguf: Path):
    """The tiny BERT reranker on llama.cpp, loaded with rank pooling as the resolver plans it."""
    engine = load_llamacpp(tiny_reranker_gguf, n_ctx=256, n_batch=256, n_ubatch=256, embedding=True, pooling="rank")
    yield engine
    engine.unload()
