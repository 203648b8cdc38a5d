"""How a request becomes llama.cpp's token ids: a conversation through the chat template (request text is
never parsed for control tokens; images become libmtmd runs), a raw prompt, or a prompt and suffix around the
model's fill-in-the-middle tokens. The engine adds BOS and checks the length."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.engines.base import ChatMessage, GenerateRequest
from app.core.engines.chat_templates.render import render_chat, tokenize_segments
from app.core.engines.inputs.fill_in_middle import FimTokens, not_trained_for_it
from app.core.engines.inputs.images import has_images, no_vision
from app.core.engines.llamacpp.vision import MediaChunk, Projector

Tokenize = Callable[[str, bool], list[int]]  # (text, parse special tokens) → ids, no BOS


@dataclass(frozen=True)
class ChatTemplate:
    source: str | None  # None: ChatML
    bos_text: str
    eos_text: str


def chat_ids(
    request: GenerateRequest, template: ChatTemplate, tokenize: Tokenize, vision: Projector | None, model: str
) -> tuple[list[int], dict[int, MediaChunk]]:
    """A conversation's ids, and the chunks its images' runs stand for (empty without images)."""
    assert request.messages is not None

    def segments(messages: list[ChatMessage]) -> list[tuple[str, bool]]:
        rendered = render_chat(
            template.source, messages, tools=request.tools, bos_token=template.bos_text, eos_token=template.eos_text
        )
        return rendered.segments

    if not has_images(request.messages):
        return tokenize_segments(segments(request.messages), tokenize), {}
    if vision is None:
        raise no_vision(model)
    return vision.prompt(request.messages, segments, tokenize)


def raw_ids(request: GenerateRequest, tokenize: Tokenize, fim: Callable[[], FimTokens]) -> list[int]:
    """A raw prompt's ids; with a suffix, both around the FIM tokens `fim` finds (or refuses)."""
    ids = tokenize(request.prompt or "", False)
    if request.suffix is not None:
        ids = fim().prompt(ids, tokenize(request.suffix, False))
    return ids


def fim_tokens(lib: Any, vocab: Any, model: str) -> FimTokens:
    """The model's fill-in-the-middle tokens: llama.cpp reads them from the GGUF's tokenizer keys, or finds
    them by their text when the converter wrote none."""
    ids = (lib.llama_vocab_fim_pre(vocab), lib.llama_vocab_fim_suf(vocab), lib.llama_vocab_fim_mid(vocab))
    if any(int(i) < 0 for i in ids):
        raise not_trained_for_it(model)
    return FimTokens(*(int(i) for i in ids))


def token_piece(lib: Any, vocab: Any, token: int, special: bool = False) -> bytes:
    """The bytes of one token (control tokens render as nothing unless `special`)."""
    size = 64
    while True:
        buf = ctypes.create_string_buffer(size)
        n = lib.llama_token_to_piece(vocab, token, buf, size, 0, special)
        if n >= 0:
            return buf.raw[:n]
        size = -n


def single_token_ids(
    texts: list[str] | None, tokenize: Tokenize, cache: dict[tuple[str, ...], frozenset[int]]
) -> frozenset[int]:
    """The ids of those strings that are one token each in this vocabulary (kept in `cache` per load: the API
    asks for the same two dozen markers on every request)."""
    key = tuple(texts or ())
    found = cache.get(key)
    if found is None:
        ids = {tokens[0] for text in key if len(tokens := tokenize(text, True)) == 1}
        if len(cache) >= 16:  # a bound, though in practice one key: OUTPUT_MARKERS
            cache.clear()
        found = cache[key] = frozenset(ids)
    return found
