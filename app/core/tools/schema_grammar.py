"""A JSON schema → GBNF for llama.cpp, bounded on both sides (threat T38 in docs/security.md).

The schema is checked first (schema_limits). The conversion is llama-cpp-python's converter (imported
lazily) with one change: string lengths and item counts are written as llama.cpp's `{m,n}` repetition,
which its parser expands into flat rules, where the converter writes `n` nested groups that llama.cpp's
recursive parser descends one stack frame pair at a time (`maxLength` 20,000 overflowed the engine
thread's stack). The grammar that comes out is bounded in size and nesting, so the same checks guard a
GBNF grammar from anywhere.
"""

from __future__ import annotations

import copy
from typing import Any

from app.core.tools.schema_limits import SchemaTooComplex, check_schema, ref_target
from app.core.tools.types import ToolError

__all__ = [
    "MAX_GRAMMAR_CHARS",
    "MAX_GRAMMAR_NESTING",
    "check_gbnf",
    "expand_shorthands",
    "gbnf_nesting",
    "schema_to_gbnf",
]

# The grammar text llama.cpp parses on the engine thread: ~1 ms per 100 KB here, and the largest schema
# the limits allow stays well under it.
MAX_GRAMMAR_CHARS = 512 * 1024
# Groups inside groups: llama.cpp's parser recurses once per level. Schemas stay under ~140 levels (a
# pattern's 100 repetitions plus its 32 groups); the engine thread's stack (runtime.host.ENGINE_STACK_BYTES)
# parses 256 levels with room to spare even at a sixteenth of its size (tests/core/tools/test_schema_grammar.py).
MAX_GRAMMAR_NESTING = 256


def gbnf_nesting(gbnf: str) -> int:
    """The deepest parenthesis nesting in `gbnf`, skipping literals, character classes and comments."""
    depth = deepest = 0
    i, n = 0, len(gbnf)
    while i < n:
        ch = gbnf[i]
        if ch in '"[':
            close = '"' if ch == '"' else "]"
            i += 1
            while i < n and gbnf[i] != close:
                i += 2 if gbnf[i] == "\\" else 1
        elif ch == "#":
            end = gbnf.find("\n", i)
            i = n if end < 0 else end
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
        i += 1
    return deepest


def check_gbnf(gbnf: str, param: str = "grammar") -> None:
    """Raise SchemaTooComplex when a grammar is too large or nests too deep for the engine thread."""
    if len(gbnf) > MAX_GRAMMAR_CHARS:
        raise SchemaTooComplex(
            f"the grammar made from {param} is {len(gbnf):,} characters, over the {MAX_GRAMMAR_CHARS:,} allowed",
            param,
        )
    nesting = gbnf_nesting(gbnf)
    if nesting > MAX_GRAMMAR_NESTING:
        raise SchemaTooComplex(
            f"the grammar made from {param} nests {nesting} groups deep, over the {MAX_GRAMMAR_NESTING} allowed",
            param,
        )


def schema_to_gbnf(schema: Any, param: str = "schema") -> str:
    """GBNF for JSON text matching `schema`; raises SchemaTooComplex (a 400) for a schema past a bound or
    one the converter cannot express, ToolError when llama-cpp-python is missing."""
    check_schema(schema, param)
    converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        resolved = converter.resolve_refs(copy.deepcopy(schema), "input")
        converter.visit(resolved, "")
        gbnf = str(converter.format_grammar())
    except KeyError as exc:  # a $ref the converter cannot follow (it resolves no reference to a parent)
        why = f"the JSON schema at {param} has a reference that cannot be followed: {exc}"
        raise SchemaTooComplex(why, param) from exc
    except (AssertionError, ValueError, TypeError, IndexError, NotImplementedError, RecursionError) as exc:
        # What the converter cannot express (a lookahead, an unresolvable allOf...) is the client's to fix.
        raise SchemaTooComplex(f"the JSON schema at {param} cannot be turned into a grammar: {exc}", param) from exc
    check_gbnf(gbnf, param)
    return gbnf


def _plain(schema: dict[str, Any], kind: str) -> bool:
    """Whether the converter would reach its own length/items branch for `schema` (no earlier keyword wins)."""
    if any(k in schema for k in ("$ref", "oneOf", "anyOf", "allOf", "const", "enum")):
        return False
    if kind == "string":
        fmt = schema.get("format")
        return (
            schema.get("type") == "string"
            and "pattern" not in schema
            and fmt is None
            and ("minLength" in schema or "maxLength" in schema)
        )
    return (
        schema.get("type") == "array"
        and isinstance(schema.get("items"), dict)
        and ("maxItems" in schema or int(schema.get("minItems", 0)) > 1)
    )


# Regex shorthands the converter would copy into literals, where llama.cpp's parser rejects them.
_SHORTHANDS = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " \\t\\n\\r"}


def expand_shorthands(pattern: str) -> str:
    """`pattern` with \\d, \\w and \\s (and \\D, \\W, \\S outside a class) written as character classes."""
    out: list[str] = []
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt.lower() in _SHORTHANDS and (nxt.islower() or not in_class):
                chars = _SHORTHANDS[nxt.lower()]
                out.append(chars if in_class else f"[{'^' if nxt.isupper() else ''}{chars}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class and not (out and out[-1] in ("[", "[^")):
            in_class = False
        out.append(ch)
        i += 1
    return "".join(out)


# Keywords whose values are JSON data rather than subschemas.
_VALUES = frozenset({"const", "enum", "default", "examples"})


def _braces(low: int, high: int | None) -> str:
    return f"{{{low},}}" if high is None else f"{{{low},{high}}}"


def _converter_class() -> type:
    try:
        from app.core.native import import_native

        module = import_native("llama_cpp.llama_grammar")
    except Exception as exc:  # ImportError, or OSError from a broken native build
        raise ToolError(f"constrained output needs llama-cpp-python, which is not available here: {exc}") from exc

    class BoundedConverter(module.SchemaConverter):  # type: ignore[name-defined]
        """The converter, with lengths and item counts as `{m,n}` (see the module docstring)."""

        def visit(self, schema: dict[str, Any], name: str) -> str:
            rule_name = name + "-" if name in module.RESERVED_NAMES else name or "root"
            if _plain(schema, "string"):
                char = self._add_primitive("char", module.PRIMITIVE_RULES["char"])
                low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
                return str(self._add_rule(rule_name, f'"\\"" {char}{_braces(low, high)} "\\"" space'))
            if _plain(schema, "array"):
                item = self.visit(schema["items"], f"{name}{'-' if name else ''}item")
                low, high = int(schema.get("minItems", 0)), schema.get("maxItems")
                more = f'( "," space {item} )'
                if high == 0:
                    body = ""
                elif low == 0:
                    body = f"( {item} {more}{_braces(0, high - 1 if high is not None else None)} )?"
                else:
                    body = f"{item} {more}{_braces(low - 1, high - 1 if high is not None else None)}"
                return str(self._add_rule(rule_name, f'"[" space {body} "]" space'))
            return str(super().visit(schema, name))

        def _visit_pattern(self, pattern: str, name: str) -> str:
            return str(super()._visit_pattern(expand_shorthands(pattern), name))

        def resolve_refs(self, schema: dict[str, Any], url: str) -> dict[str, Any]:
            """Every `$ref` registered as the schema its chain ends at. The converter's own walk stops at a
            node holding a `$ref`, so the `$defs` beside a root `$ref` were never read and a chain
            (d0 → d1) or a recursion through them failed as "cannot be followed"."""
            finals: dict[str, tuple[str, Any]] = {}
            found: list[dict[str, Any]] = []
            stack: list[Any] = [schema]
            while stack:  # a loop, not recursion: the limits allow 5,000 subschemas
                node = stack.pop()
                if isinstance(node, dict):
                    if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
                        found.append(node)
                    # Values are data, not schemas: a `{"$ref": ...}` in a const stays as written.
                    stack.extend(v for k, v in node.items() if k not in _VALUES)
                elif isinstance(node, list):
                    stack.extend(node)
            self._ref_rules: dict[str, str] = {}
            self._ref_names: set[str] = set()
            self._ref_ends: dict[str, str] = {}
            # Every chain followed on the schema as sent, before any $ref in it is rewritten.
            ends = [ref_target(schema, node["$ref"], finals) for node in found]
            for node, (end, target) in zip(found, ends, strict=True):
                node["$ref"] = f"{url}{node['$ref']}"
                self._refs[node["$ref"]] = target
                self._ref_ends[node["$ref"]] = end
            return schema

        def _resolve_ref(self, ref: str) -> str:
            """The rule for the schema `ref` ends at, made once under a name of its own. The converter named
            it by the pointer's last part and reused any rule of that name, so a property called like a
            `$defs` entry took its place."""
            end = self._ref_ends.get(ref, ref)
            rule = self._ref_rules.get(end)
            if rule is None:
                base = module.INVALID_RULE_CHARS_RE.sub("-", end.split("/")[-1]) or "ref"
                rule, i = base, 0
                while rule in module.RESERVED_NAMES or rule in self._rules or rule in self._ref_names:
                    i += 1
                    rule = f"{base}-ref{i}"
                self._ref_names.add(rule)
                self._ref_rules[end] = rule  # before the visit, so a recursion back to it finds it
                self._ref_rules[end] = str(self.visit(self._refs[ref], rule))
                rule = self._ref_rules[end]
            return rule

    return BoundedConverter
