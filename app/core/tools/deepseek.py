"""DeepSeek V3 / R1 and V3.1: calls between full-width-bar markers (｜ U+FF5C, ▁ U+2581).

V3 and R1 write the type, the name and a ```json fence; V3.1 writes the name and bare JSON:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}
    <｜tool▁call▁end｜><｜tool▁calls▁end｜>        (one line in the output)
"""

from __future__ import annotations

from typing import ClassVar

from app.core.tools.grammar import Grammar, literal
from app.core.tools.scanner import FAIL, PENDING, BlockResult, Done, Family, RawCall, Schemas
from app.core.tools.spec import FunctionSpec
from app.core.tools.textscan import INCOMPLETE, INVALID, NAME_RE, expect, load_json, skip_ws

__all__ = ["CALLS_BEGIN", "CALLS_END", "CALL_BEGIN", "CALL_END", "SEP", "DeepSeekFamily"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def _call(head: str, body: str) -> RawCall | None:
    """One call from the text before and after <｜tool▁sep｜>."""
    head = head.strip()
    if head == "function":  # V3/R1: the type, then name, then a ```json fence
        name, _, rest = body.partition("\n")
        rest = rest.strip()
        if rest.startswith("```"):
            rest = rest[3:].removeprefix("json").strip()
            rest = rest.removesuffix("```").strip()
    else:  # V3.1: the name, then bare JSON
        name, rest = head, body.strip()
    args = load_json(rest)
    name = name.strip()
    if not NAME_RE.fullmatch(name) or not isinstance(args, dict):
        return None
    return RawCall(name, args)


class DeepSeekFamily(Family):
    name: ClassVar[str] = "deepseek"
    openers: ClassVar[tuple[str, ...]] = (CALLS_BEGIN,)

    def parse_block(self, text: str, opener: str, final: bool, schemas: Schemas) -> BlockResult:
        calls: list[RawCall] = []
        pos = len(opener)
        while True:
            pos = skip_ws(text, pos)
            if pos >= len(text):
                # A model may stop (end of sequence) without the closing marker.
                return (Done(pos, tuple(calls)) if calls else FAIL) if final else PENDING
            end_all = expect(text, pos, CALLS_END)
            if end_all >= 0:
                return Done(end_all, tuple(calls)) if calls else FAIL
            begin = expect(text, pos, CALL_BEGIN)
            if begin == INVALID and end_all == INVALID:
                return Done(pos, tuple(calls)) if calls else FAIL
            if begin == INCOMPLETE or end_all == INCOMPLETE:
                if final:
                    return Done(pos, tuple(calls)) if calls else FAIL
                return PENDING
            sep = text.find(SEP, begin)
            close = text.find(CALL_END, begin)
            if close < 0:
                if final:
                    return Done(pos, tuple(calls)) if calls else FAIL
                return PENDING
            if sep < 0 or sep > close:
                return Done(pos, tuple(calls)) if calls else FAIL
            call = _call(text[begin:sep], text[sep + len(SEP) : close])
            if call is None:
                return Done(pos, tuple(calls)) if calls else FAIL
            calls.append(call)
            pos = close + len(CALL_END)

    def grammar(self, specs: list[FunctionSpec], *, parallel: bool, variant: str = "") -> str:
        """`variant` "v3.1" for name<｜tool▁sep｜>{…}, else V3's function<｜tool▁sep｜>name + ```json fence."""
        g = Grammar()
        alternatives = []
        for i, spec in enumerate(specs):
            args = g.schema(spec.parameters, f"t{i}-", spec.name)
            if variant == "v3.1":
                body = f"{literal(CALL_BEGIN + spec.name + SEP)} {args} {literal(CALL_END)}"
            else:
                head = literal(f"{CALL_BEGIN}function{SEP}{spec.name}\n```json\n")
                tail = literal("\n```" + CALL_END)
                body = f"{head} {args} {tail}"
            alternatives.append(g.rule(f"fn{i}", body))
        g.rule("call", "(" + " | ".join(alternatives) + ")")
        body = "call (" + literal("\n") + "? call)*" if parallel else "call"
        g.rule("root", f"{literal(CALLS_BEGIN)} {body} {literal(CALLS_END)}")
        return g.text()
