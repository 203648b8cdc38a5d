"""Memory model: what llama.cpp will allocate for a GGUF at a given context and load options.

Constants were calibrated here against llama.cpp 0.3.36's own buffer reports (CPU backend);
`bench/fit_accuracy.py` re-measures them. Sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.models.spec import ModelSpec

MiB = 1024**2

# Bytes per element of the KV cache types llama.cpp accepts (block bytes / block size).
KV_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
# The KV cache types offered in the UI and CLI: full precision and the two quantizations worth using.
KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")
# llama.cpp pads the KV cache size (cells) to this many tokens.
KV_CELL_PAD = 256
# Fixed costs a backend adds beyond its buffers: runtime, kernels, allocator slack (per device).
BACKEND_OVERHEAD = {"cpu": 48 * MiB, "cuda": 300 * MiB, "metal": 256 * MiB, "vulkan": 300 * MiB}
# ggml's graph allocator keeps a little headroom on top of the largest stage.
COMPUTE_SLACK = 16 * 1024

Backend = Literal["cpu", "cuda", "metal", "vulkan"]


class LoadOptions(BaseModel):
    """What a load is asked to do; the planner fills it, the Advanced popover overrides it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_ctx: int = Field(4096, ge=1)
    n_batch: int = Field(512, ge=1)
    n_ubatch: int = Field(512, ge=1)
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: bool = False
    use_mmap: bool = True
    n_gpu_layers: int = 0  # -1: every layer (and the output) on the GPU
    n_seq: int = Field(1, ge=1)  # slots: sequences decoded together
    # With n_seq > 1: one KV cache of n_ctx cells shared by the sequences (True), or n_ctx cells for each.
    kv_unified: bool = True
    swa_full: bool = True  # llama_context_default_params: full-size cache for sliding-window layers
    embeddings: bool = False
    # llama.cpp's extra CPU buffer types: off (the native canary's verdict on some CPUs), no repack copy.
    extra_bufts: bool = True


@dataclass
class DeviceUse:
    """One device's share of a loaded model."""

    device: str  # "CPU", "CUDA0", "Metal"
    weights: int = 0
    repack: int = 0  # CPU: the interleaved copy the REPACK kernels use
    kv: int = 0
    recurrent: int = 0
    output: int = 0
    compute: int = 0
    overhead: int = 0
    layers: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.repack + self.kv + self.recurrent + self.output + self.compute + self.overhead

    def parts(self) -> dict[str, int]:
        return {
            "weights": self.weights + self.repack,
            "kv": self.kv + self.recurrent,
            "compute": self.compute + self.output,
            "overhead": self.overhead,
        }


@dataclass
class MemoryEstimate:
    options: LoadOptions
    kv_cells: int
    devices: list[DeviceUse] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(d.total for d in self.devices)

    def device(self, name: str) -> DeviceUse | None:
        return next((d for d in self.devices if d.device == name), None)


def kv_cells(n_ctx: int, n_seq: int = 1, unified: bool = True) -> int:
    """KV cells in all: a unified cache holds n_ctx shared by every sequence, a split one n_ctx per sequence."""
    per_stream = -(-n_ctx // KV_CELL_PAD) * KV_CELL_PAD
    return per_stream if unified else per_stream * n_seq


def kv_bytes_per_layer(spec: ModelSpec, layer: int, cells: int, opts: LoadOptions) -> int:
    n_kv = spec.kv_heads(layer)
    if n_kv == 0:
        return 0
    if spec.swa_layers and layer < len(spec.swa_layers) and spec.swa_layers[layer] and not opts.swa_full:
        cells = min(cells, -(-(spec.sliding_window * opts.n_seq + opts.n_ubatch) // KV_CELL_PAD) * KV_CELL_PAD)
    k = n_kv * spec.head_dim_k * cells * KV_TYPE_BYTES[opts.cache_type_k]
    v = 0 if spec.kv_lora_rank else n_kv * spec.head_dim_v * cells * KV_TYPE_BYTES[opts.cache_type_v]
    return int(k + v)


def kv_cache_bytes(spec: ModelSpec, opts: LoadOptions) -> int:
    cells = kv_cells(opts.n_ctx, opts.n_seq, opts.kv_unified)
    return sum(kv_bytes_per_layer(spec, il, cells, opts) for il in range(spec.n_layers))


def compute_buffer_bytes(spec: ModelSpec, opts: LoadOptions, cells: int) -> int:
    """The largest stage of the reserved graph (n_ubatch tokens, all outputs), in f32.

    Fitted on CPU buffer reports: without flash attention the KQ matrix (n_head × cells × ubatch)
    dominates long contexts; with it, the logits of a whole ubatch usually do.
    """
    u = min(opts.n_ubatch, opts.n_ctx, opts.n_batch)
    kv_dim_k = max(spec.n_head_kv or [0]) * spec.head_dim_k
    kv_dim_v = max(spec.n_head_kv or [0]) * spec.head_dim_v
    logits = 4 * u * (spec.n_vocab + (2 if opts.flash_attn else 3) * spec.n_embd)
    if opts.flash_attn:
        attention = u * (2 * cells + 4 * (3 * spec.n_ff + 4 * spec.n_embd))
    else:
        attention = u * (4 * cells * (spec.n_head + 1) + 4 * (5 * spec.n_embd + kv_dim_k + kv_dim_v))
    if not any(spec.n_head_kv):
        attention = 4 * u * (3 * spec.n_ff + 4 * spec.n_embd)
    return max(logits, attention) + COMPUTE_SLACK


def output_buffer_bytes(spec: ModelSpec, opts: LoadOptions) -> int:
    per_output = spec.n_vocab + (spec.n_embd if opts.embeddings else 0)
    return 4 * per_output * opts.n_seq


def estimate_memory(
    spec: ModelSpec,
    opts: LoadOptions,
    *,
    backend: Backend = "cpu",
    gpu_names: list[str] | None = None,
    layer_split: list[int] | None = None,
    repack: bool = True,
) -> MemoryEstimate:
    """Estimate per-device memory for `opts`.

    `layer_split` gives layers per GPU (in order); without it `opts.n_gpu_layers` layers go to the
    first GPU. Layers are offloaded from the top, as llama.cpp does; the output layer follows the last
    block onto the GPU only when every block is there. `repack`: this CPU has the REPACK kernels
    (x86 AVX2 or Arm dotprod), which copy some weight types once more.
    """
    cells = kv_cells(opts.n_ctx, opts.n_seq, opts.kv_unified)
    repack = repack and opts.extra_bufts
    n_layers = spec.n_layers
    gpus = gpu_names or ([] if backend == "cpu" else ["GPU0"])
    if layer_split is None:
        n_gpu = n_layers + 1 if opts.n_gpu_layers < 0 else min(opts.n_gpu_layers, n_layers + 1)
        layer_split = [n_gpu] + [0] * (len(gpus) - 1) if gpus else []
    total_gpu = min(sum(layer_split), n_layers + 1)
    first_gpu_layer = n_layers - min(total_gpu, n_layers)
    output_on_gpu = total_gpu > n_layers

    cpu = DeviceUse("CPU", overhead=BACKEND_OVERHEAD["cpu"])
    devices = [DeviceUse(name, overhead=BACKEND_OVERHEAD[backend]) for name in gpus]
    owner: list[DeviceUse] = []
    idx, remaining = 0, list(layer_split)
    for il in range(n_layers):
        if il < first_gpu_layer or not devices:
            owner.append(cpu)
            continue
        while idx < len(remaining) - 1 and remaining[idx] <= 0:
            idx += 1
        remaining[idx] -= 1
        owner.append(devices[idx])

    for il, dev in enumerate(owner):
        dev.layers += 1
        dev.weights += spec.block_bytes[il] if il < len(spec.block_bytes) else 0
        dev.kv += kv_bytes_per_layer(spec, il, cells, opts)
        if dev is cpu and repack and il < len(spec.repack_block_bytes):
            dev.repack += spec.repack_block_bytes[il]
    out_dev = devices[-1] if (output_on_gpu and devices) else cpu
    tied = spec.output_bytes if spec.tied_embeddings else 0
    cpu.weights += spec.input_bytes  # token_embd stays on the host (get_rows)
    if repack:
        cpu.repack += spec.repack_embd_bytes
    if out_dev is cpu:
        cpu.weights += spec.output_bytes - tied + spec.other_bytes
    else:
        out_dev.weights += spec.output_bytes + spec.other_bytes  # a tied output is copied to the GPU
        out_dev.layers += 1
    if spec.recurrent_state_bytes:
        owner_dev = out_dev if devices else cpu
        owner_dev.recurrent += spec.recurrent_state_bytes * opts.n_seq
    if not opts.use_mmap:
        # Without mmap the repacked tensors are read straight into the REPACK buffer, not twice.
        cpu.weights -= min(cpu.weights, cpu.repack)

    compute = compute_buffer_bytes(spec, opts, kv_cells(opts.n_ctx))  # attention spans one stream's cells
    for dev in devices:
        if dev.layers:
            dev.compute = compute
    cpu.compute = compute if (not devices or not output_on_gpu) else compute // 4
    cpu.output = output_buffer_bytes(spec, opts)
    used = [cpu] + [d for d in devices if d.layers or d.weights]
    return MemoryEstimate(options=opts, kv_cells=cells, devices=used)
