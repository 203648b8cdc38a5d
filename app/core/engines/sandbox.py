"""The sandbox chat templates run in (security.md T1, T2): a hardened `ImmutableSandboxedEnvironment`,
a wall-clock budget and an output cap. Nothing here knows about messages; templates.py does.

Residual risk (documented): `~` concatenation is not interceptable in Jinja, so a template
that doubles a string in a short loop is stopped only by the output cap once it is emitted.
"""

from __future__ import annotations

import contextvars
import functools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.core.engines.base import EngineError

__all__ = ["MAX_POWER_BITS", "MAX_RANGE", "Budget", "TemplateError", "environment", "render"]

MAX_RANGE = 100_000
MAX_POWER_BITS = 4096  # `**` results above this many bits are refused
_RANGE_CHECK_EVERY = 1024


class TemplateError(EngineError):
    """The chat template is unsafe, too slow, too large or broken; the message says which."""


@dataclass
class Budget:
    deadline: float
    max_chars: int
    steps: int = field(default=0)

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError("the chat template took too long to render (stopped by the timeout)")


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("hearth_template_budget", default=None)


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


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
):
    """`tojson` as transformers defines it for chat templates (no HTML escaping, keys in order), which
    is what templates were written and models trained against; Jinja's own sorts keys and escapes `<`."""
    if indent is not None and not (isinstance(indent, int) and 0 <= indent <= 16):
        raise TemplateError("the chat template asked tojson for an indent over 16")
    if separators is not None:
        separators = tuple(str(s)[:8] for s in separators)[:2]
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


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
    env.filters["tojson"] = _tojson
    env.filters = {name: _guard_filter(f) for name, f in env.filters.items()}
    return env


_ENV = None


def environment():
    """The one hardened environment (built on first use: importing jinja2 is not free)."""
    global _ENV
    if _ENV is None:
        _ENV = _make_environment()
    return _ENV


@functools.lru_cache(maxsize=16)
def _compile(template: str):
    return environment().from_string(template)


def render(template: str, context: dict[str, Any], budget: Budget) -> str:
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
