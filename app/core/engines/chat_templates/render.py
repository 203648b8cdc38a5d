"""Chat templates rendered safely (security.md T1, T2, T4).

A model's `tokenizer.chat_template` is untrusted code. It is rendered only in a
hardened `ImmutableSandboxedEnvironment`, under a wall-clock budget and an output cap,
and request text (message content, names, tool definitions, call arguments, tool results)
is kept apart from template literals: it is tokenized with special-token parsing off, so
user text such as "<|im_end|>" never becomes a control token.
Templates come from the model file or the library, never from a request; jinja_sandbox.py runs them.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.engines.base import ChatMessage
from app.core.engines.chat_templates.jinja_limits import OutputTooLarge, RenderedTooLong
from app.core.engines.chat_templates.jinja_sandbox import Budget, TemplateError, environment, render
from app.core.tools.prompt import FALLBACK_NOTICE, fallback_turns, template_call

logger = logging.getLogger(__name__)

__all__ = ["CHATML_TEMPLATE", "RenderedPrompt", "TemplateError", "reads_tools", "render_chat", "tokenize_segments"]

# The documented fallback when a model ships no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHATML_NOTICE = "the model has no chat template; Hearth uses ChatML (<|im_start|>role … <|im_end|>)"


@dataclass
class RenderedPrompt:
    text: str
    segments: list[tuple[str, bool]]  # (piece, is_content); the pieces concatenate to `text`
    notice: str | None = None


_PLAIN = re.compile(r"[A-Za-z0-9_-]{0,64}")


class _Marks:
    """Stand-ins for request text in the marked render; `values[i]` is what marker i stands for."""

    def __init__(self) -> None:
        self.nonce = str(secrets.randbelow(10**15) + 10**15)  # digits survive |upper, |lower, |trim
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def text(self, value: str) -> str:
        if not value:
            return value  # nothing to forge, and `{% if content %}` must branch as in the real render
        if value not in self._index:  # one marker per value: a template may look a value up by another
            self._index[value] = len(self.values)
            self.values.append(value)
        return f"HEARTHX{self.nonce}N{self._index[value]}X"

    def data(self, value: Any) -> Any:
        """Tools and call arguments: every string marked, keys too, except identifier-like ones
        ("function", "string", a tool name, a 9-character id): those cannot spell a control token,
        and templates compare them (`type == 'string'`) or check them (Mistral's id length)."""
        if isinstance(value, str):
            return value if _PLAIN.fullmatch(value) else self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value


def _identity(value: Any) -> Any:
    return value


def _turns(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    dumped = (m.model_dump(exclude_none=True, exclude={"images"}) for m in messages)
    return [d | ({"tool_calls": m.tool_calls} if m.tool_calls else {}) for d, m in zip(dumped, messages, strict=True)]


def _context(
    base: dict[str, Any], turns: list[dict[str, Any]], tools: list[dict[str, Any]] | None, marks: _Marks | None
) -> dict[str, Any]:
    text = marks.text if marks else _identity
    data = marks.data if marks else _identity
    out = []
    for turn in turns:
        item: dict[str, Any] = {"role": turn["role"], "content": text(turn.get("content", ""))}
        if "name" in turn:
            item["name"] = text(turn["name"])
        if turn.get("tool_calls"):
            item["tool_calls"] = [data(template_call(call)) for call in turn["tool_calls"]]
        if "tool_call_id" in turn:
            item["tool_call_id"] = data(turn["tool_call_id"])
        out.append(item)
    context = {**base, "messages": out}
    if tools:
        context["tools"] = data(copy.deepcopy(tools))
    return context


@functools.lru_cache(maxsize=16)
def reads_tools(template: str) -> bool:
    """Whether the template reads a `tools` variable (parsed, not run); if not, Hearth's fallback applies."""
    import jinja2
    from jinja2 import meta

    try:
        return "tools" in meta.find_undeclared_variables(environment().parse(template))
    except jinja2.exceptions.TemplateError:
        return False


def render_chat(
    template: str | None,
    messages: list[ChatMessage],
    *,
    tools: list[dict[str, Any]] | None = None,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    timeout_s: float = 2.0,
    max_chars: int = 2_000_000,
) -> RenderedPrompt:
    """Render `messages` (and `tools`, OpenAI function tools) with `template` (None → ChatML) and mark
    which text came from the request: content, names, tool definitions, call arguments and ids.

    A template that never reads `tools` gets them described in the system prompt, and one that never
    reads `tool_calls` gets calls and results as text (app.core.tools.prompt). Raises TemplateError on
    a sandbox violation, the timeout, the output cap, or a broken template.
    """
    notices = []
    if not template or not template.strip():
        template = CHATML_TEMPLATE
        notices.append(CHATML_NOTICE)
    base = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": add_generation_prompt}
    run = functools.partial(_render_marked, template, base, timeout_s, max_chars)
    turns = _turns(messages)
    try:
        return _render_chat(run, template, turns, tools, notices)
    except OutputTooLarge:
        # Over the cap with text that nearly fills it by itself: the request's to shorten (a 400); a
        # template that blows up a small conversation stays the template's error.
        if sum(len(str(t.get("content") or "")) for t in turns) > max_chars // 2:
            raise RenderedTooLong(max_chars) from None
        raise


def _render_chat(
    run: Callable[..., RenderedPrompt],
    template: str,
    turns: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    notices: list[str],
) -> RenderedPrompt:
    native = reads_tools(template)
    describe, text_calls = bool(tools) and not native, not native and "tool_calls" not in template
    if not (describe or text_calls):
        rendered = run(turns, tools)
    else:
        notices += [FALLBACK_NOTICE] if describe else []
        try:
            rendered = run(fallback_turns(turns, tools, describe_tools=describe, text_calls=text_calls), None)
        except TemplateError:
            if not describe or (turns and turns[0]["role"] == "system"):
                raise
            # Some templates refuse a system turn: the tool list goes at the top of the first user turn.
            moved = fallback_turns(turns, tools, describe_tools=True, text_calls=text_calls, into_user=True)
            rendered = run(moved, None)
    rendered.notice = "; ".join(notices + ([rendered.notice] if rendered.notice else [])) or None
    return rendered


def _render_marked(
    template: str,
    base: dict[str, Any],
    timeout_s: float,
    max_chars: int,
    turns: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> RenderedPrompt:
    budget = Budget(deadline=time.monotonic() + timeout_s, max_chars=max_chars)
    # Request text is rendered as unguessable markers, then split at them.
    marks = _Marks()
    marked = render(template, _context(base, turns, tools, marks), budget)
    real = render(template, _context(base, turns, tools, None), budget)

    pieces = _split_markers(marked, marks.nonce, marks.values)
    if any(marks.nonce in text for text, is_content in pieces if not is_content):
        raise TemplateError("the chat template cuts or rewrites message text in a way Hearth cannot render safely")
    direct = "".join(text for text, _ in pieces)
    if direct == real:
        return RenderedPrompt(real, _merge(pieces))
    aligned = _align(pieces, real)
    if aligned is not None:
        return RenderedPrompt(real, _merge(aligned))
    # The template reshapes content beyond trimming and JSON-escaping: keep its literals, insert
    # content verbatim (the marked render never saw request text, so its literals are its own).
    logger.info("chat template transforms message content; inserting content unchanged")
    return RenderedPrompt(
        direct, _merge(pieces), "the chat template transforms message text; Hearth inserted it unchanged"
    )


def _split_markers(marked: str, nonce: str, values: list[str]) -> list[tuple[str, bool]]:
    pattern = re.compile(f"HEARTHX{nonce}N(\\d+)X", re.IGNORECASE)
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for m in pattern.finditer(marked):
        if m.start() > pos:
            pieces.append((marked[pos : m.start()], False))
        pieces.append((values[int(m.group(1))], True))
        pos = m.end()
    if pos < len(marked):
        pieces.append((marked[pos:], False))
    return pieces


def _align(pieces: list[tuple[str, bool]], real: str) -> list[tuple[str, bool]] | None:
    """Match `real` against the literal/content pattern, allowing trimmed content; None if it does not fit."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for i, (text, is_content) in enumerate(pieces):
        if not is_content:
            if not real.startswith(text, pos):
                return None
            out.append((text, False))
            pos += len(text)
            continue
        following = pieces[i + 1][0] if i + 1 < len(pieces) and not pieces[i + 1][1] else None
        # As is, trimmed, or JSON-escaped (a template that `tojson`s a tool or the arguments).
        escaped = (json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1])
        for variant in dict.fromkeys((text, text.strip(), text.lstrip(), text.rstrip(), *escaped)):
            end = pos + len(variant)
            if real.startswith(variant, pos) and (following is None or real.startswith(following, end)):
                out.append((variant, True))
                pos = end
                break
        else:
            return None
    return out if pos == len(real) else None


def _merge(pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    merged: list[tuple[str, bool]] = []
    for text, is_content in pieces:
        if not text:
            continue
        if merged and merged[-1][1] == is_content:
            merged[-1] = (merged[-1][0] + text, is_content)
        else:
            merged.append((text, is_content))
    return merged


def tokenize_segments(segments: list[tuple[str, bool]], tokenize: Callable[[str, bool], list[int]]) -> list[int]:
    """Tokenize each segment: template literals with special parsing on, content with it off.

    `tokenize(text, special)` is the engine's tokenizer without BOS.
    """
    ids: list[int] = []
    for text, is_content in segments:
        if text:
            ids.extend(tokenize(text, not is_content))
    return ids
