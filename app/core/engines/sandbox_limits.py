"""The limits chat templates render under (security.md T2): a wall-clock budget checked on every loop
iteration and mediated call, and a size cap checked *before* anything that could build a large string or
list is built. sandbox.py wires these into the Jinja environment; this module holds what they check.

Residual risk (documented): each value is capped, not the total held at once, so a deeply recursive macro
can hold about (recursion depth × `max_chars`) characters in its frames until the deadline ends it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.core.engines.base import EngineError

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


# --- format strings ----------------------------------------------------------------------------------

_PERCENT_SPEC = re.compile(r"%(\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.DOTALL)
_BRACE_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d*))?.?", re.DOTALL)


def percent_size(fmt: str, args: Any) -> int:
    """An upper bound on len(fmt % args): the format, every argument printed, and every width and
    precision (`%*d` takes them from the arguments)."""
    positional = args if isinstance(args, tuple) else (args,)
    total = len(fmt) + sum(weight(a) for a in positional)
    index = 0
    for m in _PERCENT_SPEC.finditer(fmt):
        pads = 0
        for part in (m.group(2), m.group(3)):
            if part == "*":
                star = positional[index] if index < len(positional) else 0
                index += 1
                pads = max(pads, abs(star) if isinstance(star, int) else 0)
            elif part:
                pads = max(pads, int(part))
        total += pads
        if m.group(4) != "%" and not m.group(1):
            index += 1
    return total


def brace_size(fmt: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """An upper bound on len(fmt.format(*args, **kwargs)); a width computed from an argument (`{:{w}}`)
    is refused, since no chat template needs one and it cannot be bounded before formatting."""
    total = len(fmt) + sum(weight(a) for a in args) + sum(weight(v) for v in kwargs.values())
    for _literal, field_name, spec, _conv in string.Formatter().parse(fmt):
        if field_name is None or not spec:
            continue
        if "{" in spec:
            raise TemplateError("the chat template used a computed width in str.format, which is not allowed")
        m = _BRACE_SPEC.fullmatch(spec)
        if m:
            total += max(int(m.group(1) or 0), int(m.group(2) or 0))
    return total


# --- str methods and filters that can make much more than they are given ----------------------------


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _replace_size(s: str, old: Any, new: Any, count: Any) -> int:
    if not (isinstance(old, str) and isinstance(new, str)):
        return len(s)
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(len(new) - len(old), 0)


def _join_size(sep: str, items: list[Any] | tuple[Any, ...]) -> int:
    return sum(weight(x) for x in items) + len(sep) * max(len(items) - 1, 0)


def str_method_call(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Check a call of a str method that can grow its string before it runs; returns the args to call with."""
    s, name = method.__self__, method.__name__
    arg = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill"):
        refuse_over(max(len(s), _int(kwargs.get("width", arg))), f"a str.{name} result")
    elif name == "expandtabs":
        tab = _int(kwargs.get("tabsize", 8 if arg is None else arg))
        refuse_over(len(s) + s.count("\t") * tab, "a str.expandtabs result")
    elif name == "replace" and len(args) >= 2:
        refuse_over(_replace_size(s, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count")), "a text")
    elif name == "join" and args:
        items = arg if isinstance(arg, (list, tuple)) else materialize(arg)
        refuse_over(_join_size(s, items), "a joined text")
        args = (items, *args[1:])
    elif name == "translate" and isinstance(arg, dict):
        longest = max((len(v) for v in arg.values() if isinstance(v, str)), default=1)
        refuse_over(len(s) * max(longest, 1), "a str.translate result")
    return args


def _filter_check(name: str, a: dict[str, Any]) -> None:
    """Pre-checks for the filters that take a width or a count; `a` holds the filter's bound arguments."""
    if name == "center":
        refuse_over(max(weight(a["value"]), _int(a["width"])), "a centred text")
    elif name == "indent":
        s, width = a["s"], a["width"]
        pad = len(width) if isinstance(width, str) else _int(width)
        lines = s.count("\n") + 1 if isinstance(s, str) else 1
        refuse_over(weight(s) + lines * pad, "an indented text")
    elif name == "wordwrap":
        wrap = a["wrapstring"]
        refuse_over(weight(a["s"]) * (1 + (len(wrap) if isinstance(wrap, str) else 1)), "a wrapped text")
    elif name == "replace":
        s = a["s"]
        if isinstance(s, str):
            refuse_over(_replace_size(s, a["old"], a["new"], a["count"]), "a text")
    elif name == "format":
        refuse_over(percent_size(str(a["value"]), a["kwargs"] or a["args"]), "a formatted text")
    elif name == "urlize":
        value = a["value"] if isinstance(a["value"], str) else ""
        extra = sum(len(x) for x in (a["target"], a["rel"]) if isinstance(x, str)) + 64
        refuse_over(3 * len(value) + len(value.split()) * extra, "a urlized text")
    elif name in ("batch", "slice"):
        count = _int(a["linecount" if name == "batch" else "slices"])
        if count > MAX_RANGE:
            raise TemplateError(f"the chat template asked {name} for {count:,} lists (cap {MAX_RANGE:,})")
        if a["fill_with"] is not None:
            refuse_over(count * weight(a["fill_with"]), f"a {name} result")


def join_filter(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None, *, _base: Callable[..., str]) -> str:
    items = value if isinstance(value, (list, tuple)) else materialize(value)
    refuse_over(_join_size(str(d), items), "a joined text")
    return _base(eval_ctx, items, d, attribute)


def sum_filter(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """`sum` that adds lists in linear time and under the cap (builtin sum() over lists copies the running
    total at every step, inside one C call that no deadline can stop)."""
    from jinja2.filters import make_attrgetter

    items = materialize(iterable)
    if attribute is not None:
        getter = make_attrgetter(environment, attribute)
        items = [getter(x) for x in items]
    if isinstance(start, (str, bytes)):
        raise TypeError("sum() can't sum strings")
    if isinstance(start, (list, tuple)):
        refuse_over(weight(start) + sum(weight(x) for x in items), "a sum of lists")
        out = list(start)
        for item in items:
            if type(item) is not type(start):
                raise TypeError(f"can only concatenate {type(start).__name__} (not {type(item).__name__})")
            out.extend(item)
        return out if isinstance(start, list) else tuple(out)
    total = start
    for item in items:
        total = total + item
    return total


_UNCHECKED_FILTERS = frozenset(
    # Filters that never print their input or multiply it: skipping the argument walk keeps loops such
    # as `{% if loop.index0 == messages|length - 1 %}` linear in the number of messages.
    "abs attr count d default dictsort first float groupby int items last length list map max min random "
    "reject rejectattr reverse round select selectattr sort unique".split()
)


def guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    checks_args = name not in _UNCHECKED_FILTERS
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None
    # Jinja's async-variant filters (slice, sum, list, …) take an eval context their wrapped
    # function's signature does not show; drop it before binding.
    hidden = int(hasattr(func, "jinja_pass_arg") and not hasattr(inspect.unwrap(func), "jinja_pass_arg"))

    @functools.wraps(func)  # keeps jinja_pass_arg, so context-taking filters still get it
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_time()
        if checks_args:
            for arg in (*args, *kwargs.values()):
                if not isinstance(arg, str):  # a string's size is checked by whoever made it
                    weight(arg)
            if signature is not None:
                bound = signature.bind(*args[hidden:], **kwargs)
                bound.apply_defaults()
                _filter_check(name, bound.arguments)
        return check_size(func(*args, **kwargs))

    return wrapper


# --- globals -----------------------------------------------------------------------------------------


def guarded_range(*args: int) -> Guarded:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise TemplateError(f"the chat template asked for range() with {len(rng):,} items (cap {MAX_RANGE:,})")
    return Guarded(rng)
