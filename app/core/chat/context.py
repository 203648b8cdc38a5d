"""Context-window policy: what to send when a conversation outgrows the model's context.

Visible, never silent: drop the oldest whole turns after the system prompt and say how many;
if even the last turn does not fit, send nothing and say why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app.core.chat.tool_loop import function_name
from app.core.engines.base import ChatMessage, ImageInput
from app.core.engines.inputs.images import MAX_IMAGES
from app.core.tools.types import ToolCall

# Tokens for a list of messages (after the chat template when the engine can tell).
TokenCounter = Callable[[list[ChatMessage]], int]

DEFAULT_REPLY_RESERVE = 512
IMAGE_TOKENS = 1024  # more than most projectors make of one image (Gemma 3: 256; LLaVA-1.5: 576)
WARN_FRACTION = 0.85


@dataclass(frozen=True)
class ContextNotice:
    level: Literal["info", "error"]
    text: str
    dropped_messages: int = 0


@dataclass(frozen=True)
class ContextPlan:
    messages: list[ChatMessage]  # what to send; empty when the notice is an error
    prompt_tokens: int  # tokens of `messages` per the counter (of the minimum request on error)
    budget: int  # n_ctx minus the reply reserve
    n_ctx: int
    dropped_messages: int = 0
    notice: ContextNotice | None = None

    @property
    def ok(self) -> bool:
        return self.notice is None or self.notice.level != "error"


class Turn(Protocol):
    """What the policy reads of a message: a stored `Message`, or a row the chat shows."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def status(self) -> str: ...


def history_for_request(
    system_prompt: str, path: Sequence[Turn], images: Mapping[int, Sequence[ImageInput]] | None = None
) -> list[ChatMessage]:
    """The shown thread as engine messages: system prompt first; failed/empty replies left out. `images`:
    the stored images by message id (ChatStore.images_of), for turns that have an `id`; a turn not saved yet
    brings its own (`images`). One request takes MAX_IMAGES: older turns' images past that are left out
    (their text stays), so a long chat with pictures keeps working."""
    out: list[ChatMessage] = []
    if system_prompt.strip():
        out.append(ChatMessage(role="system", content=system_prompt))
    for m in path:
        stored = getattr(m, "message", m)  # a shown row holds its stored message
        calls = stored_calls(getattr(stored, "tool_calls", None))
        if m.role == "assistant" and (m.status in ("streaming", "error") or not (m.content or calls)):
            continue
        attached = (images.get(getattr(m, "id", -1)) if images else None) or getattr(m, "images", None)
        out.append(
            ChatMessage(
                role=m.role,
                content=m.content,
                images=list(attached) if attached else None,
                tool_calls=calls or None,
                tool_call_id=getattr(stored, "tool_call_id", None) if m.role == "tool" else None,
            )
        )
    room = MAX_IMAGES
    for i in range(len(out) - 1, -1, -1):  # newest first: the picture being asked about is kept
        shown = out[i].images or []
        if len(shown) > room:
            out[i] = out[i].model_copy(update={"images": shown[len(shown) - room :] or None})
        room -= len(out[i].images or [])
    return out


def stored_calls(calls: Sequence[Mapping[str, Any]] | None) -> list[ToolCall]:
    """A stored turn's tool calls as the model made them (its function names, JSON arguments)."""
    return [
        ToolCall(
            id=str(c.get("id", "")),
            name=function_name(str(c.get("server", "")), str(c.get("tool", ""))),
            arguments=json.dumps(c.get("arguments") or {}, ensure_ascii=False, separators=(",", ":")),
        )
        for c in calls or ()
    ]


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """A deliberately high token estimate (the engine's tokenizer lives on the host thread):
    ~3 ASCII characters or 1 other character per token, plus the template's per-message overhead, and
    IMAGE_TOKENS an image (what its projector makes of it is known only once it is read)."""
    total = 2
    for m in messages:
        total += IMAGE_TOKENS * len(m.images or ())
        text = m.content + "".join(c.name + c.arguments for c in m.tool_calls or ())
        # C-speed count: this runs on every send and meter update, over the whole thread.
        ascii_chars = len(text) if text.isascii() else len(text.encode("ascii", "ignore"))
        total += ascii_chars // 3 + (len(text) - ascii_chars) + 6
    return total


def _turns(body: Sequence[ChatMessage]) -> list[list[ChatMessage]]:
    """Split into turns: each user message with the replies that follow it."""
    turns: list[list[ChatMessage]] = []
    for m in body:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def fit_context(
    messages: Sequence[ChatMessage],
    count_tokens: TokenCounter,
    n_ctx: int,
    reserve: int = DEFAULT_REPLY_RESERVE,
) -> ContextPlan:
    """Choose the messages to send so that prompt + `reserve` reply tokens fit in `n_ctx`."""
    messages = list(messages)
    split = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    head, turns = messages[:split], _turns(messages[split:])
    budget = n_ctx - reserve

    def request(dropped_turns: int) -> list[ChatMessage]:
        return head + [m for t in turns[dropped_turns:] for m in t]

    total = count_tokens(messages)
    if budget > 0 and total <= budget:
        return ContextPlan(messages, total, budget, n_ctx)

    keep_last = max(len(turns) - 1, 0)
    minimum = request(keep_last)
    need = count_tokens(minimum)
    if budget <= 0 or need > budget:
        text = (
            f"Your last message is too long for this model's context: with the system prompt it"
            f" needs about {need} tokens, but only {max(budget, 0)} of {n_ctx} are free after"
            f" keeping {reserve} for the reply. Shorten it, lower max tokens, or load the model"
            " with a longer context. Nothing was sent."
        )
        return ContextPlan([], need, budget, n_ctx, 0, ContextNotice("error", text))

    # Fewest dropped turns that fit; token counts shrink as turns are dropped, so bisect.
    lo, hi = 1, keep_last
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(request(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    chosen = request(lo)
    dropped = sum(len(t) for t in turns[:lo])
    text = (
        f"This conversation is longer than the model's context ({n_ctx} tokens, {reserve} kept"
        f" for the reply): the {dropped} oldest message{'s' if dropped != 1 else ''} after the"
        " system prompt were left out of this request. They are still saved; the model does not"
        " see them."
    )
    return ContextPlan(chosen, count_tokens(chosen), budget, n_ctx, dropped, ContextNotice("info", text, dropped))


def context_usage(used_tokens: int, n_ctx: int) -> Literal["ok", "warn", "full"]:
    """For the context meter: warn near the limit."""
    if n_ctx <= 0 or used_tokens >= n_ctx:
        return "full"
    return "warn" if used_tokens >= WARN_FRACTION * n_ctx else "ok"
