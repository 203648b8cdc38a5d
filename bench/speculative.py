"""Speculative decoding on a code-editing workload: Hearth with n-gram drafts vs without, vs llama-server's.

    bash bench/build_peers.sh          # once (cached): llama-server from the same llama.cpp
    .venv/bin/python bench/speculative.py [--rounds 3] [--max-tokens 400] [--1b] [--flash-attn] [--no-peer]
                                          [--draft-model SMALL.gguf] [--repeat]

The model gets a ~60-line Python file and is asked for it back with one small change (what an agent's
edit asks for), at temperature 0. Hearth's batched engine (slots 2) runs it with `speculative="off"` and
with n-gram drafting (`--mode`, default "auto"); llama-server with `--spec-type ngram-simple` (its n-gram
speculation) gets the same prompt tokens on /completion. Same GGUF, threads, context and flash-attention
setting; each round runs every configuration once, alternating, after a warm-up; medians over the rounds.
Printed: decode tok/s of each, Hearth n-gram ÷ Hearth off (target ≥ 1.5), Hearth n-gram ÷ llama-server
n-gram (target ≥ 1.00), draft acceptance, and whether the drafted output equals the plain one token for
token (at temperature 0 it should; past 256 positions CPU rounding can flip a near-tie, see
tests/core/engines/llamacpp/test_llamacpp_spec.py). Every run reads its prompt from an empty cache (Hearth's as
llama-server's). `--flash-attn --cache-type q8_0` is a setting where the CPU's attention is the same
whatever the batch (a quantized KV cache takes neither the split nor the tiled kernel).

Every run is the request's first: each llama-server is started afresh before it, because its `ngram-mod`
keeps the n-grams of every earlier request and reply in one table that no request clears, so the same
request again is drafted whole from the last reply. `--repeat` measures that case instead (llama-server
kept running; Hearth drafts from each request's own prompt and reply, so it runs as before).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_peers, peer_dir  # noqa: E402
from engine import models, start_llama_server  # noqa: E402

from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams  # noqa: E402
from app.core.engines.llamacpp.engine import LlamaCppEngine  # noqa: E402
from app.core.engines.llamacpp.options import default_threads  # noqa: E402

N_CTX = 4096
N_BATCH = 512


def source_file() -> str:
    """A plain ~60-line module: the file the model is asked to hand back."""
    lines = [
        '"""Read a CSV of orders and sum them per customer."""',
        "",
        "import csv",
        "from collections import defaultdict",
        "from pathlib import Path",
        "",
        "",
        "def parse_line(row):",
        '    """One order: (customer, amount)."""',
        '    customer = row["customer"].strip()',
        '    amount = float(row["amount"])',
        "    return customer, amount",
        "",
        "",
        "def read_orders(path):",
        "    orders = []",
        "    with open(path, newline='') as handle:",
        "        for row in csv.DictReader(handle):",
        "            orders.append(parse_line(row))",
        "    return orders",
        "",
        "",
        "def totals(orders):",
        "    sums = defaultdict(float)",
        "    for customer, amount in orders:",
        "        sums[customer] += amount",
        "    return dict(sums)",
        "",
        "",
        "def largest(sums, n=3):",
        "    ranked = sorted(sums.items(), key=lambda item: item[1], reverse=True)",
        "    return ranked[:n]",
        "",
        "",
        "def report(sums):",
        "    lines = []",
        "    for customer, total in sorted(sums.items()):",
        '        lines.append(f"{customer}: {total:.2f}")',
        '    return "\\n".join(lines)',
        "",
        "",
        "def write_report(sums, path):",
        "    Path(path).write_text(report(sums))",
        "",
        "",
        "def main(argv):",
        "    if len(argv) != 3:",
        '        print("usage: orders.py IN.csv OUT.txt")',
        "        return 2",
        "    orders = read_orders(argv[1])",
        "    sums = totals(orders)",
        "    write_report(sums, argv[2])",
        "    for customer, total in largest(sums):",
        '        print(f"top: {customer} {total:.2f}")',
        "    return 0",
        "",
        "",
        'if __name__ == "__main__":',
        "    import sys",
        "",
        "    raise SystemExit(main(sys.argv))",
    ]
    return "\n".join(lines) + "\n"


# The edit asked for. "change" (the default): the file back with one line changed, which SmolLM2-135M does
# (38 of 41 lines verbatim), as agents' edit requests get from the models they use. "rename": rename a
# function and its call, which SmolLM2 turns into a rewrite (11 of 34 lines verbatim): the slow case.
ASKS = {
    "change": lambda src: (
        "```python\n" + src + "```\n\nRepeat the file above exactly, with "
        '`amount = float(row["amount"])` changed to `amount = round(float(row["amount"]), 2)`.'
    ),
    "rename": lambda src: (
        "Here is a Python file:\n\n```python\n" + src + "```\n\n"
        "Return the whole file with one change: rename the function parse_line to parse_order "
        "(and its call). Reply with the file only, in one code block."
    ),
}


def edit_request(max_tokens: int, ask: str = "change") -> GenerateRequest:
    return GenerateRequest(
        messages=[
            ChatMessage(role="system", content="You are a helpful coding assistant."),
            ChatMessage(role="user", content=ASKS[ask](source_file())),
        ],
        sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
    )


def load(
    path: Path,
    threads: int,
    flash: bool,
    mode: str,
    draft_max: int | None = None,
    draft: Path | None = None,
    cache_type: str = "f16",
) -> LlamaCppEngine:
    engine = LlamaCppEngine()
    engine.load(
        LoadSpec(
            path=path,
            n_ctx=N_CTX,
            n_threads=threads,
            n_batch=N_BATCH,
            n_ubatch=N_BATCH,
            flash_attn=flash,
            cache_type_k=cache_type,
            cache_type_v=cache_type,
            slots=2,
            speculative=mode,  # type: ignore[arg-type]
            draft_max=draft_max,
            draft_model=draft if mode == "draft" else None,
        )
    )
    return engine


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of this process or `pid`: on a shared machine it moves far less than wall time."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hearth_run(engine: LlamaCppEngine, request: GenerateRequest) -> dict:
    # The prompt read whole every time, as llama-server reads it here (cache_prompt off), so every
    # configuration's output is compared with the others' from the same start. Read from a warm cache the
    # last prompt token is read again alone, and on this CPU that alone moves a near-tie: SmolLM2's plain
    # reply to the file hand-back differs from its own cold reply at token 185.
    engine.forget_cache()
    began = cpu_seconds()
    chunks = list(engine.generate(request, threading.Event()))
    used = cpu_seconds() - began
    stats = chunks[-1].stats
    assert stats is not None
    return {
        "cpu_s": used,
        "tok_s": stats.decode_tok_s,
        "tokens": [c.token for c in chunks if c.token is not None],
        "drafted": stats.draft_tokens,
        "accepted": stats.draft_accepted,
    }


class LlamaServer:
    def __init__(
        self, binary: Path, model: Path, threads: int, flash: bool, cache_type: str, spec_args: list[str]
    ) -> None:
        args = ["-m", str(model), "-t", str(threads), "-tb", str(threads), "-c", str(N_CTX)]
        args += ["-ctk", cache_type, "-ctv", cache_type]
        args += ["-np", "1", "-b", str(N_BATCH), "-ub", str(N_BATCH), "-fa", "on" if flash else "off", *spec_args]
        self._binary, self._args = binary, args
        self._start()

    def _start(self) -> None:
        self.proc, port = start_llama_server(self._binary, self._args)
        self.url = f"http://127.0.0.1:{port}"
        self._served = False  # whether it has seen a request it would remember

    def fresh(self) -> None:
        """Remember no earlier request: start again if it has served one, and warm up on a short unrelated
        one."""
        if not self._served:
            return
        self.close()
        self._start()
        self._complete({"prompt": "Hello", "n_predict": 4, "temperature": 0, "cache_prompt": False})

    def _complete(self, body: dict) -> dict:
        req = urllib.request.Request(
            self.url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def run(self, tokens: list[int], max_tokens: int, repeat: bool = False) -> dict:
        if not repeat:
            self.fresh()
        body = {"prompt": tokens, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False}
        body.update({"return_tokens": True, "stream": False})
        began = cpu_seconds(self.proc.pid)
        out = self._complete(body)
        self._served = True
        used = cpu_seconds(self.proc.pid) - began
        timings = out.get("timings", {})
        return {
            "cpu_s": used,
            "tok_s": float(timings.get("predicted_per_second", 0.0)),
            "tokens": list(out.get("tokens") or []),
            "drafted": int(timings.get("draft_n", 0)),
            "accepted": int(timings.get("draft_n_accepted", 0)),
        }

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--ask", choices=sorted(ASKS), default="change", help="the edit asked for (see ASKS)")
    parser.add_argument("--threads", type=int, default=0, help="engine threads (default: physical cores)")
    parser.add_argument("--modes", default="auto,ngram", help="Hearth's drafting modes beside off")
    parser.add_argument(
        "--draft-model", type=Path, help="also Hearth with this GGUF drafting (mode draft; same tokenizer)"
    )
    parser.add_argument("--draft-max", type=int, help="drafted tokens per step, at most (default: each mode's own)")
    parser.add_argument("--flash-attn", action="store_true", help="flash attention on, both engines")
    parser.add_argument(
        "--cache-type",
        default="f16",
        help="KV cache type, both engines (q8_0 with --flash-attn: the CPU's attention is batch-invariant)",
    )
    parser.add_argument("--1b", dest="one_b", action="store_true", help="also the random 1B Q4_K_M")
    add_peers(parser)
    parser.add_argument("--spec-types", default="none,ngram-simple,ngram-mod", help="llama-server's --spec-type runs")
    parser.add_argument("--repeat", action="store_true", help="keep llama-server running: it remembers")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    threads = args.threads or default_threads()
    request = edit_request(args.max_tokens, args.ask)
    modes = [m for m in args.modes.split(",") if m] + (["draft"] if args.draft_model else [])
    kinds = [] if args.no_peer else [k for k in args.spec_types.split(",") if k]
    bins = peer_dir(args) if kinds else None
    for label, path in models(include_1b=args.one_b).items():
        fa, kv = args.flash_attn, args.cache_type
        engines = {"off": load(path, threads, fa, "off", cache_type=kv)}
        engines.update({m: load(path, threads, fa, m, args.draft_max, args.draft_model, kv) for m in modes})
        configs: dict[str, Callable[[], dict]] = {
            f"Hearth {m}": (lambda e=e: hearth_run(e, request)) for m, e in engines.items()
        }
        prompt = engines["off"].prompt_tokens(request)
        servers = []
        for kind in kinds:
            assert bins is not None
            server = LlamaServer(bins / "llama-server", path, threads, fa, kv, ["--spec-type", kind])
            servers.append(server)
            configs[f"llama-server {kind}"] = lambda s=server, p=prompt: s.run(p, args.max_tokens, args.repeat)
        rows: dict[str, list[dict]] = {name: [] for name in configs}
        try:
            for run in configs.values():
                run()  # warm-up
            for _ in range(args.rounds):  # alternating, so drift on a shared machine hits all alike
                for name, run in configs.items():
                    rows[name].append(run())
        finally:
            for server in servers:
                server.close()
            for engine in engines.values():
                engine.unload()
        print(
            f"\n{label}, ask {args.ask!r}: {len(prompt)} prompt tokens, {args.max_tokens} tokens asked, "
            f"threads {threads}, flash attention {'on' if fa else 'off'}, KV cache {kv}, "
            f"draft_max {args.draft_max or 'of each mode'}, {args.rounds} rounds, "
            + ("the same request repeated (llama-server remembering)" if args.repeat else "every run the first")
        )
        med = {name: statistics.median(r["tok_s"] for r in rs) for name, rs in rows.items()}
        # Contention-proof too: CPU seconds per generated token (prompt included: the same for all).
        cpu = {name: statistics.median(r["cpu_s"] / max(1, len(r["tokens"])) for r in rs) for name, rs in rows.items()}
        plain = rows["Hearth off"][0]["tokens"]
        for name, rs in rows.items():
            last = rs[-1]
            rate = f", {last['accepted']}/{last['drafted']} drafts kept" if last["drafted"] else ""
            same = last["tokens"] == plain
            where = "" if same else f", first differs at {first_difference(plain, last['tokens'])}"
            print(
                f"  {name:26s} {med[name]:7.1f} tok/s  ÷ Hearth off {med[name] / med['Hearth off']:4.2f}  "
                f"CPU ms/token {cpu[name] * 1000:6.1f} (Hearth off ÷ it {cpu['Hearth off'] / cpu[name]:4.2f})  "
                f"({len(last['tokens'])} tokens{rate}; same as Hearth off: {same}{where})"
            )
        for m in modes:
            for kind in kinds:
                print(f"  Hearth {m} ÷ llama-server {kind}: {med[f'Hearth {m}'] / med[f'llama-server {kind}']:.2f}")
    return 0


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


if __name__ == "__main__":
    raise SystemExit(main())
