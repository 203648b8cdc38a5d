"""Model shapes from config.json and the KV cache per token, against the formulas of fit-model.md."""

from __future__ import annotations

import pytest

from app.core.deploy.errors import PlanError
from app.core.deploy.shape import native_dtype, params_from_config, shape_from_config, shape_from_path
from app.core.deploy.sizing import (
    attention_heads_for_tp,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    valid_tp,
    weight_bytes,
)
from app.core.deploy.targets import find_target
from tests.core.deploy.configs import (
    DEEPSEEK_V2_LITE,
    GEMMA2_9B,
    LLAMA3_8B,
    LLAMA3_70B,
    MISTRAL_7B_V01,
    config_folder,
)


def test_parameter_counts_match_the_published_sizes():
    # Published: Llama-3-8B 8.03B, Llama-3-70B 70.6B, DeepSeek-V2-Lite 15.7B total / 2.4B active.
    assert params_from_config(LLAMA3_8B)[0] == pytest.approx(8.03e9, rel=0.005)
    total, embed, active = params_from_config(LLAMA3_70B)
    assert total == pytest.approx(70.55e9, rel=0.005) and embed == 2 * 128256 * 8192 and active == total
    total, _, active = params_from_config(DEEPSEEK_V2_LITE)
    assert total == pytest.approx(15.7e9, rel=0.02)
    assert 2.2e9 < active < 2.8e9  # routed experts: 6 of 64, plus 2 shared


def test_gqa_kv_per_token_is_the_fit_model_formula():
    # 2 (K and V) × 32 layers × 8 KV heads × 128 head dim × 2 bytes (f16) = 131,072 (fit-model.md).
    s = shape_from_config(LLAMA3_8B, "llama-3-8b")
    assert kv_bytes_per_token(s) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_bytes_per_sequence(s, 32768) == 131_072 * 32768
    assert kv_bytes_per_token(shape_from_config(LLAMA3_70B, "70b")) == 2 * 80 * 8 * 128 * 2


def test_sliding_window_layers_are_capped_at_the_window():
    mistral = shape_from_config(MISTRAL_7B_V01, "mistral")
    assert kv_bytes_per_token(mistral) == 131_072
    assert kv_bytes_per_sequence(mistral, 2048) == 131_072 * 2048  # shorter than the window: all of it
    assert kv_bytes_per_sequence(mistral, 32768) == 131_072 * 4096  # every layer slides: capped
    gemma = shape_from_config(GEMMA2_9B, "gemma-2")
    per_layer = 2 * 8 * 256 * 2
    assert kv_bytes_per_token(gemma) == 42 * per_layer
    # Gemma-2 alternates: 21 sliding layers keep 4,096 tokens, 21 global layers the whole context.
    assert kv_bytes_per_sequence(gemma, 8192) == 21 * per_layer * 4096 + 21 * per_layer * 8192


def test_mla_caches_one_latent_plus_the_rope_part():
    s = shape_from_config(DEEPSEEK_V2_LITE, "deepseek-v2-lite")
    # (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes × 27 layers, one "head", no separate V.
    assert kv_bytes_per_token(s) == 27 * (512 + 64) * 2 == 31_104
    # TP splits the query heads; the latent is replicated, so TP must divide the 16 attention heads.
    assert attention_heads_for_tp(s) == 16


def test_tp_degrees_divide_the_kv_heads():
    four_kv = shape_from_config({**LLAMA3_8B, "num_key_value_heads": 4}, "x")
    assert valid_tp(four_kv, find_target("h100")) == [1, 2, 4]
    assert valid_tp(shape_from_config(LLAMA3_70B, "x"), find_target("h100")) == [1, 2, 4, 8]
    assert valid_tp(shape_from_config(LLAMA3_70B, "x"), find_target("m2-ultra")) == [1]


def test_weight_bytes_per_dtype_keep_embeddings_in_16_bits():
    s = shape_from_config(LLAMA3_8B, "8b")
    linear, embed = s.n_params - s.embed_params, s.embed_params
    assert weight_bytes(s, "bf16") == 2 * s.n_params
    assert weight_bytes(s, "fp8") == int(linear * 1.0 + embed * 2)
    assert weight_bytes(s, "nvfp4") == int(linear * 0.5625 + embed * 2)
    assert weight_bytes(s, "int4") == int(linear * 0.53 + embed * 2)
    assert weight_bytes(s, "Q4_K_M") == int(s.n_params * 4.90 / 8)  # quants.json's whole-file bpw
    assert weight_bytes(s, "exl4") == s.n_params // 2


def test_native_format_of_prequantized_checkpoints():
    assert native_dtype(LLAMA3_8B) == "bf16"
    assert native_dtype({"quantization_config": {"quant_method": "fp8"}}) == "fp8"
    assert native_dtype({"quantization_config": {"quant_method": "awq", "bits": 4}}) == "int4"
    assert native_dtype({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}) == "nvfp4"


def test_a_folder_with_only_a_config_is_enough(tmp_path):
    s = shape_from_path(config_folder(tmp_path, LLAMA3_70B))
    assert s.source == "config" and s.spec.n_layers == 80 and s.max_ctx == 131072


def test_bad_folders_are_clear_errors(tmp_path):
    with pytest.raises(PlanError, match=r"no GGUF file and no folder with a config\.json"):
        shape_from_path(tmp_path)
    with pytest.raises(PlanError, match="run its own code"):
        shape_from_path(config_folder(tmp_path, {**LLAMA3_8B, "auto_map": {"AutoModel": "x.Y"}}, "hostile"))
    with pytest.raises(PlanError, match="lacks hidden_size"):
        shape_from_path(config_folder(tmp_path, {"model_type": "llama"}, "empty"))
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(PlanError, match="neither a GGUF"):
        shape_from_path(tmp_path / "notes.txt")


def test_a_local_gguf_is_read_from_its_header(quant_files):
    s = shape_from_path(quant_files["Q8_0"])
    assert s.source == "gguf" and s.native_dtype == "gguf" and s.gguf_file == str(quant_files["Q8_0"])
    assert s.n_params == s.spec.n_params > 0
    # Tiny Llama: 2 layers, 2 KV heads of 256 / 4 = 64 dims, f16 K and V.
    assert kv_bytes_per_token(s) == 2 * 2 * 2 * 64 * 2
    assert weight_bytes(s, next(iter(s.gguf_quants))) == quant_files["Q8_0"].stat().st_size
