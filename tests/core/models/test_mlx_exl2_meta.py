"""HF config.json -> ModelSpec, MLX folders and EXL2 branches (their Hub side: tests/core/hub/test_metadata.py)."""

from __future__ import annotations

import struct

import pytest

from app.core.models.errors import ModelFileError
from app.core.models.exl2 import parse_bpw, parse_head_bits, read_exl2_branch
from app.core.models.gguf import read_gguf_header
from app.core.models.hf_config import spec_from_hf_config
from app.core.models.memory import LoadOptions, kv_cache_bytes
from app.core.models.mlx_meta import mlx_quantization, read_mlx_folder
from app.core.models.spec import spec_from_gguf

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
GEMMA2_2B = {
    "model_type": "gemma2",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 4096,
    "max_position_embeddings": 8192,
    "vocab_size": 256000,
}


def _data_bytes(file: bytes) -> int:
    return len(file) - 8 - struct.unpack("<Q", file[:8])[0]


# ---- config.json -> ModelSpec ----


def test_llama3_8b_kv_bytes_per_token():
    spec = spec_from_hf_config(LLAMA3_8B, weight_bytes=16_060_522_496)
    assert spec.architecture == "llama" and spec.n_layers == 32
    assert spec.head_dim_k == spec.head_dim_v == 128
    assert spec.n_head_kv == [8] * 32 and spec.n_head == 32
    assert spec.n_ctx_train == 8192 and spec.n_vocab == 128256 and spec.n_ff == 14336
    assert kv_cache_bytes(spec, LoadOptions(n_ctx=512)) == 131_072 * 512
    assert kv_cache_bytes(spec, LoadOptions(n_ctx=512, cache_type_k="q8_0", cache_type_v="q8_0")) == 69_632 * 512
    # Without a tensor table the bytes are shared out, and still add up exactly.
    assert spec.weight_bytes == 16_060_522_496
    assert spec.input_bytes == spec.output_bytes > 0 and len(set(spec.block_bytes)) == 1
    assert 0 <= spec.other_bytes < spec.block_bytes[0]


def test_gemma2_sliding_window_alternates():
    spec = spec_from_hf_config(GEMMA2_2B, weight_bytes=1)
    assert spec.sliding_window == 4096 and spec.head_dim_k == 256
    assert spec.swa_layers == [True, False] * 13
    swa = LoadOptions(n_ctx=32768, swa_full=False)
    assert kv_cache_bytes(spec, swa) < kv_cache_bytes(spec, LoadOptions(n_ctx=32768)) * 0.6


def test_layer_types_and_patterns():
    explicit = dict(GEMMA2_2B, layer_types=["sliding_attention", "full_attention", "full_attention"] + ["x"] * 23)
    assert spec_from_hf_config(explicit, weight_bytes=1).swa_layers == [True] + [False] * 25
    gemma3 = dict(GEMMA2_2B, model_type="gemma3_text", sliding_window_pattern=6, num_hidden_layers=12)
    spec = spec_from_hf_config(gemma3, weight_bytes=1)
    assert spec.architecture == "gemma3"
    assert spec.swa_layers == ([True] * 5 + [False]) * 2
    qwen = dict(LLAMA3_8B, model_type="qwen2", sliding_window=4096, use_sliding_window=False)
    spec = spec_from_hf_config(qwen, weight_bytes=1)
    assert spec.sliding_window == 0 and not any(spec.swa_layers)
    mistral = dict(LLAMA3_8B, model_type="mistral", sliding_window=4096)
    assert all(spec_from_hf_config(mistral, weight_bytes=1).swa_layers)


def test_text_config_of_a_multimodal_model():
    cfg = {"model_type": "gemma3", "text_config": dict(GEMMA2_2B, model_type="gemma3_text"), "vision_config": {}}
    spec = spec_from_hf_config(cfg, weight_bytes=1)
    assert spec.architecture == "gemma3" and spec.n_layers == 26 and spec.n_embd == 2304


def test_deepseek_mla_and_experts():
    cfg = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 4,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 129280,
        "intermediate_size": 18432,
    }
    spec = spec_from_hf_config(cfg, weight_bytes=1000)
    assert spec.architecture == "deepseek2"
    assert (spec.head_dim_k, spec.head_dim_v, spec.n_head_kv) == (576, 512, [1] * 4)
    assert spec.n_expert == 256 and spec.n_expert_used == 8 and spec.is_moe
    per_token = kv_cache_bytes(spec, LoadOptions(n_ctx=256)) // 256
    assert per_token == 4 * 576 * 2  # K only: the latent + rope part, f16


def test_tensor_table_gives_exact_blocks():
    tb = {
        "model.embed_tokens.weight": 1000,
        "model.layers.0.self_attn.q_proj.weight": 100,
        "model.layers.0.mlp.experts.3.down_proj.weight": 40,
        "model.layers.0.mlp.shared_experts.down_proj.weight": 7,
        "model.layers.1.mlp.switch_mlp.up_proj.weight": 30,
        "model.layers.1.input_layernorm.weight": 5,
        "model.norm.weight": 3,
        "lm_head.weight": 900,
    }
    cfg = {"model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 8, "num_experts_per_tok": 2}
    spec = spec_from_hf_config(cfg, weight_bytes=sum(tb.values()), tensor_bytes=tb)
    assert spec.block_bytes == [147, 35] and spec.expert_bytes == [40, 30]
    assert (spec.input_bytes, spec.output_bytes, spec.other_bytes) == (1000, 900, 3)
    assert not spec.tied_embeddings and spec.weight_bytes == sum(tb.values())
    # The active share of the experts only: 2 of 8.
    assert spec.bytes_per_token_read == (147 - 40) + 10 + (35 - 30) + 7 + 900 + 3
    del tb["lm_head.weight"]
    tied = spec_from_hf_config(cfg, weight_bytes=sum(tb.values()), tensor_bytes=tb)
    assert tied.tied_embeddings and tied.output_bytes == 1000 and tied.weight_bytes == sum(tb.values())


@pytest.mark.parametrize("key", ["auto_map", "model_file"])
def test_configs_that_run_code_are_refused(key):
    with pytest.raises(ModelFileError, match="never runs code from a model repo"):
        spec_from_hf_config(dict(LLAMA3_8B, **{key: {"AutoModel": "x.Y"}}), weight_bytes=1)
    nested = {"model_type": "llava", "text_config": dict(LLAMA3_8B, **{key: "modeling.py"})}
    with pytest.raises(ModelFileError, match="never runs code"):
        spec_from_hf_config(nested, weight_bytes=1)


def test_hostile_config_values_do_not_crash():
    cfg = {
        "model_type": ["x"],
        "num_hidden_layers": 10**12,
        "hidden_size": -5,
        "num_attention_heads": "8",
        "head_dim": None,
        "num_key_value_heads": True,
        "sliding_window": float("nan"),
    }
    spec = spec_from_hf_config(cfg, weight_bytes=10)
    assert spec.architecture == "unknown" and spec.n_layers == 10_000 and spec.n_embd == 0
    assert spec.weight_bytes == 10
    with pytest.raises(ModelFileError):
        spec_from_hf_config([1, 2], weight_bytes=1)  # type: ignore[arg-type]


def test_mlx_f32_folder_matches_the_same_model_as_gguf(tiny_pair_std02):
    """The tiny GGUF F32 and MLX float32 hold the same weights: the same layers and bytes."""
    gguf_path, mlx_dir = tiny_pair_std02
    variant = read_mlx_folder(mlx_dir)
    g = spec_from_gguf(read_gguf_header(gguf_path))
    m = variant.spec
    assert (variant.bits, variant.group_size, variant.bpw) == (32, 0, 32.0)
    assert (m.n_layers, m.n_embd, m.n_head, m.n_head_kv, m.head_dim_k, m.n_ff, m.n_vocab) == (
        g.n_layers,
        g.n_embd,
        g.n_head,
        g.n_head_kv,
        g.head_dim_k,
        g.n_ff,
        g.n_vocab,
    )
    assert m.block_bytes == g.block_bytes
    assert (m.input_bytes, m.output_bytes, m.other_bytes) == (g.input_bytes, g.output_bytes, g.other_bytes)
    assert m.n_params == g.n_params and m.weight_bytes == g.weight_bytes == variant.weight_bytes
    opts = LoadOptions(n_ctx=512)
    assert kv_cache_bytes(m, opts) == kv_cache_bytes(g, opts)


def test_mlx_quantization_from_config():
    assert mlx_quantization({"quantization": {"bits": 4, "group_size": 32}})[:3] == (4, 32, 5.0)
    assert mlx_quantization({"quantization_config": {"bits": 8, "group_size": 64}})[:3] == (8, 64, 8.5)
    assert mlx_quantization({"quantization": {"bits": 4, "group_size": 32, "mode": "mxfp4"}})[2] == 4.25
    assert mlx_quantization({"torch_dtype": "bfloat16"}) == (16, 0, 16.0, "none")
    assert mlx_quantization({"text_config": {"dtype": "float32"}})[:3] == (32, 0, 32.0)
    assert mlx_quantization({}, {"F32": 10, "BF16": 1000})[0] == 16
    with pytest.raises(ModelFileError, match="group_size"):
        mlx_quantization({"quantization": {"bits": 4, "group_size": 0}})


# ---- EXL2 ----


def test_exl2_branch_with_head_bits_and_real_config():
    cfg = dict(LLAMA3_8B, quantization_config={"quant_method": "exl2", "bits": 8.0, "head_bits": 6})
    sizes = {
        "config.json": 900,
        "output-00001-of-00002.safetensors": 5_000_000_000,
        "output-00002-of-00002.safetensors": 3_000_000_000,
        "tokenizer.json": 9_000_000,
    }
    v = read_exl2_branch(cfg, sizes, "8.0bpw-h8", repo_id="org/L3-exl2")
    assert (v.bpw, v.head_bits, v.weight_bytes) == (8.0, 8, 8_000_000_000)
    assert v.spec.n_head_kv == [8] * 32 and v.spec.weight_bytes == 8_000_000_000
    on_main = read_exl2_branch(cfg, sizes, "main")
    assert (on_main.bpw, on_main.head_bits) == (8.0, 6)
    with pytest.raises(ModelFileError, match="bits per weight"):
        read_exl2_branch(LLAMA3_8B, sizes, "main")
    with pytest.raises(ModelFileError, match=r"no \.safetensors"):
        read_exl2_branch(cfg, {"config.json": 1}, "4.0bpw")
    with pytest.raises(ModelFileError, match="never runs code"):
        read_exl2_branch(dict(cfg, auto_map={}), sizes, "4.0bpw")


@pytest.mark.parametrize(
    ("branch", "bpw", "head"),
    [
        ("4.0bpw", 4.0, None),
        ("6_5bpw", 6.5, None),
        ("8.0bpw-h8", 8.0, 8),
        ("4.65bpw", 4.65, None),
        ("3bpw", 3.0, None),
        ("exl2-2.5bpw_h6", 2.5, 6),
        ("5.0BPW", 5.0, None),
        ("main", None, None),
        ("4.0", None, None),
        ("0.0bpw", None, None),
        ("99bpw", None, None),
        ("4.0bpwx", None, None),
        ("h8", None, 8),
        ("measurement", None, None),
    ],
)
def test_parse_bpw(branch, bpw, head):
    assert parse_bpw(branch) == bpw
    assert parse_head_bits(branch) == head
