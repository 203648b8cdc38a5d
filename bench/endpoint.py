"""The API server's cost over the engine host, and the same load against llama-server, in one run.

    bash bench/build_peers.sh          # once (~10 min, cached): llama-server from the same llama.cpp
    .venv/bin/python bench/endpoint.py [--runs 5] [--clients 8] [--no-peer]

Same GGUF (SmolLM2), same threads and context, alternating, warm-up first, medians. The HTTP clients run
in a separate process, as real clients do (in-process they would share the server's GIL), each with a warm
keep-alive connection:
1. streamed decode tok/s through the endpoint ÷ through the engine host directly (target ≥ 0.98), and the
   engine's own rate while serving (the `timings` on the last chunk): what the HTTP path loses, apart from
   what the engine loses to the CPU the server and the client take (with every core in the engine's
   threads, as on a 2-core machine, that is most of it: try `--threads 1`);
2. time to first token the server adds, p50 over the runs (target ≤ 2 ms); both measured after the engine
   sat idle for the same IDLE_S, as a request after a pause finds it (threads asleep, caches cold: back to
   back, the direct one found it warm and the comparison charged the server ~5 ms that was the idle's);
2b. the Ollama route (/api/chat, NDJSON) against the OpenAI route (/v1/chat/completions, SSE) in the same
   run, same client: streamed decode tok/s Ollama ÷ OpenAI (target ≥ 0.98) and the TTFT it adds, as a
   difference of medians (target ≤ 2 ms);
3. the same single stream from `llama-server -np 1` built by bench/build_peers.sh, with the same client;
4. N concurrent streaming clients on this one-slot load: p50/p95/p99 TTFT and time per output token,
   aggregate tok/s, beside the same load against llama-server (one request at a time there too). The slots
   `hearth serve` plans, and batching against `llama-server -np N`, are bench/concurrency.py's.
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

from bench_args import add_json, add_peers, peer_dir  # noqa: E402
from engine import Server, models  # noqa: E402

from app.core.engines import default_registry  # noqa: E402
from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams  # noqa: E402
from app.core.engines.llamacpp.options import default_threads  # noqa: E402
from app.core.runtime.engine_host import EngineHost  # noqa: E402
from app.core.runtime.jobs import ChunkEvent, GenerateJob  # noqa: E402
from app.server.app import create_app  # noqa: E402
from app.server.context import ServerContext  # noqa: E402
from app.server.runner import ServerThread  # noqa: E402

N_PREDICT = 128
N_CTX = 4096
SYSTEM = "You are a helpful assistant."
QUESTION = "Tell me a long story about a lighthouse keeper and the sea."
IDLE_S = 0.5  # the engine's rest before each single-stream measure, direct and through the API alike


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
    time.sleep(IDLE_S)
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
url, model, n, clients, max_tokens, system, question, route, idle = sys.argv[1:10]
messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
if route == "ollama":  # Ollama's /api/chat: one JSON object a line, the sampling under options
    path = "/api/chat"
    body = {"model": model, "stream": True, "messages": messages,
            "options": {"temperature": 0, "num_predict": int(max_tokens), "seed": 1}}
else:
    path = "/v1/chat/completions"
    body = {"model": model, "stream": True, "temperature": 0, "max_tokens": int(max_tokens), "seed": 1,
            "messages": messages}
def read_openai(line, arrivals, t0, timings):
    if line.startswith("data: {"):
        d = json.loads(line[6:])
        ch = d.get("choices") or []
        if ch and (ch[0].get("delta") or {}).get("content"):
            arrivals.append(time.perf_counter() - t0)
        timings = d.get("timings") or timings
    return timings
def read_ollama(line, arrivals, t0, timings):
    if line:
        d = json.loads(line)
        if (d.get("message") or {}).get("content"):
            arrivals.append(time.perf_counter() - t0)
        if d.get("done") and d.get("eval_duration"):  # the engine's own rate, as `timings` on the other route
            timings = {"predicted_per_second": d["eval_count"] / d["eval_duration"] * 1e9}
    return timings
read = read_ollama if route == "ollama" else read_openai
warm = {"options": {**body["options"], "num_predict": 1}} if route == "ollama" else {"max_tokens": 1}
def once(out, ready):
    # A client as an editor holds one: made, connected and warm before the clock starts (httpx.Client()
    # alone loads certificates for tens of ms, and a first request pays imports and the TCP handshake).
    arrivals, timings = [], {}
    with httpx.Client(timeout=600) as c:
        c.get(url + "/health")
        if float(idle):  # a first streamed request warms the client's own code paths, not only its socket
            with c.stream("POST", url + path, json={**body, **warm}) as r:
                for _ in r.iter_lines():
                    pass
            time.sleep(float(idle))  # the server and its engine at rest, as the direct measure finds them
        ready.wait()
        t0 = time.perf_counter()
        with c.stream("POST", url + path, json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                timings = read(line, arrivals, t0, timings)
    out.append({"arrivals": arrivals, "timings": timings})
for _ in range(int(n)):
    results = []
    ready = threading.Barrier(int(clients) + 1)
    threads = [threading.Thread(target=once, args=(results, ready)) for _ in range(int(clients))]
    [t.start() for t in threads]
    ready.wait()
    t0 = time.perf_counter()
    [t.join() for t in threads]
    print(json.dumps({"wall": time.perf_counter() - t0, "runs": results}), flush=True)
"""


def remote(url: str, model: str, clients: int = 1, runs: int = 1, route: str = "openai") -> list[dict]:
    """Streamed chat completions from a separate process: per run, the wall time and each client's token
    arrival times (seconds from its own start). `route` "ollama": through /api/chat instead."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CLIENT,
            url,
            model,
            str(runs),
            str(clients),
            str(N_PREDICT),
            SYSTEM,
            QUESTION,
            route,
            str(IDLE_S if clients == 1 else 0),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def decode_rate(arrivals: list[float]) -> float:
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0


def single(url: str, model: str, route: str = "openai") -> dict[str, float]:
    """One streamed reply as a client sees it (TTFT, decode rate) and as the server's engine measured it."""
    ((client,),) = (run["runs"] for run in remote(url, model, route=route))
    arrivals, timings = client["arrivals"], client["timings"]
    return {"ttft": arrivals[0], "rate": decode_rate(arrivals), "engine_rate": timings.get("predicted_per_second", 0)}


def concurrent(url: str, model: str, clients: int) -> dict[str, float]:
    (run,) = remote(url, model, clients)
    streams = [c["arrivals"] for c in run["runs"] if c["arrivals"]]
    ttfts = [a[0] for a in streams]
    tpots = [(a[-1] - a[0]) / (len(a) - 1) for a in streams if len(a) > 1]
    tokens = sum(len(a) for a in streams)
    return {
        "ttft_p50": pct(ttfts, 0.5),
        "ttft_p95": pct(ttfts, 0.95),
        "ttft_p99": pct(ttfts, 0.99),
        "tpot_p50": pct(tpots, 0.5),
        "tpot_p95": pct(tpots, 0.95),
        "tpot_p99": pct(tpots, 0.99),
        "aggregate_tok_s": tokens / run["wall"],
    }


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0, help="engine threads (default: physical cores)")
    add_peers(parser)
    add_json(parser, "the ratios")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HEARTH_HOME", str(ROOT / "bench" / "out" / "home"))
    model_path = models(include_1b=False)["SmolLM2-135M Q4_1"]
    threads = args.threads or default_threads()

    host = EngineHost(default_registry(), queue_size=64, name="bench-host")
    host.load_sync(LoadSpec(path=model_path, n_ctx=N_CTX, n_threads=threads), "gguf", plan_check=False)
    context = ServerContext(host)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    model = model_path.name
    try:
        host_direct(host)  # warm-up
        single(runner.url, model)
        single(runner.url, model, "ollama")
        direct, served, ollama = [], [], []
        for i in range(args.runs):  # alternating, so drift hits all alike
            ttft, rate = host_direct(host)
            direct.append({"ttft": ttft, "rate": rate})
            # The two routes take turns going first, so neither always runs on a just-warmed engine.
            for route in ("openai", "ollama") if i % 2 == 0 else ("ollama", "openai"):
                (served if route == "openai" else ollama).append(single(runner.url, model, route))
        ours = concurrent(runner.url, model, args.clients)
    finally:
        runner.stop()
        host.shutdown(10)
    rows = [("Hearth", ours)]
    peer: list[dict[str, float]] = []
    if not args.no_peer:
        bins = peer_dir(args)
        server = Server(bins / "llama-server", model_path, threads, flash_attn=False)
        url = f"http://127.0.0.1:{server.port}"
        try:
            single(url, model)  # warm-up
            peer = [single(url, model) for _ in range(args.runs)]
            rows.append(("llama-server -np 1", concurrent(url, model, args.clients)))
        finally:
            server.close()

    d_rate, s_rate, e_rate = median(direct, "rate"), median(served, "rate"), median(served, "engine_rate")
    print(f"model {model}, {threads} threads, n_ctx {N_CTX}, {N_PREDICT} tokens, {args.runs} runs (medians)")
    ratio = s_rate / d_rate
    print(f"decode through the endpoint {s_rate:.1f} tok/s ÷ host {d_rate:.1f} tok/s = {ratio:.3f} (target >= 0.98)")
    print(
        f"  the engine itself ran {e_rate:.1f} tok/s while serving: the HTTP path delivers {s_rate / e_rate:.3f} of it"
    )
    added = (median(served, "ttft") - median(direct, "ttft")) * 1000
    print(f"time to first token added by the server: {added:.1f} ms (target <= 2 ms)")
    o_rate = median(ollama, "rate")
    o_ratio = o_rate / s_rate
    o_added = (median(ollama, "ttft") - median(served, "ttft")) * 1000
    print(
        f"Ollama route /api/chat {o_rate:.1f} tok/s ÷ OpenAI route {s_rate:.1f} tok/s = {o_ratio:.3f} "
        f"(target >= 0.98); TTFT it adds: {o_added:.2f} ms (target <= 2 ms)"
    )
    if peer:
        p_rate, p_engine = median(peer, "rate"), median(peer, "engine_rate")
        print(
            f"llama-server, same client: {p_rate:.1f} tok/s streamed, its engine {p_engine:.1f} tok/s (delivers "
            f"{p_rate / p_engine:.3f}), TTFT {median(peer, 'ttft') * 1000:.1f} ms vs ours "
            f"{median(served, 'ttft') * 1000:.1f} ms"
        )
    print(f"\n{args.clients} concurrent streaming clients:")
    print(f"{'server':<20} {'TTFT p50/p95/p99 (s)':<24} {'TPOT p50/p95/p99 (ms)':<24} aggregate tok/s")
    for name, r in rows:
        ttft = f"{r['ttft_p50']:.2f}/{r['ttft_p95']:.2f}/{r['ttft_p99']:.2f}"
        tpot = f"{r['tpot_p50'] * 1000:.1f}/{r['tpot_p95'] * 1000:.1f}/{r['tpot_p99'] * 1000:.1f}"
        print(f"{name:<20} {ttft:<24} {tpot:<24} {r['aggregate_tok_s']:.1f}")
    if args.json:
        metrics: dict[str, dict] = {
            "decode through the endpoint": {
                "value": ratio,
                "target": 0.98,
                "op": ">=",
                "compares": f"streamed decode tok/s, API ÷ engine host directly ({s_rate:.1f} vs {d_rate:.1f})",
            },
            "TTFT added by the server": {
                "value": added,
                "target": 2.0,
                "op": "<=",
                "unit": "ms",
                "compares": f"time to first token through the API − through the host, each after {IDLE_S} s idle",
            },
            "Ollama route decode": {
                "value": o_ratio,
                "target": 0.98,
                "op": ">=",
                "compares": f"streamed decode tok/s, /api/chat (NDJSON) ÷ /v1/chat/completions (SSE) "
                f"({o_rate:.1f} vs {s_rate:.1f})",
            },
            "TTFT added by the Ollama route": {
                "value": o_added,
                "target": 2.0,
                "op": "<=",
                "unit": "ms",
                "compares": "median time to first token, /api/chat − /v1/chat/completions",
            },
        }
        if peer:
            metrics["single stream vs llama-server"] = {
                "value": s_rate / p_rate,
                "target": None,
                "op": None,
                "compares": f"streamed decode tok/s, Hearth API ÷ llama-server ({s_rate:.1f} vs {p_rate:.1f})",
            }
            theirs = rows[1][1]["aggregate_tok_s"]
            metrics[f"{args.clients} clients vs llama-server"] = {
                "value": ours["aggregate_tok_s"] / theirs,
                "target": None,
                "op": None,
                "compares": f"aggregate tok/s, {args.clients} streaming clients, Hearth ÷ llama-server -np 1",
            }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(metrics, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
