"""Concurrent streaming clients: Hearth's endpoint over the batched engine vs `llama-server -np N`.

    bash bench/build_peers.sh          # once (cached): llama-server from the same llama.cpp
    .venv/bin/python bench/concurrency.py [--clients 4] [--slots auto|N] [--rounds 2] [--unified] [--no-peer]

Same GGUF (SmolLM2), threads, batch sizes and context per slot (Hearth: the slots `hearth serve` plans by
default, auto, or `--slots N`, n_ctx per slot; llama-server: -np N -c N × n_ctx, which it splits per slot),
flash attention off on both. Each round runs every server once, alternating, after a warm-up; the clients
live in a separate process (as real ones do), each with a warm keep-alive connection, each asking its own
question. Each round also sends the same N questions one after another, to measure what batching gains.
Printed per server: TTFT p50/p95/p99, time per output token p50/p95/p99 and aggregate tok/s (content deltas
÷ wall time), medians over the rounds, and the targets: Hearth ÷ llama-server for the aggregate (≥ 1.00);
Hearth's gain over one-after-another ÷ llama-server's (≥ 1.00); Hearth's TTFT p95 with N clients within
2 × one client's TTFT plus the other N − 1 prompts' prefill at one client's pace, (N + 1) × TTFT₁ (≤ 1.00).
On a 2-core machine try `--threads 1` too: Hearth's HTTP server and the clients are Python and need the
other core, while llama-server's are C++ threads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json, add_peers, peer_dir  # noqa: E402
from endpoint import pct  # noqa: E402  (the same percentiles as the endpoint bench)
from engine import models, start_llama_server  # noqa: E402

from app.core.engines import default_registry  # noqa: E402
from app.core.engines.base import LoadSpec  # noqa: E402
from app.core.engines.llamacpp.options import default_threads  # noqa: E402
from app.core.runtime.engine_host import EngineHost  # noqa: E402
from app.core.runtime.preflight import PLANNED_SPECULATION  # noqa: E402
from app.core.settings import SPECULATIVE_FLAGS  # noqa: E402
from app.server.app import create_app  # noqa: E402
from app.server.context import ServerContext  # noqa: E402
from app.server.runner import ServerThread  # noqa: E402

N_PREDICT = 128
N_CTX = 4096  # per slot
N_BATCH = 512
SYSTEM = "You are a helpful assistant."
QUESTIONS = [
    "Tell me a long story about a lighthouse keeper and the sea.",
    "Explain in detail how a steam engine works.",
    "Describe a walk through a busy market in the morning.",
    "Write a long letter from a traveller to a friend at home.",
    "Tell me about the history of bread, step by step.",
    "Describe how to plan a vegetable garden for a year.",
    "Tell me a story about a robot who learns to paint.",
    "Explain how rivers shape the land over a long time.",
]

CLIENT = r"""
import json, sys, threading, time
import httpx
url, model, clients, max_tokens, system = sys.argv[1:6]
questions = json.loads(sys.argv[6])
def once(i, out, ready):
    body = {"model": model, "stream": True, "temperature": 0, "max_tokens": int(max_tokens), "seed": 1,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": questions[i % len(questions)]}]}
    arrivals = []
    with httpx.Client(timeout=600) as c:
        c.get(url + "/health")  # connected and warm before the clock starts
        ready.wait()
        t0 = time.perf_counter()
        with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    ch = json.loads(line[6:]).get("choices") or []
                    if ch and (ch[0].get("delta") or {}).get("content"):
                        arrivals.append(time.perf_counter() - t0)
    out.append(arrivals)
results = []
ready = threading.Barrier(int(clients) + 1)
threads = [threading.Thread(target=once, args=(i, results, ready)) for i in range(int(clients))]
[t.start() for t in threads]
ready.wait()
t0 = time.perf_counter()
[t.join() for t in threads]
print(json.dumps({"wall": time.perf_counter() - t0, "streams": results}), flush=True)
"""


def serial_round(url: str, model: str, clients: int) -> dict[str, float]:
    """The same `clients` questions one after another (one client at a time): aggregate tok/s and TTFT."""
    runs = [load_round(url, model, 1, first=i) for i in range(clients)]
    tokens = sum(r["tokens"] for r in runs)
    return {
        "aggregate_tok_s": tokens / sum(r["wall"] for r in runs),
        "ttft_p50": statistics.median(r["ttft_p50"] for r in runs),
    }


def load_round(url: str, model: str, clients: int, first: int = 0) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CLIENT,
            url,
            model,
            str(clients),
            str(N_PREDICT),
            SYSTEM,
            json.dumps(QUESTIONS[first:] + QUESTIONS[:first]),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    run = json.loads(out.stdout.strip().splitlines()[-1])
    streams = [a for a in run["streams"] if a]
    ttfts = [a[0] for a in streams]
    tpots = [(a[-1] - a[0]) / (len(a) - 1) for a in streams if len(a) > 1]
    return {
        "ttft_p50": pct(ttfts, 0.5),
        "ttft_p95": pct(ttfts, 0.95),
        "ttft_p99": pct(ttfts, 0.99),
        "tpot_p50": pct(tpots, 0.5),
        "tpot_p95": pct(tpots, 0.95),
        "tpot_p99": pct(tpots, 0.99),
        "tokens": float(sum(len(a) for a in streams)),
        "wall": run["wall"],
        "aggregate_tok_s": sum(len(a) for a in streams) / run["wall"],
    }


class Hearth:
    def __init__(
        self,
        model_path: Path,
        threads: int,
        slots: int,
        unified: bool,
        n_ctx: int = N_CTX,
        speculative: str = PLANNED_SPECULATION,
    ) -> None:
        self.host = EngineHost(default_registry(), queue_size=64, name="bench-host")
        spec = LoadSpec(
            path=model_path,
            n_ctx=n_ctx,
            n_threads=threads,
            n_batch=N_BATCH,
            n_ubatch=N_BATCH,
            slots=slots,
            kv_unified=unified,
            speculative=speculative,  # as the app plans it unless told (llama-server drafts only if told)
        )
        self.host.load_sync(spec, "gguf", plan_check=False)
        context = ServerContext(self.host)
        self.runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
        self.runner.start()
        self.url = self.runner.url

    def close(self) -> None:
        self.runner.stop()
        self.host.shutdown(10)


def planned_slots(model_path: Path) -> int:
    """The slots `hearth serve` plans for this model on this machine by default (Settings → Parallel
    requests: auto), at this bench's context per slot."""
    from app.core.runtime.load_plan import plan_load
    from app.core.runtime.preflight import check_model, live_machine
    from app.core.settings import DEFAULT_PARALLEL_REQUESTS

    spec = check_model(model_path, "gguf")
    return plan_load(model_path, "gguf", spec, live_machine(), N_CTX, max_slots=DEFAULT_PARALLEL_REQUESTS).spec.slots


class LlamaServer:
    def __init__(self, binary: Path, model: Path, threads: int, slots: int, n_ctx: int = N_CTX) -> None:
        args = ["-m", str(model), "-t", str(threads), "-tb", str(threads), "-c", str(n_ctx * slots)]
        args += ["-np", str(slots), "-b", str(N_BATCH), "-ub", str(N_BATCH), "-fa", "off"]
        self.proc, port = start_llama_server(binary, args)
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--slots",
        default="auto",
        help="Hearth's slots: auto (default: as `hearth serve` plans them on this machine) or a number",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="engine threads (default: physical cores)")
    parser.add_argument("--unified", action="store_true", help="Hearth: one shared KV cache for the slots")
    add_peers(parser)
    parser.add_argument(
        "--speculative",
        choices=SPECULATIVE_FLAGS,
        default=PLANNED_SPECULATION,
        help=f"Hearth's n-gram drafting (default {PLANNED_SPECULATION}, as the app plans it; llama-server: none)",
    )
    add_json(parser, "the rows and figures")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HEARTH_HOME", str(ROOT / "bench" / "out" / "home"))
    model_path = models(include_1b=False)["SmolLM2-135M Q4_1"]
    model = model_path.name
    threads = args.threads or default_threads()
    slots = planned_slots(model_path) if args.slots == "auto" else int(args.slots)
    servers: list[tuple[str, object]] = [
        ("Hearth", lambda: Hearth(model_path, threads, slots, args.unified, speculative=args.speculative)),
    ]
    if not args.no_peer:
        bins = peer_dir(args)
        servers.append(
            (
                f"llama-server -np {args.clients}",
                lambda: LlamaServer(bins / "llama-server", model_path, threads, args.clients),
            )
        )
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in servers}
    serial: dict[str, list[dict[str, float]]] = {name: [] for name, _ in servers}
    for _ in range(args.rounds):  # alternating, so drift on a shared machine hits both alike
        for name, start in servers:
            server = start()  # type: ignore[operator]
            try:
                load_round(server.url, model, args.clients)  # warm-up (and the prompt caches, as in use)
                rows[name].append(load_round(server.url, model, args.clients))
                serial[name].append(serial_round(server.url, model, args.clients))
            finally:
                server.close()

    def med(name: str, key: str, of: dict[str, list[dict[str, float]]] = rows) -> float:
        return statistics.median(r[key] for r in of[name])

    def gain(name: str) -> float:
        """Aggregate tok/s with the clients at once ÷ the same questions one after another."""
        return med(name, "aggregate_tok_s") / med(name, "aggregate_tok_s", serial)

    ttft_bound = (args.clients + 1) * med("Hearth", "ttft_p50", serial)

    kv = "one shared KV cache" if args.unified else "a KV stream per slot"
    print(f"model {model}, {threads} threads, {N_CTX} tokens per slot, {args.clients} clients x {N_PREDICT} tokens,")
    drafting = f"drafting {args.speculative}"
    print(f"{args.rounds} rounds alternating (medians); Hearth with {slots} slots ({args.slots}), {kv}, {drafting}")
    print(f"{'server':<20} {'TTFT p50/p95/p99 (s)':<24} {'TPOT p50/p95/p99 (ms)':<24} aggregate tok/s")
    for name in rows:
        ttft = f"{med(name, 'ttft_p50'):.2f}/{med(name, 'ttft_p95'):.2f}/{med(name, 'ttft_p99'):.2f}"
        tpot = "/".join(f"{med(name, k) * 1000:.1f}" for k in ("tpot_p50", "tpot_p95", "tpot_p99"))
        print(f"{name:<20} {ttft:<24} {tpot:<24} {med(name, 'aggregate_tok_s'):.1f}")
    for name in rows:
        one = med(name, "aggregate_tok_s", serial)
        print(
            f"{name:<20} one after another: {one:.1f} tok/s, TTFT {med(name, 'ttft_p50', serial):.2f} s; "
            f"at once ÷ one after another = {gain(name):.3f}"
        )
    print(
        f"Hearth TTFT p95 {med('Hearth', 'ttft_p95'):.2f} s ÷ (N + 1) × one client's = "
        f"{med('Hearth', 'ttft_p95') / ttft_bound:.3f} (target <= 1.00)"
    )
    if len(rows) > 1:
        peer = next(n for n in rows if n != "Hearth")
        ratio = med("Hearth", "aggregate_tok_s") / med(peer, "aggregate_tok_s")
        print(f"aggregate tok/s Hearth ÷ {peer} = {ratio:.3f} (target >= 1.00)")
        print(f"batching gain Hearth ÷ {peer} = {gain('Hearth') / gain(peer):.3f} (target >= 1.00)")
    if args.json:
        # The rows as measured, and the figures `make bench` tabulates (bench/run_all.py reads "metrics").
        metrics: dict[str, dict] = {}
        if len(rows) > 1:
            mine, theirs = med("Hearth", "aggregate_tok_s"), med(peer, "aggregate_tok_s")
            metrics[f"{args.clients} clients vs {peer}"] = {
                "value": mine / theirs,
                "target": 1.0,
                "op": ">=",
                "compares": f"aggregate tok/s, {args.clients} streaming clients, Hearth ÷ {peer} "
                f"({mine:.1f} vs {theirs:.1f})",
            }
            metrics[f"batching gain, {args.clients} clients vs {peer}"] = {
                "value": gain("Hearth") / gain(peer),
                "target": 1.0,
                "op": ">=",
                "compares": f"(at once ÷ one after another), Hearth ÷ {peer} "
                f"({gain('Hearth'):.2f} vs {gain(peer):.2f})",
            }
        metrics[f"TTFT p95, {args.clients} clients"] = {
            "value": med("Hearth", "ttft_p95") / ttft_bound,
            "target": 1.0,
            "op": "<=",
            "compares": f"Hearth's TTFT p95 ÷ (N + 1) × one client's TTFT ({med('Hearth', 'ttft_p95'):.2f} s vs "
            f"{ttft_bound:.2f} s), {slots} slots planned ({args.slots})",
        }
        metrics["TTFT p50, Hearth"] = {
            "value": med("Hearth", "ttft_p50") * 1000,
            "target": None,
            "op": None,
            "unit": "ms",
            "compares": f"time to first token with {args.clients} clients at once",
        }
        args.json.write_text(json.dumps({"metrics": metrics, "rows": rows, "serial": serial}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
