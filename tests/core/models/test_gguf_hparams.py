"""Issue 31 (T33): hyper-parameters llama.cpp asserts on, divides by or loops over are refused before it sees
them, each with a sentence naming the key and the value; real models (and hybrid, MoE, attention-free
layouts) still pass."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from gguf_builder import ARRAY, STRING, U32, GGUFBuilder

from app.core.models.errors import ModelFileError
from app.core.models.gguf import BytesSource, validate_gguf
from app.core.models.gguf_hparams import MAX_LAYERS
from tests.fixtures.tiny_gguf import build_vocab, write_tiny_llama_gguf

# Tiny: 1 layer, 64 wide, 4 heads of 16 (2 KV heads), 320 tokens; each file is ~100 KB.
SHAPE = {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128}
TOKENS = build_vocab(320).tokens


def _tiny(tmp_path: Path, metadata: dict | None = None, name: str = "m.gguf", **kw) -> Path:
    return write_tiny_llama_gguf(tmp_path / name, **{**SHAPE, **kw}, metadata=metadata)


REFUSED = [
    ({"llama.block_count": 0}, "llama.block_count is 0; a model needs at least one layer"),
    ({"llama.block_count": MAX_LAYERS + 1}, "llama.block_count is 513; llama.cpp supports at most 512 layers"),
    ({"llama.block_count": "two"}, "llama.block_count is 'two'; it must be an integer"),
    ({"llama.nextn_predict_layers": 2}, "llama.nextn_predict_layers is 2; the model has only 1 layer"),
    ({"llama.attention.head_count": 0}, "llama.attention.head_count is 0; an attention model needs at least one head"),
    ({"llama.attention.head_count": 4.0}, r"llama.attention.head_count is 4.0; it must be an integer"),
    ({"llama.attention.head_count": 1 << 15}, "llama.attention.head_count is 32768; that is above the sanity cap"),
    ({"llama.attention.head_count": [4, 4]}, "llama.attention.head_count has 2 entries; the model has 1 layer"),
    (
        {"llama.attention.head_count_kv": 0},
        "llama.attention.head_count_kv is 0; a model with 4 attention heads needs at least one",
    ),
    (
        {"llama.attention.head_count_kv": 3},
        r"llama.attention.head_count_kv is 3; it must divide llama.attention.head_count \(4\)",
    ),
    (
        {"llama.attention.head_count_kv": [3]},
        r"llama.attention.head_count_kv is 3 at layer 0; it must divide llama.attention.head_count \(4\)",
    ),
    ({"llama.embedding_length": 0}, "llama.embedding_length is 0; it must be 1 to 1,048,576"),
    (
        {"llama.embedding_length": 66},
        r"llama.embedding_length is 66; it must divide by llama.attention.head_count \(4\)",
    ),
    ({"llama.embedding_length": 128}, "token_embd.weight is 64 wide; llama.embedding_length says 128"),
    ({"llama.attention.key_length": 0}, "llama.attention.key_length is 0; it must be 1 to 65,536"),
    ({"llama.attention.value_length": 1 << 17}, "llama.attention.value_length is 131072; it must be 1 to 65,536"),
    ({"llama.feed_forward_length": [-1]}, r"llama.feed_forward_length\[0\] is -1; it cannot be negative"),
    ({"llama.feed_forward_length": 1 << 23}, "llama.feed_forward_length is 8388608; that is above the sanity cap"),
    ({"llama.rope.dimension_count": 15}, "llama.rope.dimension_count is 15; RoPE rotates pairs, so it must be even"),
    (
        {"llama.rope.dimension_count": 32},
        r"llama.rope.dimension_count is 32; it cannot exceed the head size \(16\)",
    ),
    (
        {"llama.attention.key_length": 8, "llama.rope.dimension_count": 16},
        r"llama.rope.dimension_count is 16; it cannot exceed the head size \(8\)",
    ),
    ({"llama.context_length": 0}, "llama.context_length is 0; it must be 1 to 134,217,728"),
    ({"llama.context_length": 1 << 28}, "llama.context_length is 268435456; it must be 1 to 134,217,728"),
    ({"llama.rope.scaling.type": "bogus"}, "llama.rope.scaling.type is 'bogus'; llama.cpp knows none, linear, yarn"),
    ({"llama.expert_count": 2000}, "llama.expert_count is 2000; llama.cpp supports 0 to 1024"),
    (
        {"llama.expert_count": 4, "llama.expert_used_count": 8},
        r"llama.expert_used_count is 8; it cannot exceed llama.expert_count \(4\)",
    ),
    (
        {"llama.expert_used_count": 2},
        r"llama.expert_used_count is 2; it cannot exceed llama.expert_count \(0\)",
    ),
    (
        {"llama.expert_count": 4, "llama.expert_used_count": 0},
        "llama.expert_used_count is 0; a model with 4 experts must use one",
    ),
    (
        {"llama.expert_count": 8, "llama.expert_used_count": 2, "llama.expert_group_count": 3},
        "llama.expert_group_count is 3; it must divide the 8 experts",
    ),
    (
        {"llama.expert_count": 8, "llama.expert_used_count": 2, "llama.expert_group_count": 8},
        "llama.expert_group_count is 8; it must be below 8 experts",
    ),
    (
        {
            "llama.expert_count": 8,
            "llama.expert_used_count": 2,
            "llama.expert_group_count": 4,
            "llama.expert_group_used_count": 4,
        },
        "llama.expert_group_used_count is 4; it must be 1 to 3",
    ),
    (
        {"tokenizer.ggml.tokens": TOKENS[:300]},
        "token_embd.weight has 320 rows; tokenizer.ggml.tokens has 300 tokens",
    ),
    (
        {"tokenizer.ggml.tokens": [*TOKENS[:5], TOKENS[3], *TOKENS[6:]]},
        rf"tokenizer.ggml.tokens has '{TOKENS[3]}' twice \(ids 3 and 5\); llama.cpp needs every token to be unique",
    ),
    (
        {"tokenizer.ggml.bos_token_id": 999, "tokenizer.ggml.add_bos_token": True},
        "tokenizer.ggml.bos_token_id is 999, outside the 320-token vocabulary, yet tokenizer.ggml.add_bos_token",
    ),
]


@pytest.mark.parametrize(("metadata", "message"), REFUSED, ids=[",".join(m) for m, _ in REFUSED])
def test_a_hostile_hyper_parameter_is_refused_with_its_key_and_value(tmp_path, metadata, message):
    path = _tiny(tmp_path, metadata)
    with pytest.raises(ModelFileError, match=message):
        validate_gguf(path)


def test_block_count_zero_is_the_issue_31_sentence(tmp_path):
    with pytest.raises(ModelFileError) as info:
        validate_gguf(_tiny(tmp_path, {"llama.block_count": 0}))
    assert str(info.value) == "llama.block_count is 0; a model needs at least one layer"


def test_generated_models_pass(tmp_path):
    for i, kw in enumerate(
        [{}, {"dtype": "Q8_0"}, {"tie_embeddings": True}, {"n_head_kv": 4}, {"n_layer": 3, "n_ctx": 4096}]
    ):
        header = validate_gguf(_tiny(tmp_path, name=f"ok{i}.gguf", **kw))
        assert header.arch_value("block_count") == kw.get("n_layer", 1)
    # The default generator's shape (what the engine tests load) too.
    assert validate_gguf(write_tiny_llama_gguf(tmp_path / "default.gguf")).vocab_size == 320


def test_smollm2_passes(smollm2_gguf):
    header = validate_gguf(smollm2_gguf)
    assert header.architecture == "llama" and header.arch_value("block_count") == 30


def test_legitimate_layouts_pass(tmp_path):
    """Per-layer arrays with zero entries (DeciLM, hybrids), explicit head sizes that do not divide the width,
    MoE with expert groups (DeepSeek-V3), and RoPE on part of the head (Phi-2) are real models."""
    layouts = [
        {"llama.attention.head_count_kv": [0], "llama.feed_forward_length": [0]},
        {"llama.attention.key_length": 24, "llama.attention.value_length": 24, "llama.rope.dimension_count": 24},
        {
            "llama.expert_count": 256,
            "llama.expert_used_count": 8,
            "llama.expert_group_count": 8,
            "llama.expert_group_used_count": 4,
        },
        {"llama.rope.dimension_count": 8, "llama.rope.scaling.type": "yarn", "llama.nextn_predict_layers": 1},
    ]
    for i, metadata in enumerate(layouts):
        validate_gguf(_tiny(tmp_path, metadata, name=f"ok{i}.gguf"))


def _header_only(arch: str, **values: int | list[int]) -> bytes:
    b = GGUFBuilder().kv("general.architecture", STRING, arch)
    for key, value in values.items():
        name = f"{arch}.{key.replace('__', '.')}"
        b.kv(name, ARRAY, (U32, value)) if isinstance(value, list) else b.kv(name, U32, value)
    return b.build()


def test_attention_free_models_may_have_no_heads():
    # Mamba writes head counts of 0 (it has none); its ssm.* keys say so. An attention arch may not.
    mamba = _header_only(
        "mamba", block_count=64, attention__head_count=0, attention__head_count_kv=0, ssm__inner_size=5120
    )
    validate_gguf(BytesSource(mamba))
    validate_gguf(BytesSource(_header_only("rwkv6", block_count=24, attention__head_count=0, embedding_length=2048)))
    with pytest.raises(ModelFileError, match=r"qwen2\.attention\.head_count is 0"):
        validate_gguf(BytesSource(_header_only("qwen2", block_count=24, attention__head_count=0)))


def test_an_empty_vocabulary_is_refused():
    b = GGUFBuilder().kv("general.architecture", STRING, "llama").kv("tokenizer.ggml.tokens", ARRAY, (STRING, []))
    with pytest.raises(ModelFileError, match=r"tokenizer\.ggml\.tokens is empty; a model needs at least one token"):
        validate_gguf(BytesSource(b.build()))


def test_split_shards_and_image_encoders_are_left_alone():
    # A later shard of a split model carries no architecture; llama.cpp reads no hparams of a CLIP file.
    validate_gguf(BytesSource(GGUFBuilder().kv("split.count", U32, 2).build()))
    validate_gguf(BytesSource(_header_only("clip", block_count=0)))


def test_a_special_token_outside_the_vocabulary_is_only_a_warning(tmp_path, caplog):
    """llama.cpp disables such a token itself (real files have pad = vocab size); only one it must add is fatal."""
    metadata = {"tokenizer.ggml.padding_token_id": 320, "tokenizer.ggml.eos_token_id": 400}
    with caplog.at_level(logging.WARNING, logger="app.core.models.gguf_hparams"):
        validate_gguf(_tiny(tmp_path, metadata))
    assert "tokenizer.ggml.padding_token_id is 320, outside the 320-token vocabulary" in caplog.text
    assert "tokenizer.ggml.eos_token_id is 400" in caplog.text


def _local_ggufs() -> list[Path]:
    """Real GGUFs this machine has: the bench cache and llama.cpp's vocab files (many architectures)."""
    cache = Path.home() / ".cache" / "hearth-bench"
    return sorted({*cache.glob("*.gguf"), *cache.glob("llama-cpp-python-*/vendor/llama.cpp/models/ggml-vocab-*.gguf")})


@pytest.mark.slow
@pytest.mark.skipif(not _local_ggufs(), reason="no local GGUF corpus (~/.cache/hearth-bench)")
def test_every_local_gguf_passes():
    from app.core.models.gguf import read_gguf_header
    from app.core.models.gguf_hparams import check_hparams

    archs = set()
    for path in _local_ggufs():
        header = read_gguf_header(path)  # parsed once: the vocab files hold 100k-260k tokens each
        check_hparams(header.metadata, header.tensors)
        archs.add(header.architecture)
    assert archs
