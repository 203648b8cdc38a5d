"""Which serving engine a deployment gets (the engine-selection guides' decision rules, each with its
reason in one sentence), and the exact command that launches it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Literal

from app.core.deploy.shape import ModelShape
from app.core.deploy.sizing import EXL_BPWS, dtype_quality
from app.core.deploy.targets import Target

Engine = Literal["vllm", "sglang", "llama.cpp", "mlx", "exllama"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "llama.cpp", "mlx", "exllama")
FEW_USERS = 4  # up to this many concurrent users, a consumer card needs no serving engine's batching
MEMORY_UTILIZATION = 0.9
PORT = 8000


@dataclass(frozen=True)
class EngineChoice:
    engine: Engine
    reason: str


def choose_engines(
    shape: ModelShape, target: Target, *, gpus: int, users: int, shared_prefix: bool, dtype: str
) -> list[EngineChoice]:
    """Engines to try in order: the guides' pick first, then a fallback when that one cannot fit."""
    if shape.native_dtype == "gguf":
        return [EngineChoice("llama.cpp", "the model is a GGUF: llama.cpp's llama-server serves it as it is")]
    if shape.native_dtype.startswith("mlx"):
        return [EngineChoice("mlx", "the model is an MLX conversion: mlx-lm serves it as it is")]
    if shape.native_dtype.startswith("exl"):
        return [EngineChoice("exllama", "the model is an EXL2/EXL3 quant: ExLlama (through TabbyAPI) serves it")]
    if target.cls == "apple":
        return [
            EngineChoice("mlx", "on Apple Silicon MLX runs the model in unified memory on the Metal GPU"),
            EngineChoice("llama.cpp", "llama.cpp's Metal backend runs a GGUF of it when an MLX copy will not fit"),
        ]
    vllm = EngineChoice(
        "vllm",
        "many users on datacenter GPUs: vLLM's paged KV cache and continuous batching keep every GPU busy"
        if target.cls == "datacenter"
        else f"{users} concurrent users: vLLM batches them continuously over a paged KV cache",
    )
    if shared_prefix:
        sglang = EngineChoice(
            "sglang",
            "requests share a long prefix (agents, one big system prompt): SGLang's RadixAttention reuses its "
            "cached KV instead of recomputing it",
        )
        return [sglang, vllm]
    if target.cls == "consumer" and gpus <= 2 and users <= FEW_USERS and dtype in ("auto", "int4"):
        exl = EngineChoice(
            "exllama",
            "one or two consumer NVIDIA cards and few users: ExLlamaV3 (through TabbyAPI) fits the most model "
            "into their VRAM with EXL3 quants sized to it",
        )
        return [exl, vllm]
    return [vllm]


def dtype_ladder(engine: Engine, shape: ModelShape, target: Target) -> list[str]:
    """The weight formats this engine can run on this hardware, best quality first."""
    if engine == "llama.cpp":
        if shape.gguf_quants:
            return sorted(shape.gguf_quants, key=dtype_quality)
        return ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M"]
    native = shape.native_dtype
    if engine == "mlx":
        return [native] if native.startswith("mlx") else ["bf16", "mlx8", "mlx4"]
    if engine == "exllama":
        return [native] if native.startswith("exl") else [f"exl{b:g}" for b in EXL_BPWS]
    if shape.native_dtype not in ("bf16", "gguf"):
        return [shape.native_dtype] if shape.native_dtype in target.kernels else []
    ladder = ["bf16", "fp8", "nvfp4", "int4"]
    return [d for d in ladder if d in target.kernels]


def dtype_for_request(engine: Engine, requested: str) -> str | None:
    """A user's --dtype in this engine's terms (None: the engine cannot run it)."""
    if requested == "auto":
        return requested
    if engine == "mlx":
        return {"bf16": "bf16", "int8": "mlx8", "int4": "mlx4"}.get(requested)
    if engine == "exllama":
        return "exl4" if requested == "int4" else None
    if engine == "llama.cpp":
        return {"bf16": "BF16", "int8": "Q8_0", "int4": "Q4_K_M"}.get(requested, requested.upper())
    return requested if requested in ("bf16", "fp8", "nvfp4", "int4") else None


DTYPE_LABELS = {"bf16": "BF16", "fp8": "FP8", "nvfp4": "NVFP4", "int4": "AWQ/GPTQ INT4"}


def dtype_label(dtype: str) -> str:
    if dtype.startswith("exl"):
        return f"EXL3 {float(dtype[3:]):.1f} bpw"
    if dtype.startswith("mlx"):
        return f"MLX {dtype[3:]}-bit"
    return DTYPE_LABELS.get(dtype, dtype)


@dataclass
class Launch:
    """How to start the server: optional preparation steps, then the command (argv); `config` holds a
    config file's lines when the engine is configured by file (TabbyAPI)."""

    argv: list[str]
    prepare: list[list[str]] = field(default_factory=list)
    config: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def launch_command(
    engine: Engine, shape: ModelShape, dtype: str, *, tp: int, pp: int, ctx: int, users: int, target: Target
) -> Launch:
    model = shape.repo_id or shape.name
    if engine == "vllm":
        argv = ["vllm", "serve", model, "--tensor-parallel-size", str(tp), "--max-model-len", str(ctx)]
        argv += ["--gpu-memory-utilization", f"{MEMORY_UTILIZATION:g}", "--max-num-seqs", str(users)]
        launch = Launch(argv)
        _quantization(launch, shape, dtype)
        if pp > 1:
            argv += ["--pipeline-parallel-size", str(pp)]
            if tp * pp > target.per_node:
                launch.notes.append(
                    f"{tp * pp} GPUs span {-(-tp * pp // target.per_node)} nodes: start a Ray cluster on them "
                    "(`ray start --head` on one, `ray start --address HEAD:6379` on the others), then run this "
                    "on the head node"
                )
        argv += ["--port", str(PORT)]
        return launch
    if engine == "sglang":
        argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp", str(tp)]
        argv += ["--context-length", str(ctx), "--mem-fraction-static", f"{MEMORY_UTILIZATION:g}"]
        argv += ["--max-running-requests", str(users)]
        launch = Launch(argv)
        _quantization(launch, shape, dtype)
        if pp > 1:
            argv += ["--pp-size", str(pp)]
        nodes = -(-tp * pp // target.per_node)
        if nodes > 1:
            launch.notes.append(
                f"{tp * pp} GPUs span {nodes} nodes: run this on each with `--nnodes {nodes} --node-rank I "
                "--dist-init-addr HEAD:5000` added (I from 0 on the head node)"
            )
        argv += ["--port", str(PORT)]
        return launch
    if engine == "llama.cpp":
        return _llama_server(shape, dtype, ctx=ctx, users=users)
    if engine == "mlx":
        return _mlx(shape, dtype)
    return _tabby(shape, dtype, tp=tp, ctx=ctx, users=users)


def _quantization(launch: Launch, shape: ModelShape, dtype: str) -> None:
    if shape.native_dtype == dtype:
        return  # a pre-quantized checkpoint: the engine reads its quantization_config
    if dtype == "fp8":
        launch.argv += ["--quantization", "fp8"]  # quantized on load, no calibration needed
    elif dtype in ("nvfp4", "int4"):
        kind = "an NVFP4 (ModelOpt or compressed-tensors)" if dtype == "nvfp4" else "an AWQ or GPTQ"
        launch.notes.append(
            f"{dtype_label(dtype)} needs a pre-quantized checkpoint: serve {kind} copy of {shape.name} in "
            "place of the repo id (its config tells the engine the format)"
        )


def _llama_server(shape: ModelShape, dtype: str, *, ctx: int, users: int) -> Launch:
    # llama-server's -c is the whole cache, shared by its -np slots: each slot gets c / np tokens.
    tail = ["-c", str(ctx * users), "-np", str(users), "-ngl", "99", "--host", "0.0.0.0", "--port", str(PORT)]
    if shape.source == "gguf" and shape.gguf_file:
        return Launch(["llama-server", "-m", shape.gguf_file, *tail])
    if shape.gguf_quants:
        return Launch(["llama-server", "-hf", f"{shape.name}:{dtype}", *tail])
    return Launch(
        ["llama-server", "-m", f"{_stem(shape)}-{dtype}.gguf", *tail],
        notes=[
            f"needs a {dtype} GGUF of {shape.name}: download one, or convert with llama.cpp's convert_hf_to_gguf.py"
        ],
    )


def _mlx(shape: ModelShape, dtype: str) -> Launch:
    model = shape.repo_id or shape.name
    if dtype in ("bf16", shape.native_dtype):  # the checkpoint as it is
        return Launch(["mlx_lm.server", "--model", model, "--host", "0.0.0.0", "--port", str(PORT)])
    bits = dtype[3:]
    out = f"./{_stem(shape)}-{bits}bit"
    convert = ["mlx_lm.convert", "--hf-path", model, "--mlx-path", out, "-q", "--q-bits", bits, "--q-group-size", "64"]
    return Launch(["mlx_lm.server", "--model", out, "--host", "0.0.0.0", "--port", str(PORT)], prepare=[convert])


# TabbyAPI keys, as its config_sample.yml documents them (model section).
TABBY_MODEL_KEYS = (
    "model_name",
    "backend",
    "max_seq_len",
    "cache_size",
    "cache_mode",
    "max_batch_size",
    "tensor_parallel",
    "tensor_parallel_backend",
)


def _tabby(shape: ModelShape, dtype: str, *, tp: int, ctx: int, users: int) -> Launch:
    bpw = float(dtype[3:])
    own = dtype == shape.native_dtype  # the repo is the quant
    name = _stem(shape) if own else f"{_stem(shape)}-exl3-{bpw:.1f}bpw"
    cache = -(-ctx * users // 256) * 256  # TabbyAPI wants the cache size in multiples of 256 tokens
    config = [
        "model:",
        f"  model_name: {name}",
        "  backend: exllamav3",
        f"  max_seq_len: {ctx}",
        f"  cache_size: {cache}",
        "  cache_mode: FP16",
        f"  max_batch_size: {users}",
    ]
    if tp > 1:
        config += ["  tensor_parallel: true", "  tensor_parallel_backend: native"]
    return Launch(
        ["python", "start.py"],
        config=config,
        notes=[
            f"put {shape.name} in TabbyAPI's models folder as {name}, and these lines in its config.yml"
            if own
            else f"put an EXL3 {bpw:.1f} bpw quant of {shape.name} in TabbyAPI's models folder as {name} (from the "
            "Hub, or made with ExLlamaV3's convert.py), and these lines in its config.yml"
        ],
    )


def _stem(shape: ModelShape) -> str:
    name = PurePath(shape.name.rstrip("/")).name
    return name[:-5] if name.lower().endswith(".gguf") else name
