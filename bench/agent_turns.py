"""An agent-like workload: two clients alternating turns on one long shared system prompt.

    bash bench/build_peers.sh          # once (cached): llama-server from the same llama.cpp
    .venv/bin/python bench/agent_turns.py [--turns 8] [--system-tokens 6000] [--slots 2] [--no-peer]

What an editor agent and its subagent do to a local server: each conversation starts with the same big
system prompt (tools, rules, the repository map), then the two take turns, each turn adding a user
message and the model's short reply to its own history. A server that keeps one KV cache re-reads a
whole conversation every time the other one has spoken; one that keeps a cache per slot (or restores it
from RAM) reads only the new turn.

Hearth (its API over the batched engine, `--slots` slots with a KV stream each, and the RAM prompt cache)
against `llama-server -np SLOTS` with its slot prompt cache on (cache_prompt, the default, and its RAM
cache), same GGUF (SmolLM2), threads, batch sizes, context per slot and flash attention (off), alternating
in the same run. The client runs in its own process. Printed: TTFT per turn, the mean over all turns but
each conversation's first (the cold reads of the system prompt, equal work for both), the cold turns,
the prompt tokens each server reports as cached, and Hearth ÷ llama-server for the mean (target ≤ 1.00).
`--slots 1` is the slot-starved case: both must bring the other conversation back from RAM.
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
from concurrency import Hearth, LlamaServer  # noqa: E402
from engine import models  # noqa: E402

from app.core.engines.llamacpp.options import default_threads  # noqa: E402

N_CTX = 8192  # per slot: SmolLM2's trained length; 6 k of system prompt and 16 turns fit
N_PREDICT = 32

TOPICS = [
    "parsing", "the job queue", "the settings model", "downloads", "the fit planner", "the chat store",
    "the engine host", "tool calls", "the request log", "the hub client", "templates", "the library",
]  # fmt: skip

CLIENT = r"""
import json, sys, time
import httpx
url, model, turns, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
system = sys.stdin.read()
histories = {"a": [], "b": []}
rows = []
with httpx.Client(timeout=900) as c:
    c.get(url + "/health")
    for turn in range(turns):
        for who in ("a", "b"):
            history = histories[who]
            history.append({"role": "user", "content": f"Agent {who}, step {turn}: look at file {turn}.py next "
                            f"and say what to change in one sentence."})
            body = {"model": model, "stream": True, "temperature": 0, "max_tokens": max_tokens, "seed": 1,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": system}] + history}
            for attempt in (1, 2):  # a server may close an idle keep-alive connection: the retry reconnects
                t0 = time.perf_counter()
                ttft, parts, usage = None, [], {}
                try:
                    with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
                        r.raise_for_status()
                        for line in r.iter_lines():
                            if not line.startswith("data: {"):
                                continue
                            event = json.loads(line[6:])
                            usage = event.get("usage") or usage
                            ch = event.get("choices") or []
                            text = (ch[0].get("delta") or {}).get("content") if ch else None
                            if text:
                                ttft = ttft if ttft is not None else time.perf_counter() - t0
                                parts.append(text)
                    break
                except httpx.RemoteProtocolError:
                    if attempt == 2:
                        raise
            history.append({"role": "assistant", "content": "".join(parts)})
            details = usage.get("prompt_tokens_details") or {}
            rows.append({"who": who, "turn": turn, "ttft": ttft if ttft is not None else time.perf_counter() - t0,
                         "prompt_tokens": usage.get("prompt_tokens"), "cached": details.get("cached_tokens")})
print(json.dumps(rows), flush=True)
"""


def system_prompt(words: int) -> str:
    """A deterministic, varied "repository map and rules" prompt of about `words` words."""
    lines = ["You are a coding agent working in a large repository. Follow these rules and notes exactly."]
    i = 0
    while sum(len(line.split()) for line in lines) < words:
        topic = TOPICS[i % len(TOPICS)]
        lines.append(
            f"Note {i}: module m{i:03d} handles {topic}; it depends on m{(i * 7) % 97:03d} and is tested by "
            f"test_m{i:03d}. When you change it, keep its public names, run its tests, and explain why in "
            f"one line (rule {i % 13})."
        )
        i += 1
    return "\n".join(lines)


def run_turns(url: str, model: str, system: str, turns: int) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, url, model, str(turns), str(N_PREDICT)],
        input=system,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the client failed against {url}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(rows: list[dict]) -> dict[str, float]:
    warm = [r["ttft"] for r in rows if r["turn"] > 0]
    cold = [r["ttft"] for r in rows if r["turn"] == 0]
    cached = [r["cached"] for r in rows if r["turn"] > 0 and r["cached"] is not None]
    fresh = [r["prompt_tokens"] - r["cached"] for r in rows if r["turn"] > 0 and r["cached"] is not None]
    return {
        "mean_ttft": statistics.fmean(warm),
        "cold_ttft": statistics.fmean(cold),
        "prompt_tokens": float(max(r["prompt_tokens"] or 0 for r in rows)),
        "mean_cached": statistics.fmean(cached) if cached else float("nan"),
        "mean_fresh": statistics.fmean(fresh) if fresh else float("nan"),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=8, help="turns per conversation (default 8)")
    parser.add_argument("--system-tokens", type=int, default=6000, help="about this long (default 6000)")
    parser.add_argument("--slots", type=int, default=2, help="slots on both servers (default 2; 1: slot-starved)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="engine threads (default: physical cores)")
    add_peers(parser)
    add_json(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HEARTH_HOME", str(ROOT / "bench" / "out" / "home"))
    model_path = models(include_1b=False)["SmolLM2-135M Q4_1"]
    threads = args.threads or default_threads()
    system = system_prompt(int(args.system_tokens * 0.55))  # SmolLM2 reads this prose at ~1.8 tokens a word
    servers: list[tuple[str, object]] = [
        ("Hearth", lambda: Hearth(model_path, threads, args.slots, False, n_ctx=N_CTX)),
    ]
    if not args.no_peer:
        bins = peer_dir(args)
        servers.append(
            (
                f"llama-server -np {args.slots}",
                lambda: LlamaServer(bins / "llama-server", model_path, threads, args.slots, n_ctx=N_CTX),
            )
        )
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in servers}
    for _ in range(args.rounds):  # alternating, so drift on a shared machine hits both alike
        for name, start in servers:
            server = start()  # type: ignore[operator]
            try:
                results[name].append(summary(run_turns(server.url, model_path.name, system, args.turns)))
            finally:
                server.close()

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    print(
        f"model {model_path.name}, {threads} threads, {args.slots} slot(s) of {N_CTX} tokens, 2 conversations x "
        f"{args.turns} turns alternating, system prompt {med('Hearth', 'prompt_tokens'):.0f} tokens at the end"
    )
    print(f"{'server':<20} {'mean TTFT, turns 2+':<20} {'first turns':<12} cached / fresh prompt tokens per turn")
    for name in results:
        print(
            f"{name:<20} {med(name, 'mean_ttft') * 1000:>8.0f} ms {'':<9} {med(name, 'cold_ttft') * 1000:>6.0f} ms"
            f"    {med(name, 'mean_cached'):.0f} / {med(name, 'mean_fresh'):.0f}"
        )
    metrics: dict[str, dict] = {}
    if len(results) > 1:
        peer = next(n for n in results if n != "Hearth")
        mine, theirs = med("Hearth", "mean_ttft"), med(peer, "mean_ttft")
        print(f"mean TTFT Hearth ÷ {peer} = {mine / theirs:.3f} (target <= 1.00)")
        metrics[f"agent turns, {args.slots} slot(s), vs {peer}"] = {
            "value": mine / theirs,
            "target": 1.0,
            "op": "<=",
            "compares": f"mean TTFT of turns 2-{args.turns}, two conversations alternating on a shared "
            f"{med('Hearth', 'prompt_tokens'):.0f}-token prompt, Hearth ÷ {peer} "
            f"({mine * 1000:.0f} vs {theirs * 1000:.0f} ms)",
        }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"metrics": metrics, "rows": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
