"""Which embedding model and reranker to download for documents, for this machine.

An embedding model reads every passage of every document once, so on a CPU its size sets how long a folder
takes to index; a reranker reads the question with 20 candidates on every search, so on a CPU it is the
wait before each answer. With a GPU (or Apple's unified memory) both are cheap and the larger multilingual
models are worth it; on a CPU the small English ones are, and a reranker only when the CPU has cores to spare.
The figures are the Q8_0 files' sizes on the Hub; a repo's quant is picked like any download's (`hearth pull`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.models.devices import Machine


@dataclass(frozen=True)
class Suggestion:
    role: str  # "embedding" or "rerank"
    repo: str  # the Hub repository
    quant: str  # the variant to fetch
    size_bytes: int  # its file, roughly
    context: int  # the longest passage it reads, in tokens
    why: str  # one sentence for the window

    @property
    def spec(self) -> str:
        """What `hearth pull` takes."""
        return f"{self.repo}:{self.quant}"


NOMIC = Suggestion(
    "embedding",
    "nomic-ai/nomic-embed-text-v1.5-GGUF",
    "Q8_0",
    146_000_000,
    8192,
    "small and fast on a CPU, reads long passages (8k tokens); best for English",
)
BGE_M3 = Suggestion(
    "embedding",
    "gpustack/bge-m3-GGUF",
    "Q8_0",
    635_000_000,
    8192,
    "strong in 100+ languages and long passages; four times the work of a small model, easy for a GPU",
)
BGE_RERANKER = Suggestion(
    "rerank",
    "gpustack/bge-reranker-v2-m3-GGUF",
    "Q8_0",
    636_000_000,
    8192,
    "orders the candidates of each search best first, in 100+ languages",
)
JINA_TINY_RERANKER = Suggestion(
    "rerank",
    "gpustack/jina-reranker-v1-tiny-en-GGUF",
    "Q8_0",
    36_000_000,
    8192,
    "a tiny English reranker: better order for a fraction of a second per search on a CPU",
)

# A GPU with this much free memory holds both larger models beside a chat model's layers.
GPU_BYTES = 4 << 30
# CPU cores from which a tiny reranker's 20 reads per search stay under a second beside a chat model.
RERANK_CORES = 6


def recommend(machine: Machine) -> list[Suggestion]:
    """The embedding model, then the reranker (when one pays off here), for `machine`."""
    accelerated = machine.unified or any(g.budget_bytes >= GPU_BYTES for g in machine.gpus)
    if accelerated:
        return [BGE_M3, BGE_RERANKER]
    picks = [NOMIC]
    if machine.cores >= RERANK_CORES:
        picks.append(JINA_TINY_RERANKER)
    return picks


def why_not_reranker(machine: Machine) -> str | None:
    """Why no reranker is suggested here (a sentence for the window), or None when one is."""
    if any(s.role == "rerank" for s in recommend(machine)):
        return None
    return (
        f"no reranker: on {machine.cores} CPU core{'s' if machine.cores != 1 else ''} it would add seconds "
        "to each question; hybrid search alone ranks well"
    )
