"""Qwen3-Coder (and GLM-style XML templates): a function element with raw-text parameters.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Parameter values are raw text; the tool's JSON schema says what they become (numbers, booleans,
objects/arrays written as JSON); without a schema they stay strings.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from app.core.tools.grammar import Grammar, literal
from app.core.tools.hermes import CLOSE, OPEN, TaggedFamily, parse_json_body
from app.core.tools.scanner import RawCall, Schemas
from app.core.tools.spec import FunctionSpec
from app.core.tools.textscan import load_json, skip_ws

__all__ = ["Qwen3CoderFamily", "coerce_value"]

_FN_OPEN, _FN_CLOSE = "<function=", "</function>"
_P_OPEN, _P_CLOSE = "<parameter=", "</parameter>"
_JSON_TYPES = ("null", "boolean", "integer", "number", "object", "array")


def _types(schema: dict[str, Any] | None) -> list[str]:
    if not schema:
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    return []


def coerce_value(raw: str, schema: dict[str, Any] | None) -> Any:
    """Raw parameter text → a JSON value by the property's schema; strings when unsure."""
    kinds = _types(schema)
    if not kinds or "string" in kinds:
        return raw
    text = raw.strip()
    for kind in kinds:
        if kind == "null" and text == "null":
            return None
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind == "integer":
            try:
                return int(text)
            except ValueError:
                pass
        if kind == "number":
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
        if kind in ("object", "array"):
            value = load_json(text)
            if isinstance(value, dict if kind == "object" else list):
                return value
    return raw


def _value_end(body: str, start: int) -> tuple[int, int]:
    """(end of the value, where parsing goes on): at </parameter>, or where the next tag starts."""
    close = body.find(_P_CLOSE, start)
    others = [i for i in (body.find(_P_OPEN, start), body.find(_FN_CLOSE, start)) if i >= 0]
    nxt = min(others) if others else -1
    if close >= 0 and (nxt < 0 or close < nxt):
        return close, close + len(_P_CLOSE)
    if nxt >= 0:  # a model that forgot </parameter>
        return nxt, nxt
    return -1, -1


def _strip_newline(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def parse_xml_body(body: str, schemas: Schemas) -> list[RawCall] | None:
    calls: list[RawCall] = []
    pos = skip_ws(body, 0)
    while pos < len(body):
        if not body.startswith(_FN_OPEN, pos):
            return None
        gt = body.find(">", pos)
        if gt < 0:
            return None
        name = body[pos + len(_FN_OPEN) : gt].strip()
        if not name or "\n" in name:
            return None
        schema = schemas.get(name) or {}
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        args: dict[str, Any] = {}
        pos = skip_ws(body, gt + 1)
        while body.startswith(_P_OPEN, pos):
            gt = body.find(">", pos)
            if gt < 0:
                return None
            key = body[pos + len(_P_OPEN) : gt].strip()
            end, after = _value_end(body, gt + 1)
            if not key or end < 0:
                return None
            prop = props.get(key) if isinstance(props, dict) else None
            args[key] = coerce_value(_strip_newline(body[gt + 1 : end]), prop if isinstance(prop, dict) else None)
            pos = skip_ws(body, after)
        if not body.startswith(_FN_CLOSE, pos):
            return None
        calls.append(RawCall(name, args))
        pos = skip_ws(body, pos + len(_FN_CLOSE))
    return calls or None


class Qwen3CoderFamily(TaggedFamily):
    name: ClassVar[str] = "qwen3_coder"
    body_starts: ClassVar[str] = "<{["

    def parse_body(self, body: str, schemas: Schemas) -> list[RawCall] | None:
        return parse_json_body(body) if body[:1] in "{[" else parse_xml_body(body, schemas)

    def grammar(self, specs: list[FunctionSpec], *, parallel: bool, variant: str = "") -> str:
        g = Grammar()
        g.rule("raw-text", '([^<] | "<" [^/<])*')  # a raw value may not contain "</"
        alternatives = []
        for i, spec in enumerate(specs):
            params = [self._param_rule(g, spec, key, f"t{i}-p{j}-") for j, key in enumerate(_ordered(spec))]
            body = " ".join([literal(f"{_FN_OPEN}{spec.name}>\n"), *params, literal(_FN_CLOSE + "\n")])
            alternatives.append(g.rule(f"fn{i}", body))
        g.rule("call", literal(OPEN + "\n") + " (" + " | ".join(alternatives) + ") " + literal(CLOSE))
        g.forced("call", separator=literal("\n"), parallel=parallel)
        return g.text()

    @staticmethod
    def _param_rule(g: Grammar, spec: FunctionSpec, key: str, prefix: str) -> str:
        schema = spec.property_schema(key) or {}
        kinds = _types(schema)
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            value = "(" + " | ".join(literal(v) for v in enum) + ")"
        elif kinds and "string" not in kinds and all(k in _JSON_TYPES for k in kinds):
            value = g.schema(schema, prefix, spec.name)
        else:
            value = "raw-text"
        opening, closing = literal(f"{_P_OPEN}{key}>\n"), literal(f"\n{_P_CLOSE}\n")
        rule = g.rule(prefix + "param", f"{opening} {value} {closing}")
        required = (spec.parameters or {}).get("required") or []
        return rule if key in required else rule + "?"


def _ordered(spec: FunctionSpec) -> list[str]:
    """Required parameters first (schema order), then the optional ones."""
    props = (spec.parameters or {}).get("properties")
    keys = list(props) if isinstance(props, dict) else []
    required = set((spec.parameters or {}).get("required") or [])
    return [k for k in keys if k in required] + [k for k in keys if k not in required]
