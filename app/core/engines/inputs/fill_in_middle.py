"""Fill in the middle (Ollama's `suffix` on /api/generate): a code model trained for it sees the text before
the cursor and the text after, each behind its own control token, and writes what goes between. Every family
Hearth meets uses the prefix-suffix-middle order; only the tokens' spelling differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.engines.errors import Unsupported

# How families spell the three tokens (prefix, suffix, middle): Qwen2.5-Coder and cl100k-style, StarCoder
# and SantaCoder, Code Llama, DeepSeek-Coder, CodeGemma.
MARKERS = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),
    ("▁<PRE>", "▁<SUF>", "▁<MID>"),
    ("<PRE>", "<SUF>", "<MID>"),
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    ("<|fim_begin|>", "<|fim_hole|>", "<|fim_end|>"),
)


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int

    def prompt(self, before: list[int], after: list[int]) -> list[int]:
        return [self.prefix, *before, self.suffix, *after, self.middle]


def find_by_text(token_id: Callable[[str], int | None]) -> FimTokens | None:
    """The first family whose three tokens are all single tokens of this vocabulary (`token_id`: a
    token's id by its exact text, None when it has none)."""
    for names in MARKERS:
        ids = [token_id(name) for name in names]
        if all(i is not None and i >= 0 for i in ids):
            return FimTokens(*(int(i) for i in ids if i is not None))
    return None


def fim_by_text(token_id: Callable[[str], int | None], model: str) -> FimTokens:
    """find_by_text, or the refusal naming `model` when its vocabulary has no family's three tokens."""
    found = find_by_text(token_id)
    if found is None:
        raise not_trained_for_it(model)
    return found


def not_trained_for_it(model: str) -> Unsupported:
    """The error for `suffix` on a model without fill-in-the-middle tokens (Ollama words it "does not
    support insert"; this says why)."""
    return Unsupported(
        f"{model} does not support insert: it has no fill-in-the-middle tokens, so `suffix` needs a code "
        "model trained for it (Qwen2.5-Coder, StarCoder2, CodeGemma, DeepSeek-Coder)",
        param="suffix",
    )
