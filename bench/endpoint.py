"""The API server's cost over the engine host, and the same load against llama-server, in one run.

    bash bench/build_peers.sh          # once (~10 min, cached): llama-server from the same llama.cpp
    .venv/bin/python bench/endpoint.py [--runs 5] [--clients 8] [--no-peer]

Same GGUF (SmolLM2), same threads and context, alternating, warm-up first, medians. The HTTP clients run
in a separate process, as real clients do (in-process they would share the server's GIL):
1. streamed decode tok/s through the endpoint ÷ through the engine host directly (target ≥ 0.97);
2. time to first token the server adds, p50 over the runs (target < 5 ms);
3. N concurrent streaming clients: p50/p95/p99 TTFT and time per output token, aggregate tok/s, beside
   the same load against `llama-server -np 1` (one request at a time there too: the case for batching).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine import Server, models  # noqa: E402

from app.core.engines import default_registry  # noqa: E402
from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams  # noqa: E402
from app.core.engines.llamacpp_options import physical_cores  # noqa: E402
from app.core.runtime.host import EngineHost  # noqa: E402
from app.core.runtime.jobs import ChunkEvent, GenerateJob  # noqa: E402
from app.server.app import create_app  # noqa: E402
from app.server.context import ServerContext  # noqa: E402
from app.server.runner import ServerThread  # noqa: E402

N_PREDICT = 128
N_CTX = 4096
SYSTEM = "You are a helpful assistant."
QUESTION = "Tell me a long story about a lighthouse keeper and the sea."


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def host_direct(host: EngineHost) -> tuple[float, float]:
    """(ttft s, decode tok/s) of one streamed generation straight through the host."""
    request = GenerateRequest(
        messages=[ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=QUESTION)],
        sampling=SamplingParams(temperature=0.0, max_tokens=N_PREDICT),
    )
    times: list[float] = []
    t0 = time.perf_counter()
    handle = host.submit(
        GenerateJob(request, source="bench"),
        lambda e: times.append(time.perf_counter()) if isinstance(e, ChunkEvent) and e.chunk.text else None,
    )
    handle.wait(300)
    return times[0] - t0, (len(times) - 1) / (times[-1] - times[0])


CLIENT = r"""
import json, sys, threading, time
import httpx
url, model, n, clients, max_tokens, system, question = sys.argv[1:8]
body = {"model": model, "stream": True, "temperature": 0, "max_tokens": int(max_tokens), "seed": 1,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
def once(out):
    arrivals = []
    # The client made before the clock starts: httpx.Client() loads certificates (tens of ms), client-side.
    with httpx.Client(timeout=600) as c:
        t0 = time.perf_counter()
        stream(c, t0, arrivals)
    out.append(arrivals)
def stream(c, t0, arrivals):
    with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                d = json.loads(line[6:])
                ch = d.get("choices") or []
                if ch and (ch[0].get("delta") or {}).get("content"):
                    arrivals.append(time.perf_counter() - t0)
for _ in range(int(n)):
    results = []
    threads = [threading.Thread(target=once, args=(results,)) for _ in range(int(clients))]
    t0 = time.perf_counter()
    [t.start() for t in threads]; [t.join() for t in threads]
    print(json.dumps({"wall": time.perf_counter() - t0, "runs": results}), flush=True)
"""


def remote(url: str, model: str, clients: int = 1, runs: int = 1) -> list[dict]:
    """Streamed chat completions from a separate process: per run, the wall time and each client's token
    arrival times (seconds from its own start)."""
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, url, model, str(runs), str(clients), str(N_PREDICT), SYSTEM, QUESTION],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def decode_rate(arrivals: list[float]) -> float:
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0


def concurrent(url: str, model: str, clients: int) -> dict[str, float]:
    (run,) = remote(url, model, clients)
    ttfts = [a[0] for a in run["runs"] if a]
    tpots = [(a[-1] - a[0]) / (len(a) - 1) for a in run["runs"] if len(a) > 1]
    tokens = sum(len(a) for a in run["runs"])
    wall = run["wall"]
    return {
        "ttft_p50": pct(ttfts, 0.5),
        "ttft_p95": pct(ttfts, 0.95),
        "ttft_p99": pct(ttfts, 0.99),
        "tpot_p50": pct(tpots, 0.5),
        "tpot_p95": pct(tpots, 0.95),
        "tpot_p99": pct(tpots, 0.99),
        "aggregate_tok_s": tokens / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--no-peer", action="store_true", help="skip llama-server")
    args = parser.parse_args()
    os.environ.setdefault("HEARTH_HOME", str(ROOT / "bench" / "out" / "home"))
    model_path = models(include_1b=False)["SmolLM2-135M Q4_1"]
    threads = physical_cores()

    host = EngineHost(default_registry(), queue_size=64, name="bench-host")
    host.load_sync(LoadSpec(path=model_path, n_ctx=N_CTX, n_threads=threads), "gguf", plan_check=False)
    context = ServerContext(host)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    model = model_path.name
    try:
        host_direct(host)  # warm-up
        remote(runner.url, model)
        direct, served = [], []
        for _ in range(args.runs):  # alternating, so drift hits both alike
            direct.append(host_direct(host))
            (run,) = remote(runner.url, model)
            arrivals = run["runs"][0]
            served.append((arrivals[0], decode_rate(arrivals)))
        d_ttft = statistics.median(t for t, _ in direct)
        s_ttft = statistics.median(t for t, _ in served)
        d_rate = statistics.median(r for _, r in direct)
        s_rate = statistics.median(r for _, r in served)
        print(f"model {model}, {threads} threads, n_ctx {N_CTX}, {N_PREDICT} tokens, {args.runs} runs (medians)")
        print(
            f"decode through the endpoint {s_rate:.1f} tok/s ÷ host {d_rate:.1f} tok/s = {s_rate / d_rate:.3f}"
            " (target >= 0.97)"
        )
        print(f"time to first token added by the server: {(s_ttft - d_ttft) * 1000:.1f} ms (target < 5 ms)")
        ours = concurrent(runner.url, model, args.clients)
    finally:
        runner.stop()
        host.shutdown(10)
    rows = [("Hearth", ours)]
    if not args.no_peer:
        bins = Path(
            subprocess.run(
                ["bash", str(ROOT / "bench/build_peers.sh"), sys.executable], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        server = Server(bins / "llama-server", model_path, threads, flash_attn=False)
        url = f"http://127.0.0.1:{server.port}"
        try:
            remote(url, model)  # warm-up
            rows.append(("llama-server -np 1", concurrent(url, model, args.clients)))
        finally:
            server.close()
    print(f"\n{args.clients} concurrent streaming clients:")
    print(f"{'server':<20} {'TTFT p50/p95/p99 (s)':<24} {'TPOT p50/p95/p99 (ms)':<24} aggregate tok/s")
    for name, r in rows:
        ttft = f"{r['ttft_p50']:.2f}/{r['ttft_p95']:.2f}/{r['ttft_p99']:.2f}"
        tpot = f"{r['tpot_p50'] * 1000:.1f}/{r['tpot_p95'] * 1000:.1f}/{r['tpot_p99'] * 1000:.1f}"
        print(f"{name:<20} {ttft:<24} {tpot:<24} {r['aggregate_tok_s']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
