"""What a chat template's string operations and filters would build, sized before they run (security.md
T2): `%` and str.format with their widths, str methods and filters that take a width or a count, `join` and
`sum` over what an iterable holds. Each check refuses through jinja_limits' cap; jinja_sandbox.py wires them in.
"""

from __future__ import annotations

import functools
import inspect
import re
import string
from collections.abc import Callable
from typing import Any

from app.core.engines.chat_templates.jinja_limits import (
    MAX_RANGE,
    TemplateError,
    check_size,
    check_time,
    materialize,
    refuse_over,
    weight,
)

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
