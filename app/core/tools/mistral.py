"""Mistral: a [TOOL_CALLS] control token, then either a JSON list (older tokenizers, the list may
carry ids) or name[ARGS]{…} per call (newer ones; [CALL_ID]id before [ARGS] where a tokenizer has it).

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}
"""

from __future__ import annotations

import secrets
import string
from typing import ClassVar

from app.core.tools.grammar import Grammar, literal
from app.core.tools.hermes import call_from_object
from app.core.tools.scanner import FAIL, PENDING, BlockResult, Done, Family, RawCall, Schemas
from app.core.tools.spec import FunctionSpec
from app.core.tools.textscan import INCOMPLETE, INVALID, NAME_RE, expect, json_end, load_json, skip_ws

__all__ = ["ARGS", "CALL_ID", "TOOL_CALLS", "MistralFamily"]

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_NAME_CHARS = set(string.ascii_letters + string.digits + "_.-")
_ALNUM = string.ascii_letters + string.digits


class MistralFamily(Family):
    name: ClassVar[str] = "mistral"
    openers: ClassVar[tuple[str, ...]] = (TOOL_CALLS,)

    def new_id(self) -> str:
        # Mistral's templates refuse tool_call ids that are not 9 letters/digits when they come back.
        return "".join(secrets.choice(_ALNUM) for _ in range(9))

    def parse_block(self, text: str, opener: str, final: bool, schemas: Schemas) -> BlockResult:
        pos = skip_ws(text, len(opener))
        if pos >= len(text):
            return FAIL if final else PENDING
        if text[pos] == "[":
            return self._list(text, pos, final)
        return self._named(text, pos, final)

    @staticmethod
    def _list(text: str, pos: int, final: bool) -> BlockResult:
        end = json_end(text, pos)
        if end == INVALID or (end == INCOMPLETE and final):
            return FAIL
        if end == INCOMPLETE:
            return PENDING
        items = load_json(text[pos:end])
        calls = [call_from_object(item) for item in items] if isinstance(items, list) else []
        if not calls or any(c is None for c in calls):
            return FAIL
        return Done(end, tuple(c for c in calls if c is not None))

    @staticmethod
    def _named(text: str, pos: int, final: bool) -> BlockResult:
        i = pos
        while i < len(text) and text[i] in _NAME_CHARS:
            i += 1
        name = text[pos:i]
        if i >= len(text):
            return FAIL if final else PENDING
        call_id = None
        after = expect(text, i, ARGS)
        if after == INVALID:
            id_at = expect(text, i, CALL_ID)
            if id_at == INVALID:
                return FAIL
            if id_at == INCOMPLETE:
                return FAIL if final else PENDING
            j = id_at
            while j < len(text) and text[j] in _NAME_CHARS:
                j += 1
            call_id = text[id_at:j]
            after = expect(text, j, ARGS)
        if after == INVALID or not NAME_RE.fullmatch(name):
            return FAIL
        if after == INCOMPLETE:
            return FAIL if final else PENDING
        start = skip_ws(text, after)
        end = json_end(text, start)
        if end == INVALID or (end == INCOMPLETE and final):
            return FAIL
        if end == INCOMPLETE:
            return PENDING
        args = load_json(text[start:end])
        if not isinstance(args, dict):
            return FAIL
        return Done(end, (RawCall(name, args, call_id or None),))

    def grammar(self, specs: list[FunctionSpec], *, parallel: bool, variant: str = "") -> str:
        """`variant` "args" for the name[ARGS]{…} form, else the JSON list form."""
        g = Grammar()
        alternatives = []
        for i, spec in enumerate(specs):
            args = g.schema(spec.parameters, f"t{i}-", spec.name)
            if variant == "args":
                alternatives.append(g.rule(f"fn{i}", f"{literal(spec.name + ARGS)} {args}"))
            else:
                head = literal(f'{{"name": "{spec.name}", "arguments": ')
                alternatives.append(g.rule(f"fn{i}", f"{head} {args} {literal('}')}"))
        calls = "(" + " | ".join(alternatives) + ")"
        if variant == "args":
            g.rule("call", f"{literal(TOOL_CALLS)} {calls}")
            g.forced("call", separator='""', parallel=parallel)
        else:
            g.rule("call", calls)
            body = "call (" + literal(", ") + " call)*" if parallel else "call"
            g.rule("root", f"{literal(TOOL_CALLS + '[')} {body} {literal(']')}")
        return g.text()
