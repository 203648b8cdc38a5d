"""Llama 3.1–3.3 JSON tool calling: the whole reply is the call(s), optionally after <|python_tag|>.

    {"name": "get_weather", "parameters": {"city": "Paris"}}
    <|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {}}

A reply that starts with "{" is held back until its first key rules it in or out, or it closes;
only objects shaped exactly like a call count, so a JSON answer stays an answer.
"""

from __future__ import annotations

from typing import ClassVar

from app.core.tools.grammar import Grammar, literal
from app.core.tools.hermes import call_from_object
from app.core.tools.scanner import FAIL, PENDING, BlockResult, Done, Family, RawCall, Schemas
from app.core.tools.spec import FunctionSpec
from app.core.tools.textscan import INCOMPLETE, INVALID, json_end, load_json, skip_ws

__all__ = ["PYTHON_TAG", "Llama3Family"]

PYTHON_TAG = "<|python_tag|>"
_FIRST_KEYS = ("name", "parameters", "arguments", "type", "function")


def _first_key_ok(text: str, pos: int) -> bool | None:
    """Can the object at `pos` be a call, judging by its first key? None: not known yet."""
    i = skip_ws(text, pos + 1)
    if i >= len(text):
        return None
    if text[i] != '"':
        return False
    end = text.find('"', i + 1)
    if end < 0:
        key = text[i + 1 :]
        return None if any(k.startswith(key) for k in _FIRST_KEYS) else False
    return text[i + 1 : end] in _FIRST_KEYS


class Llama3Family(Family):
    name: ClassVar[str] = "llama3"
    openers: ClassVar[tuple[str, ...]] = (PYTHON_TAG,)
    start_openers: ClassVar[tuple[str, ...]] = ("{",)

    def parse_block(self, text: str, opener: str, final: bool, schemas: Schemas) -> BlockResult:
        pos = skip_ws(text, len(opener)) if opener == PYTHON_TAG else 0
        calls: list[RawCall] = []
        end_of_calls = 0
        while True:
            if pos >= len(text):
                if not calls:
                    return FAIL if final else PENDING
                return Done(end_of_calls, tuple(calls)) if final else PENDING
            if text[pos] != "{":
                return Done(end_of_calls, tuple(calls)) if calls else FAIL
            first = _first_key_ok(text, pos)
            end = json_end(text, pos)
            if first is False or end == INVALID or (end == INCOMPLETE and final):
                return Done(end_of_calls, tuple(calls)) if calls else FAIL
            if end == INCOMPLETE:
                return PENDING
            call = call_from_object(load_json(text[pos:end]), strict=True)
            if call is None:
                return Done(end_of_calls, tuple(calls)) if calls else FAIL
            calls.append(call)
            end_of_calls = end
            # Several calls are separated by ";".
            nxt = skip_ws(text, end)
            if nxt >= len(text):
                return Done(end_of_calls, tuple(calls)) if final else PENDING
            if text[nxt] != ";":
                return Done(end_of_calls, tuple(calls))
            pos = skip_ws(text, nxt + 1)
            if pos >= len(text) and final:
                return Done(nxt + 1, tuple(calls))  # a trailing ";" belongs to the calls

    def grammar(self, specs: list[FunctionSpec], *, parallel: bool, variant: str = "") -> str:
        g = Grammar()
        alternatives = []
        for i, spec in enumerate(specs):
            args = g.schema(spec.parameters, f"t{i}-", spec.name)
            head = literal(f'{{"name": "{spec.name}", "parameters": ')
            alternatives.append(g.rule(f"fn{i}", f"{head} {args} {literal('}')}"))
        g.rule("call", "(" + " | ".join(alternatives) + ")")
        g.forced("call", separator=literal("; "), parallel=parallel)
        return g.text()
