"""Chat templates rendered safely (security.md T1, T2, T4).

A model's `tokenizer.chat_template` is untrusted code. It is rendered only in a
hardened `ImmutableSandboxedEnvironment`, under a wall-clock budget and an output cap,
and message content is kept apart from template literals: content is tokenized with
special-token parsing off, so user text such as "<|im_end|>" never becomes a control token.
Templates come from the model file or the library, never from a request.

Residual risk (documented): `~` concatenation is not interceptable in Jinja, so a template
that doubles a string in a short loop is stopped only by the output cap once it is emitted.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.core.engines.base import ChatMessage, EngineError

logger = logging.getLogger(__name__)

__all__ = ["CHATML_TEMPLATE", "RenderedPrompt", "TemplateError", "render_chat", "tokenize_segments"]

# The documented fallback when a model ships no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHATML_NOTICE = "the model has no chat template; Hearth uses ChatML (<|im_start|>role … <|im_end|>)"

MAX_RANGE = 100_000
MAX_POWER_BITS = 4096  # `**` results above this many bits are refused
_RANGE_CHECK_EVERY = 1024


class TemplateError(EngineError):
    """The chat template is unsafe, too slow, too large or broken; the message says which."""


@dataclass
class RenderedPrompt:
    text: str
    segments: list[tuple[str, bool]]  # (piece, is_content); the pieces concatenate to `text`
    notice: str | None = None


@dataclass
class _Budget:
    deadline: float
    max_chars: int
    steps: int = field(default=0)

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError("the chat template took too long to render (stopped by the timeout)")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("hearth_template_budget", default=None)


def _check_time() -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.check()


def _check_size(value: Any) -> Any:
    budget = _BUDGET.get()
    if budget is not None and isinstance(value, (str, list, tuple, bytes)) and len(value) > budget.max_chars:
        raise TemplateError(f"the chat template produced a value over the {budget.max_chars:,}-character cap")
    return value


def _guarded_range(*args: int) -> Iterator[int]:
    # A generator, not a range object, so every loop over it checks the wall clock.
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise TemplateError(f"the chat template asked for range() with {len(rng):,} items (cap {MAX_RANGE:,})")
    return _iterate_with_clock(rng)


def _iterate_with_clock(rng: range) -> Iterator[int]:
    for i, value in enumerate(rng):
        if i % _RANGE_CHECK_EVERY == 0:
            _check_time()
        yield value


def _raise_exception(message: str) -> None:
    raise TemplateError(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _guard_filter(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)  # keeps jinja_pass_arg, so context-taking filters still get it
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _check_time()
        return _check_size(func(*args, **kwargs))

    return wrapper


def _make_environment():
    import jinja2.exceptions
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _GenerationTag(jinja2.ext.Extension):
        """HF's `{% generation %}` marks assistant spans for training; render its body as is."""

        tags = {"generation"}  # noqa: RUF012 (jinja2 reads the tags this extension handles from the class)

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class HearthSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+"})

        def call_binop(self, context, operator, left, right):
            _check_time()
            budget = _BUDGET.get()
            cap = budget.max_chars if budget else 2_000_000
            if (
                operator == "**"
                and isinstance(left, int)
                and isinstance(right, int)
                and right > 0
                and abs(left) > 1
                and right * max(abs(left).bit_length(), 1) > MAX_POWER_BITS
            ):
                raise TemplateError("the chat template computed a number too large to allow")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > cap:
                        raise TemplateError(f"the chat template built a value over the {cap:,}-character cap")
            return _check_size(super().call_binop(context, operator, left, right))

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (mirrors jinja's signature)
            _check_time()
            return _check_size(super().call(__context, __obj, *args, **kwargs))

        def unsafe_undefined(self, obj, attribute):
            # Jinja returns a silent Undefined here; a hostile template should fail loudly instead.
            raise jinja2.exceptions.SecurityError(
                f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
            )

        def getattr(self, obj, attribute):
            _check_time()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            _check_time()
            return super().getitem(obj, argument)

    env = HearthSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    for name in ("lipsum", "cycler", "joiner"):  # lipsum(10**7) is one long uninterruptible call
        env.globals.pop(name, None)
    env.globals.update(range=_guarded_range, raise_exception=_raise_exception, strftime_now=_strftime_now)
    base_attr = env.filters["attr"]

    def safe_attr(environment, obj, name):
        if not isinstance(name, str) or name.startswith("_") or name in ("format", "format_map"):
            raise jinja2.exceptions.SecurityError(f"|attr({name!r}) is not allowed in chat templates")
        return base_attr(environment, obj, name)

    env.filters["attr"] = functools.update_wrapper(safe_attr, base_attr)
    env.filters = {name: _guard_filter(f) for name, f in env.filters.items()}
    return env


_ENV = None


def _environment():
    global _ENV
    if _ENV is None:
        _ENV = _make_environment()
    return _ENV


@functools.lru_cache(maxsize=16)
def _compile(template: str):
    return _environment().from_string(template)


def _render(template: str, context: dict[str, Any], budget: _Budget) -> str:
    import jinja2

    token = _BUDGET.set(budget)
    try:
        compiled = _compile(template)
        pieces: list[str] = []
        size = 0
        for piece in compiled.generate(**context):
            size += len(piece)
            if size > budget.max_chars:
                raise TemplateError(f"the chat template output passed the {budget.max_chars:,}-character cap")
            budget.check()
            pieces.append(piece)
        return "".join(pieces)
    except TemplateError:
        raise
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateError(f"the chat template tried something unsafe and was stopped: {exc}") from exc
    except jinja2.exceptions.TemplateError as exc:
        raise TemplateError(f"the chat template is broken: {exc}") from exc
    except (OverflowError, MemoryError, RecursionError) as exc:
        raise TemplateError(f"the chat template ran away and was stopped: {type(exc).__name__}") from exc
    except Exception as exc:  # anything a hostile template can raise from inside the sandbox
        raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc
    finally:
        _BUDGET.reset(token)


def _message_dicts(messages: list[ChatMessage], content: list[str], names: list[str | None]) -> list[dict]:
    out = []
    for msg, text, name in zip(messages, content, names):
        item: dict[str, Any] = {"role": msg.role, "content": text}
        if name is not None:
            item["name"] = name
        out.append(item)
    return out


def render_chat(
    template: str | None,
    messages: list[ChatMessage],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    timeout_s: float = 2.0,
    max_chars: int = 2_000_000,
) -> RenderedPrompt:
    """Render `messages` with `template` (None → ChatML) and mark which text came from messages.

    Raises TemplateError on a sandbox violation, the timeout, the output cap, or a broken template.
    """
    notice = None
    if not template or not template.strip():
        template, notice = CHATML_TEMPLATE, CHATML_NOTICE
    budget = _Budget(deadline=time.monotonic() + timeout_s, max_chars=max_chars)
    base = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": add_generation_prompt}

    # Content and names are user text: render with unguessable markers, then split at them.
    nonce = str(secrets.randbelow(10**15) + 10**15)  # digits survive |upper, |lower, |trim
    values: list[str] = []
    contents = [msg.content for msg in messages]
    names = [msg.name for msg in messages]

    def marker(value: str) -> str:
        values.append(value)
        return f"HEARTHX{nonce}N{len(values) - 1}X"

    marked_contents = [marker(c) for c in contents]
    marked_names = [marker(n) if n is not None else None for n in names]
    marked = _render(template, {**base, "messages": _message_dicts(messages, marked_contents, marked_names)}, budget)
    real = _render(template, {**base, "messages": _message_dicts(messages, contents, names)}, budget)

    pieces = _split_markers(marked, nonce, values)
    if any(nonce in text for text, is_content in pieces if not is_content):
        raise TemplateError("the chat template cuts or rewrites message text in a way Hearth cannot render safely")
    direct = "".join(text for text, _ in pieces)
    if direct == real:
        return RenderedPrompt(real, _merge(pieces), notice)

    aligned = _align(pieces, real)
    if aligned is not None:
        return RenderedPrompt(real, _merge(aligned), notice)
    # The template reshapes content beyond trimming: keep its literals, insert content verbatim
    # (the marked render never saw user text, so its literals are the template's alone).
    logger.info("chat template transforms message content; inserting content unchanged")
    extra = "the chat template transforms message text; Hearth inserted it unchanged"
    return RenderedPrompt(direct, _merge(pieces), f"{notice}; {extra}" if notice else extra)


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
        for variant in dict.fromkeys((text, text.strip(), text.lstrip(), text.rstrip())):
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
