"""What a GGUF model is for, from its metadata and tensor names: a chat model, an embedding model, or a
reranker. The resolver plans each as what it is (an embedding model loads for pooled vectors, a reranker
with rank pooling), and /v1/models says which routes a model serves."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

__all__ = ["ENCODER_ARCHS", "RERANK_HEADS", "ModelRole", "has_rank_head", "role_of"]

ModelRole = Literal["chat", "embedding", "rerank"]

# Architectures llama.cpp runs only as encoders (or as embedding-only decoders): they give no next-token
# logits worth sampling, so they are embedding models whatever their metadata says about pooling.
ENCODER_ARCHS = frozenset(
    {
        "bert",
        "modern-bert",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "eurobert",
        "t5encoder",
        "gemma-embedding",
        "llama-embed",
    }
)
# llama.cpp's enum llama_pooling_type: the values a GGUF may declare in `<arch>.pooling_type`.
POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK = 1, 2, 3, 4
# A rank-pooled context scores a pair through a classification head; without one its "score" is an
# arbitrary hidden value, so a file must carry one of these to be taken as a reranker.
RERANK_HEADS = ("cls.weight", "cls.output.weight")


def has_rank_head(tensor_names: Collection[str]) -> bool:
    return any(name in tensor_names for name in RERANK_HEADS)


def role_of(metadata: Mapping[str, Any], tensor_names: Collection[str]) -> ModelRole:
    """The role a GGUF with this metadata and these tensors plays: "rerank" when it declares rank pooling
    and has a classification head, "embedding" for an encoder architecture or a decoder that declares
    mean/CLS/last pooling (Qwen3-Embedding, gte-Qwen), else "chat"."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        return "chat"
    pooling = metadata.get(f"{arch}.pooling_type")
    if isinstance(pooling, bool) or not isinstance(pooling, int):
        pooling = None
    if pooling == POOLING_RANK and has_rank_head(tensor_names):
        return "rerank"
    if arch in ENCODER_ARCHS or pooling in (POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK):
        return "embedding"
    return "chat"
