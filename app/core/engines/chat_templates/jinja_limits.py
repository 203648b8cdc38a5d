"""The limits chat templates render under (security.md T2): a wall-clock budget checked on every loop
iteration and mediated call, and a size cap checked *before* anything that could build a large string or
list is built. jinja_sandbox.py wires these into the Jinja environment; this module holds what they check.

Residual risk (documented): each value is capped, not the total held at once, so a deeply recursive macro
can hold about (recursion depth × `max_chars`) characters in its frames until the deadline ends it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.core.engines.errors import EngineError

MAX_RANGE = 100_000  # also the cap on `batch`/`slice` counts: each makes that many lists
MAX_POWER_BITS = 4096  # `**` and int `*` results above this many bits are refused
# Used only when no Budget is active (Jinja folds constant filter calls while compiling); the same as
# templates.render_chat's default.
DEFAULT_MAX_CHARS = 2_000_000
_ATOM = 8  # the rendered size counted for a number, None or an object whose str() is short


class TemplateError(EngineError):
    """The chat template is unsafe, too slow, too large or broken; the message says which."""


class OutputTooLarge(TemplateError):
    """The template's output, or a value it builds, would pass the character cap."""


class RenderedTooLong(TemplateError):
    """The rendered prompt passed the character cap because the conversation's own text nearly fills it
    (just under T35's cap, then the template's markup): the request's to shorten, a 400."""

    code = "context_length_exceeded"

    def __init__(self, cap: int) -> None:
        EngineError.__init__(
            self,
            f"the conversation is over the {cap:,}-character cap on one prompt once the chat template renders it; "
            "shorten it",
            param="messages",
            max_chars=cap,
        )


@dataclass
class Budget:
    deadline: float
    max_chars: int
    steps: int = field(default=0)

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError("the chat template took too long to render (stopped by the timeout)")


BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("hearth_template_budget", default=None)


def check_time() -> None:
    budget = BUDGET.get()
    if budget is not None:
        budget.check()


def size_cap() -> int:
    budget = BUDGET.get()
    return budget.max_chars if budget is not None else DEFAULT_MAX_CHARS


def refuse_over(size: int, what: str) -> None:
    """Refuse an operation whose result would be `size` characters (or items) before it is built."""
    cap = size_cap()
    if size > cap:
        raise OutputTooLarge(f"the chat template would build {what} of {size:,} characters (cap {cap:,})")


def check_size(value: Any) -> Any:
    cap = size_cap()
    if isinstance(value, (str, list, tuple, bytes)) and len(value) > cap:
        raise TemplateError(f"the chat template produced a value over the {cap:,}-character cap")
    return value


def weight(value: Any) -> int:
    """About how many characters str(value) would have, computed without building it; raises TemplateError
    as soon as that passes the cap. A list holding one big string 1000 times is cheap to make and huge to
    print, so containers count each item every time it appears (shared ones are walked only once)."""
    if isinstance(value, (str, bytes)):  # the common case, kept cheap: this runs on every `+` and `~`
        return len(value)
    cap = size_cap()
    memo: dict[int, int] = {}

    def walk(obj: Any) -> int:
        if isinstance(obj, (str, bytes)):
            return len(obj)
        if isinstance(obj, bool) or obj is None:
            return _ATOM
        if isinstance(obj, int):
            return 2 + obj.bit_length() // 3
        namespace = _namespace_attrs(obj)
        if namespace is not None:
            obj = namespace
        elif not isinstance(obj, (list, tuple, dict, set, frozenset, type({}.items()), type({}.keys()))):
            return _ATOM
        key = id(obj)
        if key in memo:
            return memo[key]
        check_time()
        memo[key] = 0  # a container reached again while being walked adds nothing (str() prints "[...]")
        total = 2
        for item in obj.items() if isinstance(obj, dict) else obj:
            total += 2 + walk(item)
            if total > cap:
                raise TemplateError(f"the chat template would print a value over the {cap:,}-character cap")
        memo[key] = total
        return total

    return walk(value)


def _namespace_attrs(obj: Any) -> dict[str, Any] | None:
    # Namespace's repr prints its attributes, but they sit behind name mangling and its __getattribute__.
    from jinja2.utils import Namespace

    if isinstance(obj, Namespace):
        attrs = object.__getattribute__(obj, "_Namespace__attrs")
        return attrs if isinstance(attrs, dict) else {}
    return None


class Guarded:
    """An iterable that checks the deadline on every item: every for-loop runs over one of these (and
    `range` returns one), so a loop with no output and no calls in its body still stops in time.
    `len()` passes through so `loop.length` does not have to copy the iterable."""

    __slots__ = ("_budget", "_it")

    def __init__(self, iterable: Any) -> None:
        self._it = iterable
        self._budget = BUDGET.get()

    def __iter__(self) -> Iterator[Any]:
        budget = self._budget
        if budget is None:
            yield from self._it
            return
        deadline = budget.deadline
        for item in self._it:
            if time.monotonic() > deadline:
                budget.check()
            yield item

    def __len__(self) -> int:
        return len(self._it)

    def __repr__(self) -> str:  # only `range` results reach templates as values
        return repr(self._it) if isinstance(self._it, range) else object.__repr__(self)


def materialize(iterable: Any) -> list[Any]:
    """A list of an iterable's items, taken under the deadline and the cap (for filters that would
    otherwise drain a lazy iterable inside one uninterruptible C call)."""
    cap = size_cap()
    items = []
    for item in Guarded(iterable):
        items.append(item)
        if len(items) > cap:
            raise TemplateError(f"the chat template iterated over {cap:,} items")
    return items


class OutputBuffer(list):
    """The output buffer of a macro, `{% set %}` block, `{% call %}` or recursive loop: it counts what
    is appended and refuses to grow past the cap, so a loop cannot pile up output inside a macro."""

    __slots__ = ("size",)

    def __init__(self) -> None:
        super().__init__()
        self.size = 0

    def _grow(self, n: int) -> None:
        self.size += n
        cap = size_cap()
        if self.size > cap:
            raise TemplateError(f"the chat template output passed the {cap:,}-character cap")
        check_time()

    def append(self, piece: Any) -> None:
        self._grow(len(piece))
        super().append(piece)

    def extend(self, pieces: Iterable[Any]) -> None:
        pieces = tuple(pieces)
        self._grow(sum(len(p) for p in pieces))
        super().extend(pieces)


def concat(pieces: Iterable[Any]) -> str:
    # environment.concat: joins buffers; the total is known before the join allocates.
    pieces = pieces if isinstance(pieces, list) else materialize(pieces)
    refuse_over(sum(len(p) for p in pieces), "a text")
    return "".join(pieces)


def tilde(values: tuple[Any, ...]) -> str:
    # `a ~ b ~ c`: Jinja's own str_join would str() each operand first, which is where a list holding
    # one big string many times would blow up.
    refuse_over(sum(weight(v) for v in values), "a `~` concatenation")
    return "".join(v if isinstance(v, str) else str(v) for v in values)


def finalize(value: Any) -> Any:
    # Runs on every `{{ … }}` before str(): a cheap len() for strings, a walk for containers.
    if not isinstance(value, str):
        refuse_over(weight(value), "an output value")
    return value


# --- globals -----------------------------------------------------------------------------------------


def guarded_range(*args: int) -> Guarded:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise TemplateError(f"the chat template asked for range() with {len(rng):,} items (cap {MAX_RANGE:,})")
    return Guarded(rng)
