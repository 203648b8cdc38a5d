"""The sandbox chat templates run in (security.md T1, T2): a hardened `ImmutableSandboxedEnvironment`,
a wall-clock budget and a size cap. Nothing here knows about messages; render.py does.

Both limits are enforced where the work happens, not only when output comes out:
- time: every for-loop iteration (the code generator wraps each loop's iterable), every call, filter,
  attribute and item access, and every `range` step checks the deadline;
- size: every operation that can build a large string or list from a small template computes the size
  of what it would build *before* building it and refuses anything over `max_chars`: `*`, `+`, `%`, `~`,
  `str.format`, the str methods and filters that take a width or a count, `join`, `sum`, and every output
  buffer (macros, `{% set %}` blocks, `{% call %}`, recursive loops) as it grows.

The limits themselves (what is checked, and how sizes are worked out before building) are in
jinja_limits.py, with their residual risk.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from app.core.engines.chat_templates.jinja_limits import (
    BUDGET,
    DEFAULT_MAX_CHARS,
    MAX_POWER_BITS,
    MAX_RANGE,
    Budget,
    Guarded,
    OutputBuffer,
    OutputTooLarge,
    TemplateError,
    check_size,
    check_time,
    concat,
    finalize,
    guarded_range,
    refuse_over,
    tilde,
    weight,
)
from app.core.engines.chat_templates.jinja_ops import (
    brace_size,
    guard_filter,
    join_filter,
    percent_size,
    str_method_call,
    sum_filter,
)

__all__ = ["DEFAULT_MAX_CHARS", "MAX_POWER_BITS", "MAX_RANGE", "Budget", "TemplateError", "environment", "render"]


def _raise_exception(message: Any) -> None:
    refuse_over(weight(message), "an error message")
    raise TemplateError(f"the chat template refused the conversation: {str(message)[:2000]}")


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


# --- the environment ---------------------------------------------------------------------------------


def _make_environment():
    import jinja2.exceptions
    import jinja2.ext
    from jinja2.compiler import CodeGenerator, optimizeconst
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _GenerationTag(jinja2.ext.Extension):
        """HF's `{% generation %}` marks assistant spans for training; render its body as is."""

        tags = {"generation"}  # noqa: RUF012 (jinja2 reads the tags this extension handles from the class)

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class BudgetCodeGenerator(CodeGenerator):
        """Compiles the three places the sandbox's operator hooks cannot see: the iterable of every
        `for` (Jinja compiles it to a plain Python `for`), `~` and output buffers."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._loop_iters: dict[int, Any] = {}  # id → node (kept so the id stays unique)

        def visit_For(self, node, frame):  # noqa: N802 (jinja's visitor naming)
            # Both the plain and the recursive form emit node.iter through visit(), so marking it
            # covers them; `loop(…)` inside a recursive loop is wrapped in the sandbox's call().
            self._loop_iters[id(node.iter)] = node.iter
            super().visit_For(node, frame)

        def visit(self, node, *args, **kwargs):
            if id(node) in self._loop_iters and self._loop_iters[id(node)] is node:
                self.write("environment.guarded(")
                super().visit(node, *args, **kwargs)
                self.write(")")
                return None
            return super().visit(node, *args, **kwargs)

        @optimizeconst
        def visit_Concat(self, node, frame):  # noqa: N802 (jinja's visitor naming)
            self.write("environment.tilde((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

        def buffer(self, frame):
            frame.buffer = self.temporary_identifier()
            self.writeline(f"{frame.buffer} = environment.budget_buffer()")

    class HearthSandbox(ImmutableSandboxedEnvironment):
        code_generator_class = BudgetCodeGenerator
        # `%` is intercepted so it is also never folded while compiling, outside any budget.
        intercepted_binops = frozenset({"*", "**", "+", "%"})
        concat = staticmethod(concat)
        guarded = staticmethod(Guarded)
        tilde = staticmethod(tilde)
        budget_buffer = OutputBuffer

        def call_binop(self, context, operator, left, right):
            check_time()
            if operator == "**":
                if (
                    isinstance(left, int)
                    and isinstance(right, int)
                    and right > 0
                    and abs(left) > 1
                    and right * max(abs(left).bit_length(), 1) > MAX_POWER_BITS
                ):
                    raise TemplateError("the chat template computed a number too large to allow")
            elif operator == "*":
                ints = isinstance(left, int) and isinstance(right, int)
                if ints and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
                    raise TemplateError("the chat template computed a number too large to allow")
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and n > 1:
                        refuse_over(weight(seq) * n, "a repeated value")
            elif operator == "+":
                if isinstance(left, str) and isinstance(right, str):
                    refuse_over(len(left) + len(right), "a `+` result")
                elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                    refuse_over(weight(left) + weight(right), "a `+` result")
            elif operator == "%" and isinstance(left, str):
                refuse_over(percent_size(left, right), "a %-formatted text")
            return check_size(super().call_binop(context, operator, left, right))

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (mirrors jinja's signature)
            check_time()
            if isinstance(__obj, LoopContext) and args:  # `loop(children)` in a recursive loop
                args = (Guarded(args[0]), *args[1:])
            elif isinstance(getattr(__obj, "__self__", None), str) and callable(__obj):
                args = str_method_call(__obj, args, kwargs)
            return check_size(super().call(__context, __obj, *args, **kwargs))

        def wrap_str_format(self, value):
            # Jinja hands out a sandboxed str.format at attribute access; size it before it formats.
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            fmt, is_map = value.__self__, value.__name__ == "format_map"

            def checked(*args, **kwargs):
                check_time()
                mapping = args[0] if is_map and args and isinstance(args[0], dict) else {}
                refuse_over(brace_size(fmt, () if is_map else args, mapping or kwargs), "a formatted text")
                return wrapped(*args, **kwargs)

            return functools.update_wrapper(checked, wrapped)

        def unsafe_undefined(self, obj, attribute):
            # Jinja returns a silent Undefined here; a hostile template should fail loudly instead.
            raise jinja2.exceptions.SecurityError(
                f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
            )

        def getattr(self, obj, attribute):
            check_time()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            check_time()
            return super().getitem(obj, argument)

    env = HearthSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, _GenerationTag],
        finalize=finalize,
    )
    for name in ("lipsum", "cycler", "joiner"):  # lipsum(10**7) is one long uninterruptible call
        env.globals.pop(name, None)
    env.globals.update(range=guarded_range, raise_exception=_raise_exception, strftime_now=_strftime_now)
    base_attr = env.filters["attr"]

    def safe_attr(environment, obj, name):
        if not isinstance(name, str) or name.startswith("_") or name in ("format", "format_map"):
            raise jinja2.exceptions.SecurityError(f"|attr({name!r}) is not allowed in chat templates")
        return base_attr(environment, obj, name)

    env.filters["attr"] = functools.update_wrapper(safe_attr, base_attr)
    env.filters["tojson"] = _tojson
    env.filters["join"] = functools.update_wrapper(
        functools.partial(join_filter, _base=env.filters["join"]), env.filters["join"]
    )
    env.filters["sum"] = jinja2.pass_environment(sum_filter)
    env.filters = {name: guard_filter(name, f) for name, f in env.filters.items()}
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

    token = BUDGET.set(budget)
    try:
        compiled = _compile(template)
        pieces: list[str] = []
        size = 0
        for piece in compiled.generate(**context):
            size += len(piece)
            if size > budget.max_chars:
                raise OutputTooLarge(f"the chat template output passed the {budget.max_chars:,}-character cap")
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
        BUDGET.reset(token)
