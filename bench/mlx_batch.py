"""MLX continuous batching: aggregate decode tok/s of N concurrent streams vs one stream, same engine code.

    .venv/bin/python bench/mlx_batch.py [--streams 4] [--tokens 128] [--rounds 3] [--big]

Writes random llama-shaped MLX models (the tests' tiny one; with --big also a ~57 M-parameter one) under
~/.cache/hearth-bench/mlx-batch, then per round: one stream on the single-stream engine (slots=1), the
same N requests one after another on it (what a host without batching does), and the N together on the
batched engine (slots=N, mlx-lm's BatchGenerator). Greedy, end-of-text banned (a logit bias, the same
logits processor on both paths) so every stream runs its full length; tok/s = generated
tokens ÷ wall time from the first request's start to the last one's end (prompts included). Medians over
the rounds. The batched outputs are checked equal to the single-stream ones.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams  # noqa: E402
from app.core.engines.mlx.engine import MlxEngine  # noqa: E402
from tests.fixtures.tiny_mlx import write_tiny_mlx_model  # noqa: E402

CACHE = Path.home() / ".cache" / "hearth-bench" / "mlx-batch"
PROMPTS = ["hello there", "what is the capital of a far country", "count to ten", "tell me a story", "why", "abc"]
MODELS = {
    "tiny (n_embd 256, 2 layers)": {"std": 0.2},
    "big (n_embd 768, 8 layers, ~57M)": {
        "std": 0.05,
        "n_embd": 768,
        "n_layer": 8,
        "n_head": 12,
        "n_head_kv": 4,
        "n_ff": 2048,
        "n_ctx": 1024,
    },
}


def request(prompt: str, tokens: int, eos: set[int]) -> GenerateRequest:
    """Greedy, with the end-of-text tokens banned so every stream runs its full length (as llama-bench)."""
    bias = dict.fromkeys(eos, -100.0)
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=tokens, logit_bias=bias))


def one(engine: MlxEngine, r: GenerateRequest) -> list[int]:
    return [c.token for c in engine.generate(r, threading.Event()) if c.token is not None]


def together(engine: MlxEngine, requests: list[GenerateRequest]) -> list[list[int]]:
    seqs = engine.sequences
    assert seqs is not None
    keys = [seqs.admit(r, threading.Event()) for r in requests]
    out: dict[object, list[int]] = {k: [] for k in keys}
    while seqs.active():
        for k, c in seqs.step():
            if c.token is not None:
                out[k].append(c.token)
    return [out[k] for k in keys]


def timed(fn):
    t = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t


def bench(path: Path, streams: int, tokens: int, rounds: int, ban_eos: bool = True) -> dict[str, float]:
    single, batched = MlxEngine(), MlxEngine()
    single.load(LoadSpec(path=path, n_ctx=1024))
    batched.load(LoadSpec(path=path, n_ctx=1024, slots=streams, prompt_cache_mib=0))
    eos = set(single._tok.eos_token_ids) if ban_eos else set()
    requests = [request(PROMPTS[i % len(PROMPTS)] + f" #{i}", tokens, eos) for i in range(streams)]
    one(single, requests[0])  # warm-up
    together(batched, requests[:1])
    rows: dict[str, list[float]] = {"one stream": [], f"{streams} in a row": [], f"{streams} together": []}
    for _ in range(rounds):
        # A prompt cache would make later rounds cheaper for one side: each run starts cold.
        single._cache, single._cache_tokens = None, []
        got, s = timed(lambda: one(single, requests[0]))
        rows["one stream"].append(len(got) / s)
        single._cache, single._cache_tokens = None, []
        alone, s = timed(lambda: [one(single, r) for r in requests])
        rows[f"{streams} in a row"].append(sum(map(len, alone)) / s)
        for slot in batched.sequences.slots:  # type: ignore[union-attr]
            slot.tokens = []
        batched.sequences._caches.clear()  # type: ignore[union-attr]
        both, s = timed(lambda: together(batched, requests))
        rows[f"{streams} together"].append(sum(map(len, both)) / s)
        if both != alone:
            print("  batched outputs differ from single-stream ones!")
        rows.setdefault("tokens", []).append(float(sum(map(len, both))))
    single.unload()
    batched.unload()
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also the ~57M-parameter model")
    ap.add_argument("--keep-eos", action="store_true", help="no logit bias: streams may end early (fewer tokens)")
    args = ap.parse_args()
    for name, shape in MODELS.items():
        if name.startswith("big") and not args.big:
            continue
        folder = CACHE / name.split()[0]
        if not (folder / "config.json").is_file():
            write_tiny_mlx_model(folder, dtype="float32", **shape)
        result = bench(folder, args.streams, args.tokens, args.rounds, not args.keep_eos)
        base = result["one stream"]
        total = int(result.pop("tokens"))
        print(f"{name}: up to {args.tokens} tokens a stream ({total} in all together), median of {args.rounds}")
        for k, v in result.items():
            print(f"  {k:>14}: {v:8.1f} tok/s  ({v / base:.2f}x one stream)")


if __name__ == "__main__":
    main()
