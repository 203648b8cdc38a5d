"""GBNF pieces for forced tool calls: literals, per-tool JSON-schema rules, the root.

The JSON part comes from schema_grammar (bounded, then llama-cpp-python's converter); each tool's rules
are renamed with a prefix so several schemas live in one grammar without clashing.
"""

from __future__ import annotations

import re
from typing import Any

from app.core.tools.schema_grammar import check_gbnf, schema_to_gbnf

__all__ = ["Grammar", "literal", "schema_rules"]

_RULE_DEF = re.compile(r"^([A-Za-z0-9_-]+)\s*::=", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """A GBNF string literal for `text` (non-ASCII stays as UTF-8, which llama.cpp reads)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _rename(gbnf: str, prefix: str) -> str:
    """Prefix every rule name (definitions and references), leaving literals and classes alone."""
    names = set(_RULE_DEF.findall(gbnf))
    out: list[str] = []
    i, n = 0, len(gbnf)
    while i < n:
        ch = gbnf[i]
        if ch in '"[':
            close = '"' if ch == '"' else "]"
            j = i + 1
            while j < n and gbnf[j] != close:
                j += 2 if gbnf[j] == "\\" else 1
            out.append(gbnf[i : j + 1])
            i = j + 1
        elif ch == "#":  # a comment runs to the end of the line
            j = gbnf.find("\n", i)
            j = n if j < 0 else j
            out.append(gbnf[i:j])
            i = j
        else:
            m = _IDENT.match(gbnf, i)
            if m is None:
                out.append(ch)
                i += 1
                continue
            word = m.group(0)
            out.append(prefix + word if word in names else word)
            i = m.end()
    return "".join(out)


def schema_rules(schema: dict[str, Any] | None, prefix: str, param: str = "tools") -> tuple[str, str]:
    """(rule name, rules) for JSON text matching `schema`; the name is `prefix` + "root". Raises
    SchemaTooComplex naming `param` for a schema past schema_limits' bounds."""
    if not schema:
        schema = {"type": "object"}  # arguments are always an object, even when no schema says so
    return prefix + "root", _rename(schema_to_gbnf(schema, param), prefix)


class Grammar:
    """Rules collected in order; `text()` puts `root` first."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._blocks: list[str] = []

    def rule(self, name: str, body: str) -> str:
        self._rules[name] = body
        return name

    def schema(self, schema: dict[str, Any] | None, prefix: str, tool: str = "") -> str:
        """The rules for one tool's arguments (`tool`, its name, for the error that names a bad schema)."""
        name, rules = schema_rules(schema, prefix, f"tools.{tool}.parameters" if tool else "tools")
        self._blocks.append(rules)
        return name

    def forced(self, call: str, *, separator: str, parallel: bool) -> str:
        """`root`: one call, or with `parallel` one or more separated by `separator` (a GBNF literal)."""
        return self.rule("root", f"{call} ({separator} {call})*" if parallel else call)

    def text(self) -> str:
        order = sorted(self._rules, key=lambda name: name != "root")
        lines = [f"{name} ::= {self._rules[name]}" for name in order]
        text = "\n".join(lines + self._blocks) + "\n"
        check_gbnf(text, "tools")  # several tools' schemas together can pass the bounds one by one
        return text
