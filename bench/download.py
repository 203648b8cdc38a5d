"""Download bench: Hearth's downloader vs curl (and huggingface_hub) on loopback, plus the cost of a resume.

    python bench/download.py [--size-mb 1024] [--reps 3] [--no-hf] [--json out.json]

A file of `--size-mb` random bytes is written once to ~/.cache/hearth-bench (or $HEARTH_BENCH_CACHE) and served by the
test suite's fake Hub (stdlib http.server, sendfile) on 127.0.0.1. In the same run, repetitions alternate: our
`FileDownload` (streams, hashes sha256 and verifies, fsyncs, renames), `curl -s -o` then an fsync of its file (the
same bytes on disk; skipped with a note if curl is missing), `curl -s -o` alone, and `huggingface_hub.hf_hub_download`
(optional). Every run starts after `sync`, so none pays for writing out the one before it. Medians are printed with
the ratio ours ÷ (curl + fsync) (target >= 0.9) and ours ÷ curl alone. The resume test drops the connection at 50 %,
resumes in the same call (Range + If-Range) and again across a "restart" (a new downloader object that re-hashes the
partial), and reports the extra bytes re-fetched (target < 1 %) and the time spent re-hashing the prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json  # noqa: E402

REPO = "bench/big"
NAME = "big.gguf"


def cache_dir() -> Path:
    d = Path(os.environ.get("HEARTH_BENCH_CACHE", Path.home() / ".cache" / "hearth-bench"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def source_file(size_mb: int) -> Path:
    path = cache_dir() / f"blob-{size_mb}MiB.bin"
    if not path.exists() or path.stat().st_size != size_mb << 20:
        print(f"writing {size_mb} MiB of random bytes to {path} (once)")
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for _ in range(size_mb):
                f.write(os.urandom(1 << 20))
        os.replace(tmp, path)
    return path


def timed(fn) -> float:
    # Each run starts with nothing dirty in the page cache: otherwise a run pays for writing out the run
    # before it (curl leaves 256 MiB dirty, and ours then waited on it in its fsync).
    os.sync()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def make_ours(hub, f, out_dir: Path, **retry):
    """Our downloader for the bench file; `retry` overrides `RetryPolicy` fields (a short backoff by default)."""
    from app.core.downloads import DownloadOptions, FileDownload, RetryPolicy, Source, Target

    source = Source(hub.resolve_url(REPO, NAME), NAME, f.sha256, size=f.size)
    options = DownloadOptions(RetryPolicy(**{"backoff_s": 0.05, **retry}))
    return FileDownload(source, Target(out_dir / NAME, out_dir), options=options)


def run_ours(hub, f, out_dir: Path, **retry):
    import httpx

    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    dl = make_ours(hub, f, out_dir, **retry)
    with httpx.Client(trust_env=False) as client:
        dl.run(client)
    return dl


def run_curl(url: str, out: Path, durable: bool = True) -> None:
    """curl to `out`; `durable`: then fsync it, as our downloader does before it calls a file done (a
    power cut after curl returns can lose the file; after ours, not)."""
    subprocess.run(["curl", "-s", "--noproxy", "*", "-o", str(out), url], check=True)
    if durable:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def run_hf(hub, commit: str, cache: Path) -> None:
    from huggingface_hub import hf_hub_download

    shutil.rmtree(cache, ignore_errors=True)
    hf_hub_download(REPO, NAME, revision=commit, cache_dir=str(cache), endpoint=hub.url)


def resume_test(hub, f, out_dir: Path) -> dict:
    from app.core.downloads import NetworkError
    from tests.fakehub import Fault

    half = f.size // 2
    hub.clear_log()
    hub.faults.add(NAME, Fault.drop(half))
    dl = run_ours(hub, f, out_dir)
    hub.wait_idle(30)
    same_call = sum(r.bytes_sent for r in hub.requests("GET", NAME))

    hub.clear_log()
    hub.faults.add(NAME, Fault.drop(half))
    shutil.rmtree(out_dir, ignore_errors=True)
    try:
        run_ours(hub, f, out_dir, max_retries=0)
    except NetworkError:
        pass
    import httpx

    dl2 = make_ours(hub, f, out_dir)  # a fresh object: as after an app restart
    with httpx.Client(trust_env=False) as client:
        dl2.run(client)
    hub.wait_idle(30)
    restart = sum(r.bytes_sent for r in hub.requests("GET", NAME))
    return {
        "same_call_extra_pct": 100 * (same_call - f.size) / f.size,
        "restart_extra_pct": 100 * (restart - f.size) / f.size,
        "restart_prefix_rehash_s": dl2.prefix_rehash_s,
        "prefix_bytes": half,
        "received_same_call": dl.bytes_received,
    }


def metrics_json(summary: dict, med: dict[str, float]) -> dict[str, dict]:
    """The ratios with their targets, {metric: {value, target, op}}, as bench/run_all.py reads them."""
    size = f"{summary['size_bytes'] >> 20} MiB over loopback"
    resume = summary["resume"]
    metrics: dict[str, dict] = {
        "throughput vs curl": {
            "value": summary.get("ratio_ours_curl"),
            "target": 0.9,
            "op": ">=",
            "compares": f"MB/s, our downloader (hashing, fsync) ÷ curl then fsync, {size}",
        }
    }
    if "curl" in med:
        metrics["throughput vs curl"]["compares"] += f" ({med['ours'] / 1e6:.0f} vs {med['curl'] / 1e6:.0f})"
        metrics["throughput vs curl, no fsync"] = {
            "value": summary["ratio_ours_curl_unsynced"],
            "target": None,
            "op": None,
            "compares": f"MB/s, ours (fsync) ÷ curl leaving its file in the page cache, {size} "
            f"({med['ours'] / 1e6:.0f} vs {med['curl_unsynced'] / 1e6:.0f})",
        }
    else:
        metrics["throughput vs curl"]["note"] = "curl not found"
    if "ratio_hf_curl" in summary:
        metrics["hf_hub_download vs curl"] = {
            "value": summary["ratio_hf_curl"],
            "target": None,
            "op": None,
            "compares": f"MB/s, huggingface_hub's hf_hub_download ÷ curl, {size}",
        }
    metrics["resume re-fetch, same call"] = {
        "value": resume["same_call_extra_pct"],
        "target": 1.0,
        "op": "<",
        "unit": "%",
        "compares": "extra bytes fetched after a drop at 50 %, resumed in the same call",
    }
    metrics["resume re-fetch, after restart"] = {
        "value": resume["restart_extra_pct"],
        "target": 1.0,
        "op": "<",
        "unit": "%",
        "compares": "extra bytes fetched after a drop at 50 %, resumed by a new downloader",
    }
    return metrics


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-hf", action="store_true", help="skip huggingface_hub's hf_hub_download")
    add_json(ap, "the results")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    src = source_file(args.size_mb)
    work = Path(tempfile.mkdtemp(prefix="out-", dir=cache_dir()))
    os.environ.update(
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HOME=str(work / "hf-home"),
        NO_PROXY="127.0.0.1,localhost",
    )
    from tests.fakehub import FakeHub, FakeRepo

    results: dict[str, list[float]] = {"ours": [], "curl": [], "curl_unsynced": [], "hf_hub_download": []}
    notes = []
    has_curl = shutil.which("curl") is not None
    if not has_curl:
        notes.append("curl not found: skipped")
    try:
        with FakeHub() as hub:
            repo = hub.add_repo(FakeRepo(REPO, files={NAME: src}))
            f = repo.snapshot("main").files[NAME]
            commit = repo.snapshot("main").commit
            print(f"hashing the source once ({f.size / 2**20:.0f} MiB)… sha256 {f.sha256[:16]}…")
            for rep in range(args.reps):
                secs = timed(lambda: run_ours(hub, f, work / "ours"))
                results["ours"].append(f.size / secs)
                shutil.rmtree(work / "ours", ignore_errors=True)
                line = f"rep {rep + 1}: ours {f.size / secs / 1e6:7.0f} MB/s"
                if has_curl:
                    out = work / "curl.bin"
                    secs = timed(lambda out=out: run_curl(hub.resolve_url(REPO, NAME), out))
                    assert out.stat().st_size == f.size
                    out.unlink()
                    results["curl"].append(f.size / secs)
                    line += f"   curl+fsync {f.size / secs / 1e6:7.0f} MB/s"
                    secs = timed(lambda out=out: run_curl(hub.resolve_url(REPO, NAME), out, durable=False))
                    out.unlink()
                    results["curl_unsynced"].append(f.size / secs)
                    line += f"   curl alone {f.size / secs / 1e6:7.0f} MB/s"
                if not args.no_hf:
                    try:
                        secs = timed(lambda: run_hf(hub, commit, work / "hf"))
                        results["hf_hub_download"].append(f.size / secs)
                        line += f"   hf_hub_download {f.size / secs / 1e6:7.0f} MB/s"
                    except Exception as exc:  # optional comparison: report and go on
                        notes.append(f"hf_hub_download failed: {exc!r}")
                        args.no_hf = True
                    shutil.rmtree(work / "hf", ignore_errors=True)
                print(line, flush=True)
            resume = resume_test(hub, f, work / "resume")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items() if v}
    summary = {
        "size_bytes": src.stat().st_size,
        "reps": args.reps,
        "median_MBps": {k: round(v / 1e6, 1) for k, v in med.items()},
        "resume": resume,
        "notes": notes,
    }
    if "curl" in med:
        summary["ratio_ours_curl"] = round(med["ours"] / med["curl"], 3)
        summary["ratio_ours_curl_unsynced"] = round(med["ours"] / med["curl_unsynced"], 3)
        if "hf_hub_download" in med:
            summary["ratio_hf_curl"] = round(med["hf_hub_download"] / med["curl"], 3)
    summary["metrics"] = metrics_json(summary, med)
    print("\nmedians (MB/s):", ", ".join(f"{k} {v / 1e6:.0f}" for k, v in med.items()))
    if "ratio_ours_curl" in summary:
        print(f"ours / (curl + fsync) = {summary['ratio_ours_curl']:.2f} (target >= 0.9)")
        print(f"ours / curl without fsync = {summary['ratio_ours_curl_unsynced']:.2f}")
    if "ratio_hf_curl" in summary:
        print(f"hf_hub_download / curl = {summary['ratio_hf_curl']:.2f}")
    print(
        f"resume after a drop at 50 %: {resume['same_call_extra_pct']:.3f} % extra bytes in the same call, "
        f"{resume['restart_extra_pct']:.3f} % across a restart (target < 1 %); re-hashing the "
        f"{resume['prefix_bytes'] / 2**20:.0f} MiB prefix took {resume['restart_prefix_rehash_s']:.2f} s"
    )
    for note in notes:
        print("note:", note)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
