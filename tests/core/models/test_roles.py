"""What a GGUF is for, from its metadata and tensors: encoders and pooled decoders embed, a declared rank
pooling with a classification head reranks, anything else chats."""

from __future__ import annotations

import pytest

from app.core.models.roles import role_of
from app.core.runtime.preflight import check_gguf

HEAD = {"token_embd.weight", "cls.output.weight", "cls.output.bias"}


@pytest.mark.parametrize(
    ("metadata", "tensors", "role"),
    [
        ({"general.architecture": "llama"}, {"token_embd.weight"}, "chat"),
        ({"general.architecture": "bert"}, {"token_embd.weight"}, "embedding"),
        ({"general.architecture": "nomic-bert", "nomic-bert.pooling_type": 1}, set(), "embedding"),
        ({"general.architecture": "t5encoder"}, set(), "embedding"),
        ({"general.architecture": "qwen3", "qwen3.pooling_type": 3}, set(), "embedding"),  # Qwen3-Embedding
        ({"general.architecture": "qwen2", "qwen2.pooling_type": 1}, set(), "embedding"),  # gte-Qwen2
        ({"general.architecture": "qwen3", "qwen3.pooling_type": 0}, set(), "chat"),  # NONE declares nothing
        ({"general.architecture": "bert", "bert.pooling_type": 4}, HEAD, "rerank"),
        ({"general.architecture": "qwen3", "qwen3.pooling_type": 4}, HEAD, "rerank"),  # Qwen3-Reranker
        ({"general.architecture": "bert", "bert.pooling_type": 4}, {"cls.weight"}, "rerank"),
        # Rank pooling without a head to score with: not a reranker (its "scores" would be a hidden value).
        ({"general.architecture": "bert", "bert.pooling_type": 4}, {"token_embd.weight"}, "embedding"),
        ({"general.architecture": "llama", "llama.pooling_type": True}, HEAD, "chat"),  # a bool is no pooling
        ({"general.architecture": "llama", "llama.pooling_type": "4"}, HEAD, "chat"),
        ({}, HEAD, "chat"),
    ],
)
def test_role_of(metadata, tensors, role):
    assert role_of(metadata, tensors) == role


def test_the_tiny_files_read_as_what_they_are(tiny_encoder_gguf, tiny_reranker_gguf, tiny_gguf_f16):
    assert check_gguf(tiny_encoder_gguf).role == "embedding"
    assert check_gguf(tiny_reranker_gguf).role == "rerank"
    assert check_gguf(tiny_gguf_f16).role == "chat"
