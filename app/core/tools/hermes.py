"""Hermes / Qwen2.5 / Qwen3: one JSON object per call inside <tool_call></tool_call>.

<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call>
"""

from __future__ import annotations

from typing import Any, ClassVar

from app.core.tools.grammar import Grammar, literal
from app.core.tools.scanner import FAIL, PENDING, BlockResult, Done, Family, RawCall, Schemas
from app.core.tools.spec import FunctionSpec
from app.core.tools.textscan import load_arguments, load_json, skip_ws

__all__ = ["CLOSE", "OPEN", "HermesFamily", "TaggedFamily", "call_from_object"]

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


def call_from_object(obj: Any, *, strict: bool = False) -> RawCall | None:
    """{"name", "arguments"|"parameters"} (or that wrapped as {"type": "function", "function": {...}}).

    `strict` (for formats whose only sign of a call is a bare JSON object) also requires the
    arguments key and allows no keys beyond name/arguments/parameters/type/id.
    """
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = {**obj["function"], **({"id": obj["id"]} if "id" in obj else {})}
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 256:
        return None
    key = "arguments" if "arguments" in obj else "parameters"
    if strict and (key not in obj or set(obj) - {"name", "arguments", "parameters", "type", "id"}):
        return None
    arguments = load_arguments(obj.get(key))
    if arguments is None:
        return None
    call_id = obj.get("id")
    return RawCall(name.strip(), arguments, call_id if isinstance(call_id, str) else None)


class TaggedFamily(Family):
    """Calls wrapped in <tool_call>…</tool_call>; subclasses say how the body reads."""

    openers: ClassVar[tuple[str, ...]] = (OPEN,)
    body_starts: ClassVar[str] = "{["

    def parse_body(self, body: str, schemas: Schemas) -> list[RawCall] | None:
        raise NotImplementedError

    def parse_block(self, text: str, opener: str, final: bool, schemas: Schemas) -> BlockResult:
        start = len(opener)
        pos = skip_ws(text, start)
        if pos < len(text) and text[pos] not in self.body_starts:
            return FAIL  # prose that mentions the tag, ruled out at its first character
        end = text.find(CLOSE, start)
        if end < 0:
            return FAIL if final else PENDING
        calls = self.parse_body(text[start:end].strip(), schemas)
        return Done(end + len(CLOSE), tuple(calls)) if calls else FAIL


def parse_json_body(body: str) -> list[RawCall] | None:
    value = load_json(body)
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


class HermesFamily(TaggedFamily):
    name: ClassVar[str] = "hermes"

    def parse_body(self, body: str, schemas: Schemas) -> list[RawCall] | None:
        return parse_json_body(body)

    def grammar(self, specs: list[FunctionSpec], *, parallel: bool, variant: str = "") -> str:
        g = Grammar()
        alternatives = []
        for i, spec in enumerate(specs):
            args = g.schema(spec.parameters, f"t{i}-", spec.name)
            head = literal(f'{{"name": "{spec.name}", "arguments": ')
            alternatives.append(g.rule(f"fn{i}", f"{head} {args}"))
        call = literal(OPEN + "\n") + " (" + " | ".join(alternatives) + ") " + literal("}\n" + CLOSE)
        g.rule("call", call)
        g.forced("call", separator=literal("\n"), parallel=parallel)
        return g.text()
