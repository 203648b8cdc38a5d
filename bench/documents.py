"""Documents: indexing throughput, one changed file in a watched folder, and search latency at 10k and 100k
passages.

    .venv/bin/python bench/documents.py [--files 1000] [--passages 10000,100000] [--queries 50]

The embedding model is a tiny random-weight BERT GGUF (tests/fixtures/tiny_encoder_gguf.py, 256 tokens of
context, written here; no Hub), on an engine host as the CLI uses it. It stands for the engine in the
pipeline's timing: with a real embedding model the embedding share grows and the rest stays.

- Indexing: a generated folder of `--files` text files (a page each) indexed from nothing, in pages/s, with
  the share of the time spent reading and cutting files vs embedding; and the same passages embedded as one
  list of EmbedJobs straight on the host, the engine's pace (indexing ÷ engine ≥ 0.9: indexing adds little).
- Incremental: one file of that folder changed, then `sync` and `run` (target ≤ 2 s).
- Search: a store filled with `--passages` generated passages (words drawn by Zipf's law) and random
  vectors (384 numbers, a MiniLM's width), queried `--queries` times by keywords, by vector and hybrid
  (retrieval only: the query's vector given), p50 and p95 in ms, and the memory the vector matrix holds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json  # noqa: E402

WORDS = (
    "hearth fire stone warm river bread book night lamp cat dog paris france capital city tea kettle garden "
    "window door table chair winter summer spring autumn rain snow wind sun moon star road bridge tower "
    "market bakery harbour ship sail anchor island forest mountain valley meadow orchard cellar attic"
).split()
DIMS = 384
# Prose draws its words as language does: a few very common, most rare (Zipf's law over 20,000 words, the
# named ones first). A uniform draw from a small list would make every query word match most passages, which
# no real corpus does, and would time BM25 at its worst.
_SYLLABLES = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
VOCAB = (
    WORDS
    + [a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in ("", "n", "r", "s", "l", "th", "ck", "m")][
        : 20_000 - len(WORDS)
    ]
)
_CUMULATIVE = list(itertools.accumulate(1.0 / (rank + 1) ** 1.07 for rank in range(len(VOCAB))))


def words(rng: random.Random, n: int) -> list[str]:
    return rng.choices(VOCAB, cum_weights=_CUMULATIVE, k=n)


def query(rng: random.Random) -> str:
    """A question's topical words: neither the corpus's commonest (ranks under 100, which a question's topic
    rarely is and BM25 weighs near zero) nor unseen ones."""
    return " ".join(VOCAB[rng.randint(100, 5000)] for _ in range(3))


def sentence(rng: random.Random) -> str:
    return " ".join(words(rng, rng.randint(8, 18))).capitalize() + "."


def page(rng: random.Random) -> str:
    """About a page of prose: headings and paragraphs."""
    parts = [f"# {rng.choice(WORDS).title()} {rng.choice(WORDS)}"]
    for _ in range(6):
        parts.append(" ".join(sentence(rng) for _ in range(5)))
    return "\n\n".join(parts) + "\n"


class Timed:
    """An Embedder that times the one it wraps."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model = inner.model
        self.context_tokens = inner.context_tokens
        self.seconds = 0.0

    def embed(self, texts):
        t0 = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - t0


def indexing(files: int, work: Path) -> dict[str, dict]:
    from app.core.documents.embedding import JobEmbedder
    from app.core.documents.indexer import BATCH, Indexer, parse_document
    from app.core.documents.passages import cut_passages, passage_chars
    from app.core.documents.store import DocumentStore
    from app.core.engines import default_registry
    from app.core.engines.base import LoadSpec
    from app.core.runtime.engine_host import EngineHost
    from tests.fixtures.tiny_encoder_gguf import write_tiny_bert_gguf

    model = write_tiny_bert_gguf(work / "encoder.gguf")
    host = EngineHost(default_registry(), name="bench-docs")
    info = host.load_sync(LoadSpec(path=model, n_ctx=256, n_batch=256, n_ubatch=256, embedding=True), "gguf")
    rng = random.Random(7)
    folder = work / "folder"
    folder.mkdir()
    for i in range(files):
        (folder / f"note-{i:04d}.md").write_text(page(rng))
    store = DocumentStore(work / "documents.sqlite3")
    inner = JobEmbedder(host.submit, None, info.n_ctx)  # the host's loaded model (no library to name it in)
    embedder = Timed(inner)
    parse_s = 0.0

    def parse(path: Path):
        nonlocal parse_s
        t0 = time.perf_counter()
        try:
            return parse_document(path)
        finally:
            parse_s += time.perf_counter() - t0

    try:
        c = store.create_collection("bench", "tiny-encoder")
        indexer = Indexer(store, embedder, parse=parse)
        t0 = time.perf_counter()
        indexer.add(c, [folder])
        result = indexer.run(c)
        total_s = time.perf_counter() - t0
        print(
            f"indexed {result.indexed} files ({result.passages} passages) in {total_s:.1f} s: "
            f"{files / total_s:.1f} pages/s; reading {parse_s / total_s:.0%}, "
            f"embedding {embedder.seconds / total_s:.0%}"
        )
        # The engine's own pace on the same passages, in the same batches, with nothing around it.
        texts = [
            p.for_embedding()
            for f in sorted(folder.iterdir())
            for p in cut_passages(parse_document(f).sections, passage_chars(info.n_ctx))
        ]
        t0 = time.perf_counter()
        for start in range(0, len(texts), BATCH):
            inner.embed(texts[start : start + BATCH])
        engine_s = time.perf_counter() - t0
        print(f"the engine alone: {len(texts) / engine_s:.0f} passages/s; indexing {result.passages / total_s:.0f}")

        changed = folder / f"note-{files // 2:04d}.md"
        changed.write_text(page(rng))
        t0 = time.perf_counter()
        indexer.sync(c)
        again = indexer.run(c)
        incremental_s = time.perf_counter() - t0
        assert again.indexed == 1, again
        print(f"one changed file of {files}: sync and index in {incremental_s:.2f} s")
    finally:
        store.close()
        host.shutdown(10)
    return {
        "indexing pages/s": {"value": files / total_s},
        "indexing: share reading files": {"value": parse_s / total_s},
        "indexing: share embedding": {"value": embedder.seconds / total_s},
        "indexing passages/s ÷ the engine's": {
            "value": (result.passages / total_s) / (len(texts) / engine_s),
            "target": 0.9,
            "op": ">=",
        },
        f"one changed file of {files} re-indexed, s": {"value": incremental_s, "target": 2.0, "op": "<="},
    }


def search(n: int, queries: int, work: Path) -> dict[str, dict]:
    import numpy as np
    import psutil

    from app.core.documents.passages import Passage
    from app.core.documents.search import Searcher
    from app.core.documents.store import INDEXED, DocumentStore

    rng = random.Random(n)
    nrng = np.random.default_rng(n)
    store = DocumentStore(work / f"search-{n}.sqlite3")
    try:
        c = store.create_collection("bench", "random")
        per_file = 100
        t0 = time.perf_counter()
        store.mark_found_many(c.id, [(Path(f"/bench/{i}.md"), 1, 1.0) for i in range(n // per_file)])
        for i in range(n // per_file):
            row = store.file(c.id, Path(f"/bench/{i}.md"))
            store.start_file(row.id, str(i), None, per_file)
            passages = [Passage(j, " ".join(sentence(rng) for _ in range(4)), None, "") for j in range(per_file)]
            store.add_passages(c.id, row.id, passages, nrng.standard_normal((per_file, DIMS), dtype=np.float32))
            store.set_state(row.id, INDEXED)
        fill_s = time.perf_counter() - t0
        c = store.collection("bench")
        searcher = Searcher(store)
        rss0 = psutil.Process().memory_info().rss
        searcher.search("warm", [c], embed=lambda t: nrng.standard_normal((1, DIMS)), mode="vector")  # the matrix read
        held = searcher.memory_bytes()
        rss = psutil.Process().memory_info().rss - rss0
        out: dict[str, dict] = {}
        for mode in ("keyword", "vector", "hybrid"):
            times = []
            for _ in range(queries):
                q = query(rng)
                vec = nrng.standard_normal((1, DIMS)).astype(np.float32)
                t0 = time.perf_counter()
                searcher.search(q, [c], limit=5, embed=lambda t, v=vec: v, mode=mode)
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            p50, p95 = statistics.median(times), times[int(0.95 * (len(times) - 1))]
            out[f"{mode} search at {n // 1000}k passages p50, ms"] = {"value": p50}
            out[f"{mode} search at {n // 1000}k passages p95, ms"] = {"value": p95}
            print(f"{n:>7} passages {mode:>8}: p50 {p50:6.1f} ms  p95 {p95:6.1f} ms")
        out[f"vectors held at {n // 1000}k passages, MiB"] = {"value": held / 2**20}
        print(f"{n:>7} passages: filled in {fill_s:.1f} s; vectors {held / 2**20:.0f} MiB, RSS +{rss / 2**20:.0f} MiB")
    finally:
        store.close()
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--passages", default="10000,100000", help="store sizes to search, comma-separated")
    ap.add_argument("--queries", type=int, default=50)
    add_json(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    metrics: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="hearth-bench-docs-") as tmp:
        work = Path(tmp)
        metrics.update(indexing(a.files, work))
        for n in (int(x) for x in a.passages.split(",") if x.strip()):
            metrics.update(search(n, a.queries, work))
    if a.json:
        a.json.write_text(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
