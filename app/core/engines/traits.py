"""What each engine can do, declared once and read wherever a decision hangs on a model's format before an
engine is loaded (the chat's load plan, the API's resolver, `/v1/models`). A loaded engine's own
Capabilities say the same for the model it runs."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Traits", "traits"]


@dataclass(frozen=True)
class Traits:
    planned: bool = False  # the planner sizes its loads on this machine (context, GPU layers, slots)
    batches: bool = False  # several sequences share each decode step (slots > 1)
    draft_model: bool = False  # speculative decoding with a small draft model
    draft_alone: bool = False  # it drafts only on its single-stream path: a draft model means one slot
    ngram: bool = False  # n-gram (prompt-lookup) drafting
    grammar: bool = False  # JSON schemas and forced tool calls, through grammars
    embeddings: bool = False  # /v1/embeddings from a chat model's weights (a second context)
    llama_cpp_build: bool = False  # the planner's notes on the llama.cpp build apply


_BY_FORMAT = {
    "gguf": Traits(
        planned=True, batches=True, draft_model=True, ngram=True, grammar=True, embeddings=True, llama_cpp_build=True
    ),
    "mlx": Traits(planned=True, batches=True, draft_model=True, draft_alone=True),
}
_NONE = Traits()  # a remote model, or a format no local engine runs


def traits(fmt: str) -> Traits:
    """The traits of the engine that runs models of format `fmt` ("gguf", "mlx"; anything else: none)."""
    return _BY_FORMAT.get(fmt, _NONE)
