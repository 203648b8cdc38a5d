"""Prompts of a given length in tokens, for any tokenizer: filler prose from a fixed vocabulary (seeded,
so every run sends the same text), sized by a linear fit of tokens against words measured with the target
engine's own count (a CountJob on the host, a one-token request's `usage` on an endpoint).

Every request starts with its own tag, so no two share a cached prefix unless the workload asks for one:
then the shared text is the system message, the same for every request of that prompt length.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Messages = list[dict[str, str]]  # [{"role": ..., "content": ...}], as the OpenAI API takes them
# Counts the prompt tokens of `messages` as the engine renders them (template included).
TokenCounter = Callable[[Messages], int]

INSTRUCTION = "Continue the text below in the same style."
_WORDS = (
    "river stone morning window garden letter summer winter harbor lantern market bridge orchard meadow "
    "candle kitchen station village forest valley mountain island engine silver copper timber canvas "
    "thunder quiet gentle bright narrow distant ancient careful patient simple honest steady golden "
    "walked carried opened noticed painted gathered followed answered remembered wondered listened "
    "before after across beneath between during toward through around beyond often always rarely"
).split()
PROBE_WORDS = (8, 40)  # small: the probe must fit any server's context


def filler(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    words = [rng.choice(_WORDS) for _ in range(max(0, n_words))]
    sentences, i = [], 0
    while i < len(words):
        n = rng.randint(6, 14)
        chunk = words[i : i + n]
        sentences.append(" ".join(chunk).capitalize() + ".")
        i += n
    return " ".join(sentences)


@dataclass(frozen=True)
class TokenFit:
    """prompt tokens ≈ overhead + per_word × words, for the filler text."""

    overhead: float
    per_word: float

    def words_for(self, tokens: int) -> int:
        return max(0, round((tokens - self.overhead) / self.per_word))


def fit_tokens(count: TokenCounter) -> TokenFit:
    """Two probes of the engine's own count give the template's overhead and the filler's tokens a word."""
    (a, b) = PROBE_WORDS
    ta = count(_messages(None, "probe", filler(a, 1)))
    tb = count(_messages(None, "probe", filler(b, 1)))
    per_word = (tb - ta) / (b - a) if tb > ta else 1.3
    return TokenFit(overhead=max(0.0, ta - per_word * a), per_word=max(0.1, per_word))


def _messages(system_prefix: str | None, tag: str, body: str) -> Messages:
    if system_prefix is None:
        return [
            {"role": "system", "content": f"[{tag}] {INSTRUCTION}"},
            {"role": "user", "content": body},
        ]
    # The shared prefix leads and is identical; what differs comes after it.
    return [
        {"role": "system", "content": system_prefix},
        {"role": "user", "content": f"[{tag}] {INSTRUCTION}\n\n{body}"},
    ]


class PromptMaker:
    """Messages of about `prompt_len` tokens; with `shared` tokens of them a common system prompt."""

    def __init__(self, fit: TokenFit) -> None:
        self.fit = fit

    def messages(self, prompt_len: int, tag: str, *, shared: int = 0, prefix_seed: int = 0) -> Messages:
        tag_words = 2  # the tag and the instruction are a handful of tokens; the fit's overhead covers them
        if shared <= 0:
            return _messages(None, tag, filler(self.fit.words_for(prompt_len) - tag_words, seed=hash_seed(tag)))
        prefix = self.shared_prefix(shared, prefix_seed)
        body_words = max(1, self.fit.words_for(prompt_len - shared) - tag_words)
        return _messages(prefix, tag, filler(body_words, seed=hash_seed(tag)))

    def shared_prefix(self, tokens: int, seed: int) -> str:
        head = f"{seed}: you are a careful assistant."
        words = max(1, round(tokens / self.fit.per_word) - len(head.split()))
        return head + " " + filler(words, seed=10_000 + seed)


def hash_seed(tag: str) -> int:
    """A stable seed from a tag (Python's hash() of a str changes between processes)."""
    seed = 0
    for ch in tag:
        seed = (seed * 131 + ord(ch)) % 2_147_483_647
    return seed
