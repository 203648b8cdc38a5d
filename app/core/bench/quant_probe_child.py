"""The quant probe's child process: `python -m app.core.bench.quant_probe_child '<json args>'`.

First times two thin models of different depths (the per-layer cost, one JSON line), then writes a generated
llama model in F16, has llama.cpp quantize it to each weight type asked for, decodes a few tokens of each and
prints one JSON line per type, then `{"done": true}`. Native code runs only here: a crash
(llama.cpp's AMX kernels segfault on some Xeons) or a hang costs the measurement, never the app
(bench/quant_probe.py runs this with a hard timeout and reads only what it printed).

Only measurements are printed; what they mean for the speed model is worked out in the parent.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# The probe model: the matrices of a ~1B model (a 1024-wide one streamed 15-40 % slower per byte here than
# the 1B Llama users run, so its figures under-predicted every real model) and only 4 layers: ~200 M weights
# (~410 MB in F16, ~115 MB in Q4_K), past the last-level cache of most CPUs. Every layer holds the same bytes
# (replicate_layers) in its own copy, so a token still streams all of them from RAM.
SHAPE = {"n_embd": 2048, "n_ff": 5632, "n_layer": 4, "n_head": 16, "n_head_kv": 16}
# The per-layer cost: two thin models that differ only in depth, small enough to stay in cache, so the
# difference in their token times is the per-layer work (graph ops, thread barriers) and not weight reads.
THIN = {"n_embd": 128, "n_ff": 256, "n_head": 2, "n_head_kv": 2}
THIN_LAYERS = (4, 32)
# llama.cpp file type per weight type; `pure` keeps every tensor at that type (no Q6_K output in Q4_K_M).
FTYPES = {
    "F16": "MOSTLY_F16",
    "BF16": "MOSTLY_BF16",
    "Q8_0": "MOSTLY_Q8_0",
    "Q6_K": "MOSTLY_Q6_K",
    "Q5_K": "MOSTLY_Q5_K_M",
    "Q5_0": "MOSTLY_Q5_0",
    "Q5_1": "MOSTLY_Q5_1",
    "Q4_K": "MOSTLY_Q4_K_M",
    "Q4_1": "MOSTLY_Q4_1",
    "Q4_0": "MOSTLY_Q4_0",
    "Q3_K": "MOSTLY_Q3_K_M",
    "Q2_K": "MOSTLY_Q2_K",
    "IQ4_XS": "MOSTLY_IQ4_XS",
}
WARMUP_TOKENS = 4
ROUNDS = 3


def _vocab() -> tuple[list[str], list[str]]:
    """GPT-2 byte tokens, one merge, an end-of-text token: the least llama.cpp's BPE loader accepts."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    byte_char, extra = {}, 0
    for b in range(256):
        if b in printable:
            byte_char[b] = chr(b)
        else:
            byte_char[b] = chr(256 + extra)
            extra += 1
    tokens = [byte_char[b] for b in range(256)]
    space = byte_char[ord(" ")]
    return [*tokens, space + "t", "<|endoftext|>"], [f"{space} t"]


def write_base_model(path: Path, shape: dict[str, int] | None = None, seed: int = 0) -> Path:
    """An F16 llama GGUF with random weights. Tensors of one shape share one random block: the values do
    not change the read speed, and the writer then holds ~20 MB, not the model."""
    import numpy as np

    s = {**SHAPE, **(shape or {})}
    e, ff = s["n_embd"], s["n_ff"]
    rng = np.random.default_rng(seed)

    def block(*dims: int) -> Any:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    embd = block(len(_vocab()[0]), e)
    blocks = {"square": block(e, e), "up": block(ff, e), "down": block(e, ff), "embd": embd, "output": embd}
    return _write_model(path, s, {k: (v, None) for k, v in blocks.items()}, file_type=1)


def replicate_layers(one_layer: Path, path: Path, shape: dict[str, int] | None = None) -> Path:
    """The full-depth model from a quantized one-layer one: llama.cpp quantizes a layer once (most of the
    probe's time otherwise), and every layer reuses its bytes."""
    import gguf

    s = {**SHAPE, **(shape or {})}
    reader = gguf.GGUFReader(str(one_layer))
    by_name = {t.name: t for t in reader.tensors}
    names = {
        "square": "blk.0.attn_q.weight",
        "up": "blk.0.ffn_up.weight",
        "down": "blk.0.ffn_down.weight",
        "embd": "token_embd.weight",
        "output": "output.weight",
    }
    blocks = {k: (by_name[n].data, by_name[n].tensor_type) for k, n in names.items()}
    return _write_model(path, s, blocks, file_type=1)


def _write_model(path: Path, s: dict[str, int], blocks: dict[str, tuple[Any, Any]], file_type: int) -> Path:
    """A llama GGUF whose tensors of one role ("square", "up", "down", "embd", "output") are all `blocks[role]`
    (data, and its ggml type when raw bytes)."""
    import gguf
    import numpy as np

    e, n_layer = s["n_embd"], s["n_layer"]
    tokens, merges = _vocab()
    norm = np.ones(e, dtype=np.float32)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("Hearth quant probe")
    w.add_file_type(file_type)
    w.add_context_length(512)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(e // s["n_head"])
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * (len(tokens) - 1) + [gguf.TokenType.CONTROL])
    w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    w.add_add_bos_token(False)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    def add(name: str, role: str) -> None:
        data, raw = blocks[role]
        w.add_tensor(name, data, raw_dtype=raw)

    add("token_embd.weight", "embd")
    for i in range(n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(f"blk.{i}.{name}.weight", "square")
        add(f"blk.{i}.ffn_gate.weight", "up")
        add(f"blk.{i}.ffn_up.weight", "up")
        add(f"blk.{i}.ffn_down.weight", "down")
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm)
    w.add_tensor("output_norm.weight", norm)
    add("output.weight", "output")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def quantize(llama_cpp: Any, src: Path, dst: Path, weight_type: str, threads: int) -> Path:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_{FTYPES[weight_type]}")
    params.nthread = threads
    params.pure = True
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize returned {rc} for {weight_type}")
    return dst


def time_decode(llama_cpp: Any, path: Path, threads: int, tokens: int, extra_bufts: bool = True) -> float:
    """Seconds per decoded token: the median of a few rounds' medians, what a user's decode meets on a
    machine whose speed wanders (the fastest round over-stated it by 10-20 % on a shared VM). With
    `extra_bufts` off the model loads as the native canary found safe (no AMX / repacked buffers)."""
    from app.core.engines.base import LoadSpec
    from app.core.engines.llamacpp.options import model_params_for

    with model_params_for(llama_cpp, LoadSpec(path=path, extra_bufts=extra_bufts)):
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=32, n_threads=threads, verbose=False)
    try:
        rounds = []
        for _ in range(ROUNDS):
            llm.reset()
            llm.eval([1, 2, 3])
            times = []
            for i in range(WARMUP_TOKENS + tokens):
                t0 = time.perf_counter()
                llm.eval([(i * 7) % 250 + 3])
                times.append(time.perf_counter() - t0)
            rounds.append(statistics.median(times[WARMUP_TOKENS:]))
        return statistics.median(rounds)
    finally:
        llm.close()


def _emit(item: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(item) + "\n")  # the protocol with the parent: one JSON object a line
    sys.stdout.flush()


def layer_seconds(llama_cpp: Any, folder: Path, threads: int, tokens: int, extra_bufts: bool) -> dict[str, Any]:
    """Per-layer seconds per decoded token: the slope between two thin models of THIN_LAYERS depths."""
    times = []
    for depth in THIN_LAYERS:
        path = write_base_model(folder / f"thin-{depth}.gguf", {**THIN, "n_layer": depth})
        times.append(time_decode(llama_cpp, path, threads, tokens, extra_bufts))
        path.unlink(missing_ok=True)
    shallow, deep = THIN_LAYERS
    return {"layer_s": (times[1] - times[0]) / (deep - shallow), "thin_seconds": times, "thin_layers": THIN_LAYERS}


def measure(args: dict[str, Any]) -> None:
    from app.core.hardware.bandwidth import measure_read_bandwidth
    from app.core.models.gguf import read_gguf_header
    from app.core.models.spec import spec_from_gguf
    from app.core.native import import_native

    llama_cpp = import_native("llama_cpp")
    folder, threads, tokens = Path(args["dir"]), int(args["threads"]), int(args["tokens"])
    extra_bufts = bool(args.get("extra_bufts", True))
    shape = {**SHAPE, **args.get("shape", {})}
    # Only for the record (the rates are the speed model's inputs): how they compare with plain reads.
    gbps = measure_read_bandwidth(budget_s=float(args.get("bandwidth_budget_s", 0.15)), threads=threads)
    _emit(layer_seconds(llama_cpp, folder, threads, tokens, extra_bufts))
    base = write_base_model(folder / "probe-F16.gguf", shape)
    one_layer = write_base_model(folder / "probe-F16-1.gguf", {**shape, "n_layer": 1})
    for weight_type in args["types"]:
        if args.get("parent") and os.getppid() != args["parent"]:
            return  # the app exited mid-probe: nobody reads the result, and the files are ours to leave
        t0 = time.perf_counter()
        path = base if weight_type == "F16" else folder / f"probe-{weight_type}.gguf"
        if path != base:
            small = quantize(llama_cpp, one_layer, folder / f"probe-{weight_type}-1.gguf", weight_type, threads)
            replicate_layers(small, path, shape)
            small.unlink()
        t1 = time.perf_counter()
        seconds = time_decode(llama_cpp, path, threads, tokens, extra_bufts)
        spec = spec_from_gguf(read_gguf_header(path))
        row = {
            "type": weight_type,
            "seconds": seconds,
            "bytes_read": spec.bytes_per_token_read,
            "layers": spec.n_layers,
            "vocab": spec.n_vocab,
            "bandwidth_gbps": gbps,
            "tensor_types": spec.tensor_types,
            "prepare_s": t1 - t0,  # quantizing and writing the model
            "measure_s": time.perf_counter() - t1,
        }
        _emit(row)
        if path != base:
            path.unlink(missing_ok=True)
    _emit({"done": True})


def main(argv: list[str]) -> int:
    measure(json.loads(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
