"""Synthetic models for the memory/planner tests: GGUF headers with known shapes, and ModelSpecs."""

from __future__ import annotations

from gguf_builder import ARRAY, F32, GGML_F16, GGML_F32, GGML_Q4_K, GGML_Q8_0, I32, STRING, U32, GGUFBuilder

from app.core.hardware.profile import (
    AppleInfo,
    BandwidthInfo,
    CpuInfo,
    GpuInfo,
    HardwareProfile,
    MemoryInfo,
    NvidiaInfo,
)
from app.core.models.gguf import read_gguf_header
from app.core.models.spec import ModelSpec, spec_from_gguf

GiB = 1024**3
MiB = 1024**2


def llama_header(
    *,
    n_layer=2,
    n_embd=256,
    n_head=4,
    n_head_kv=2,
    n_ff=512,
    n_vocab=512,
    ctx=4096,
    wtype=GGML_Q8_0,
    tied=False,
    arch="llama",
    extra=(),
    experts=0,
):
    """A header-only GGUF (no tensor data) with llama tensor names and the given shapes."""
    b = GGUFBuilder()
    b.kv("general.architecture", STRING, arch)
    b.kv(f"{arch}.block_count", U32, n_layer)
    b.kv(f"{arch}.embedding_length", U32, n_embd)
    b.kv(f"{arch}.feed_forward_length", U32, n_ff)
    b.kv(f"{arch}.attention.head_count", U32, n_head)
    if isinstance(n_head_kv, list):
        b.kv(f"{arch}.attention.head_count_kv", ARRAY, (I32, n_head_kv))
    else:
        b.kv(f"{arch}.attention.head_count_kv", U32, n_head_kv)
    b.kv(f"{arch}.context_length", U32, ctx)
    if experts:
        b.kv(f"{arch}.expert_count", U32, experts[0])
        b.kv(f"{arch}.expert_used_count", U32, experts[1])
    for key, vtype, value in extra:
        b.kv(key, vtype, value)
    b.kv("tokenizer.ggml.tokens", ARRAY, (STRING, [f"t{i}" for i in range(n_vocab)]))
    hd = n_embd // n_head
    kv_heads = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layer
    b.tensor("token_embd.weight", (n_embd, n_vocab), wtype)
    for il in range(n_layer):
        b.tensor(f"blk.{il}.attn_norm.weight", (n_embd,), GGML_F32)
        b.tensor(f"blk.{il}.attn_q.weight", (n_embd, n_embd), wtype)
        if kv_heads[il]:
            b.tensor(f"blk.{il}.attn_k.weight", (n_embd, kv_heads[il] * hd), wtype)
            b.tensor(f"blk.{il}.attn_v.weight", (n_embd, kv_heads[il] * hd), wtype)
        b.tensor(f"blk.{il}.attn_output.weight", (n_embd, n_embd), wtype)
        b.tensor(f"blk.{il}.ffn_norm.weight", (n_embd,), GGML_F32)
        if experts:
            b.tensor(f"blk.{il}.ffn_gate_inp.weight", (n_embd, experts[0]), GGML_F32)
            for name in ("gate", "up"):
                b.tensor(f"blk.{il}.ffn_{name}_exps.weight", (n_embd, n_ff, experts[0]), wtype)
            b.tensor(f"blk.{il}.ffn_down_exps.weight", (n_ff, n_embd, experts[0]), wtype)
        else:
            b.tensor(f"blk.{il}.ffn_gate.weight", (n_embd, n_ff), wtype)
            b.tensor(f"blk.{il}.ffn_up.weight", (n_embd, n_ff), wtype)
            b.tensor(f"blk.{il}.ffn_down.weight", (n_ff, n_embd), wtype)
    b.tensor("output_norm.weight", (n_embd,), GGML_F32)
    if not tied:
        b.tensor("output.weight", (n_embd, n_vocab), wtype)
    return read_gguf_header(_HeaderOnly(b.header_bytes()))


class _HeaderOnly:
    """The header bytes of a model whose tensor data we never write (its size is unknown)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_at(self, offset: int, n: int) -> bytes:
        return self.data[offset : offset + n]


def llama3_8b_spec(weight_scale: float = 1.0) -> ModelSpec:
    """Llama-3-8B's shape with round byte counts: 32 blocks of 128 MiB (×scale), 8 KV heads of 128."""
    n = 32
    return ModelSpec(
        architecture="llama",
        name="Llama-3-8B-like",
        n_params=8_030_000_000,
        n_layers=n,
        n_embd=4096,
        n_ff=14336,
        n_head=32,
        n_head_kv=[8] * n,
        head_dim_k=128,
        head_dim_v=128,
        n_ctx_train=8192,
        n_vocab=128256,
        swa_layers=[False] * n,
        block_bytes=[int(128 * MiB * weight_scale)] * n,
        expert_bytes=[0] * n,
        repack_block_bytes=[0] * n,
        input_bytes=int(280 * MiB * weight_scale),
        output_bytes=int(280 * MiB * weight_scale),
        other_bytes=16 * 1024,
        file_type="Q4_K_M",
    )


def profile(*, ram_total=24 * GiB, ram_free=None, gpus=(), apple=None, bw=30.0, cores=8):
    gpu_infos = [
        GpuInfo(
            index=i,
            name=name,
            memory_total_bytes=total,
            memory_free_bytes=free,
            memory_used_bytes=total - free,
            bandwidth_gbps=gbw,
        )
        for i, (name, total, free, gbw) in enumerate(gpus)
    ]
    return HardwareProfile(
        os="Linux",
        arch="x86_64",
        cpu=CpuInfo(brand="Test CPU", physical_cores=cores, logical_cores=cores, simd=["avx2", "fma"]),
        memory=MemoryInfo(total_bytes=ram_total, available_bytes=ram_free if ram_free is not None else ram_total),
        nvidia=NvidiaInfo(available=bool(gpu_infos), gpus=gpu_infos),
        apple=apple,
        bandwidth=BandwidthInfo(cpu_measured_gbps=bw),
    )


def apple_profile(chip: str, ram: int, working_set: int, free: int, bw: float):
    return profile(
        ram_total=ram,
        ram_free=free,
        apple=AppleInfo(
            chip=chip,
            unified_memory_bytes=ram,
            gpu_working_set_bytes=working_set,
            working_set_source="test",
            bandwidth_gbps=bw,
        ),
    )


__all__ = [
    "F32",
    "GGML_F16",
    "GGML_Q4_K",
    "GGML_Q8_0",
    "U32",
    "apple_profile",
    "llama3_8b_spec",
    "llama_header",
    "profile",
    "spec_from_gguf",
]
