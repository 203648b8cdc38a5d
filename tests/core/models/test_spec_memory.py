"""Formula tests: exact tensor bytes, GQA, per-layer KV heads, SWA caps, tied output, MoE."""

import re
import subprocess
import sys

import pytest
from synthetic import GGML_F16, U32, MiB, llama_header

from app.core.models.gguf import read_gguf_header
from app.core.models.memory import LoadOptions, compute_buffer_bytes, estimate_memory, kv_cache_bytes, kv_cells
from app.core.models.spec import spec_from_gguf


def q8(ne0, ne1):
    return 34 * (ne0 // 32) * ne1


def test_exact_tensor_bytes_per_block_and_io_layers():
    spec = spec_from_gguf(llama_header(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512))
    hd = 64
    block = (
        4 * 256  # attn_norm f32
        + q8(256, 256)
        + 2 * q8(256, 2 * hd)
        + q8(256, 256)  # q, k, v, o
        + 4 * 256  # ffn_norm
        + 2 * q8(256, 512)
        + q8(512, 256)
    )  # gate, up, down
    assert spec.block_bytes == [block, block]
    assert spec.input_bytes == q8(256, 512)
    assert spec.output_bytes == q8(256, 512)
    assert spec.other_bytes == 4 * 256
    assert not spec.tied_embeddings
    assert spec.weight_bytes == 2 * block + 2 * q8(256, 512) + 4 * 256
    assert (spec.n_head, spec.n_head_kv, spec.head_dim_k, spec.n_vocab) == (4, [2, 2], 64, 512)


def test_tied_output_is_counted_for_reads_but_stored_once():
    spec = spec_from_gguf(llama_header(tied=True))
    assert spec.tied_embeddings
    assert spec.output_bytes == spec.input_bytes == q8(256, 512)
    untied = spec_from_gguf(llama_header(tied=False))
    assert untied.weight_bytes - spec.weight_bytes == q8(256, 512)
    assert spec.bytes_per_token_read == untied.bytes_per_token_read


def test_gqa_kv_bytes_match_llama3_8b():
    # Llama-3-8B: 32 layers, 8 KV heads of 128 → 131,072 bytes per token at f16 (fit-model.md).
    spec = spec_from_gguf(
        llama_header(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=64, n_vocab=32, wtype=GGML_F16)
    )
    assert spec.head_dim_k == 128
    assert kv_cache_bytes(spec, LoadOptions(n_ctx=8192)) == 131_072 * 8192
    q8_0 = kv_cache_bytes(spec, LoadOptions(n_ctx=8192, cache_type_k="q8_0", cache_type_v="q8_0"))
    assert q8_0 == 131_072 * 8192 * 34 // 64


def test_per_layer_kv_head_array_skips_layers_without_attention():
    spec = spec_from_gguf(llama_header(n_layer=4, n_head_kv=[2, 0, 2, 0]))
    assert spec.n_head_kv == [2, 0, 2, 0]
    per_layer = 2 * 2 * 64 * 2  # K and V, 2 heads of 64, f16
    assert kv_cache_bytes(spec, LoadOptions(n_ctx=1024)) == 2 * per_layer * 1024


def test_kv_cells_are_padded_to_256():
    assert kv_cells(2000) == 2048 and kv_cells(2048) == 2048 and kv_cells(1) == 256


def test_sliding_window_layers_are_capped_when_not_full():
    extra = [("gemma2.attention.sliding_window", U32, 4096)]
    spec = spec_from_gguf(llama_header(arch="gemma2", n_layer=4, extra=extra))
    assert spec.swa_layers == [True, False, True, False]  # gemma2: every 2nd layer global
    per_cell = 2 * 2 * 64 * 2
    full = kv_cache_bytes(spec, LoadOptions(n_ctx=32768, swa_full=True))
    capped = kv_cache_bytes(spec, LoadOptions(n_ctx=32768, swa_full=False))
    assert full == 4 * per_cell * 32768
    assert capped == 2 * per_cell * 32768 + 2 * per_cell * 4608  # pad(4096 + 512, 256)
    gemma3 = spec_from_gguf(
        llama_header(arch="gemma3", n_layer=12, extra=[("gemma3.attention.sliding_window", U32, 1024)])
    )
    assert [i for i, s in enumerate(gemma3.swa_layers) if not s] == [5, 11]


def test_moe_reads_only_active_experts():
    spec = spec_from_gguf(llama_header(experts=(8, 2), n_ff=256))
    assert spec.is_moe and all(e > 0 for e in spec.expert_bytes)
    dense = sum(b - e for b, e in zip(spec.block_bytes, spec.expert_bytes))
    active = dense + sum(spec.expert_bytes) // 4
    assert spec.bytes_per_token_read == active + spec.output_bytes + spec.other_bytes


def test_compute_buffer_grows_with_context_only_without_flash_attention():
    spec = spec_from_gguf(llama_header(n_layer=2, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=320))
    no_fa = [compute_buffer_bytes(spec, LoadOptions(n_ctx=c), kv_cells(c)) for c in (4096, 16384)]
    fa = [compute_buffer_bytes(spec, LoadOptions(n_ctx=c, flash_attn=True), kv_cells(c)) for c in (4096, 16384)]
    # Calibrated here on llama.cpp's reports for this shape: 78.01 / 294.01 MiB without FA, 17.01 / 29.01 with.
    assert [round(b / MiB, 1) for b in no_fa] == [78.0, 294.0]
    assert [round(b / MiB, 1) for b in fa] == [17.0, 29.0]


_BUF = re.compile(
    r"(CPU_Mapped|CPU_REPACK|CPU) model buffer size =\s+([\d.]+) MiB|"
    r"CPU KV buffer size =\s+([\d.]+) MiB|CPU compute buffer size =\s+([\d.]+) MiB|"
    r"CPU\s+output buffer size =\s+([\d.]+) MiB"
)


def llama_reported_buffers(path, extra_bufts: bool = True, **kw) -> dict[str, float]:
    """Load in a child process (llama.cpp logs from C) and parse its own buffer report, in MiB. With
    `extra_bufts` off the load goes through the engine's switch, as the native canary's verdict would."""
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    code = (
        "import llama_cpp\nfrom pathlib import Path\nfrom app.core.engines.base import LoadSpec\n"
        "from app.core.engines.llamacpp.options import model_params_for\n"
        f"with model_params_for(llama_cpp, LoadSpec(path=Path({str(path)!r}), extra_bufts={extra_bufts})):\n"
        f"    llama_cpp.Llama(model_path={str(path)!r}, n_threads=2, verbose=True, {args})\n"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stderr
    out = {"weights": 0.0, "kv": 0.0, "compute": 0.0, "output": 0.0, "repack": 0.0}
    for m in _BUF.finditer(err):
        if m.group(2):
            out["weights"] += float(m.group(2))
            out["repack"] += float(m.group(2)) if m.group(1) == "CPU_REPACK" else 0.0
        elif m.group(3):
            out["kv"] += float(m.group(3))
        elif m.group(4):
            out["compute"] = float(m.group(4))
        elif m.group(5):
            out["output"] += float(m.group(5))
    assert out["weights"] > 0, err[-2000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("n_ctx,flash", [(2048, False), (8192, True)])
def test_estimate_matches_llama_cpp_buffers_for_smollm2(smollm2_gguf, n_ctx, flash):
    spec = spec_from_gguf(read_gguf_header(smollm2_gguf))
    opts = LoadOptions(n_ctx=n_ctx, flash_attn=flash)
    cpu = estimate_memory(spec, opts, repack=True).devices[0]
    real = llama_reported_buffers(smollm2_gguf, n_ctx=n_ctx, flash_attn=flash)
    assert cpu.weights + cpu.repack == pytest.approx(real["weights"] * MiB, rel=0.005)
    assert cpu.kv == pytest.approx(real["kv"] * MiB, rel=0.005)
    assert cpu.compute == pytest.approx(real["compute"] * MiB, rel=0.01)
    assert cpu.output == pytest.approx(real["output"] * MiB, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("use_mmap", [True, False])
def test_repack_copy_matches_llama_cpp_for_q4_k_m(tiny_gguf_q4_k_m, use_mmap):
    spec = spec_from_gguf(read_gguf_header(tiny_gguf_q4_k_m))
    cpu = estimate_memory(spec, LoadOptions(n_ctx=256, use_mmap=use_mmap), repack=True).devices[0]
    real = llama_reported_buffers(tiny_gguf_q4_k_m, n_ctx=256, use_mmap=use_mmap)
    assert cpu.repack > 0
    # The mapped buffer may leave out a tensor-sized gap (output.weight here): allow 100 KiB.
    assert cpu.weights + cpu.repack == pytest.approx(real["weights"] * MiB, rel=0.03, abs=100 * 1024)


@pytest.mark.slow
def test_without_extra_buffer_types_nothing_is_repacked_and_the_plan_says_so(tiny_gguf_q4_k_m):
    """The native canary's fallback (extra buffer types off) allocates no repack copy; the planner counts none."""
    spec = spec_from_gguf(read_gguf_header(tiny_gguf_q4_k_m))
    opts = LoadOptions(n_ctx=256, extra_bufts=False)
    cpu = estimate_memory(spec, opts, repack=True).devices[0]
    real = llama_reported_buffers(tiny_gguf_q4_k_m, extra_bufts=False, n_ctx=256)
    assert cpu.repack == 0 and real["repack"] == 0
    assert cpu.weights == pytest.approx(real["weights"] * MiB, rel=0.03, abs=100 * 1024)
    with_repack = llama_reported_buffers(tiny_gguf_q4_k_m, n_ctx=256)
    if with_repack["repack"] > 0:  # a CPU with llama.cpp's repack kernels (AVX2, Arm dotprod): they were off
        assert estimate_memory(spec, LoadOptions(n_ctx=256), repack=True).devices[0].repack > 0
