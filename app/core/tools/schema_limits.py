"""Bounds a JSON schema must keep before it becomes a llama.cpp grammar (threat T38 in docs/security.md).

A schema reaches native code as grammar rules: llama.cpp parses them recursively on the engine thread
and checks every candidate token against every parser stack while sampling. Each bound below keeps one
of those costs small; a schema past one is refused with the field that broke it, before any native work.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.tools.pattern_shape import pattern_problem
from app.core.tools.types import ToolError

__all__ = ["LIMITS", "RefProblem", "SchemaTooComplex", "check_schema", "ref_target"]

# Why each number: nesting and node counts sit far above real schemas (OpenAI's structured outputs
# allow 10 levels and 5,000 properties); lengths and item counts become `{m,n}` repetitions, which
# llama.cpp expands into that many rules, so their sum is bounded too; enum and literal sizes bound
# the grammar's text.
LIMITS = {
    "depth": 32,  # nested subschemas
    "nodes": 5_000,  # subschemas in all
    "properties": 1_000,  # properties of one object
    "enum": 1_000,  # values of one enum
    "literal_chars": 100_000,  # property names, enum and const values together, as JSON
    "length": 10_000,  # minLength / maxLength
    "items": 1_000,  # minItems / maxItems / prefixItems
    "repetition_total": 20_000,  # the counts above, summed over the schema
}
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_COUNTS = (("minLength", "length"), ("maxLength", "length"), ("minItems", "items"), ("maxItems", "items"))
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


class SchemaTooComplex(ToolError):
    """A JSON schema past one of Hearth's bounds, or one no grammar can express; `param` names the field
    (an API prefixes its own path). Always the client's to fix: a 400."""

    code = "schema_too_complex"

    @property
    def details(self) -> dict[str, Any]:
        return {"param": self.param}


class RefProblem(ValueError):
    """A `$ref` that cannot be followed: outside the schema, pointing at nothing, or a loop of references."""


def _pointer(root: Any, ref: str) -> Any:
    """What the JSON pointer in `ref` (``#/a/b``) names in `root`; RefProblem when it names nothing."""
    target = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise RefProblem(f"{ref} points at nothing in the schema")
        target = target[part]
    return target


def ref_target(root: Any, ref: Any, memo: dict[str, tuple[str, Any]]) -> tuple[str, Any]:
    """The last reference of the chain `ref` starts, and the schema it names: a subschema that is itself
    only a `$ref` (its other keywords are ignored, as the converter ignores them) is followed on. A chain
    that comes back on itself names no schema at all: RefProblem. `memo` keeps each reference's answer,
    so following every reference in a schema stays linear in the schema's size."""
    path: list[str] = []
    on_path: set[str] = set()
    current = ref
    while True:
        # Only references inside the schema: a remote one would make Hearth fetch a URL a client chose.
        if not isinstance(current, str) or not current.startswith("#/"):
            via = f" ({ref} leads to {current!r})" if path else ""
            raise RefProblem(f"only references inside the schema (#/...) are allowed{via}")
        if current in memo:
            found = memo[current]
            break
        if current in on_path:
            loop = " → ".join([*path[path.index(current) :], current])
            raise RefProblem(f"the references {loop} loop with no schema between them")
        path.append(current)
        on_path.add(current)
        target = _pointer(root, current)
        if not (isinstance(target, dict) and "$ref" in target):
            found = (current, target)
            break
        current = target["$ref"]
    for seen in path:
        memo[seen] = found
    return found


class _Walk:
    def __init__(self, root: dict[str, Any], param: str) -> None:
        self.root = root
        self.param = param
        self.refs: dict[str, tuple[str, Any]] = {}
        self.nodes = 0
        self.literal_chars = 0
        self.repetition = 0

    def fail(self, path: str, why: str) -> SchemaTooComplex:
        field = f"{self.param}{path}"
        return SchemaTooComplex(f"the JSON schema at {field} cannot be used: {why}", field)

    def visit(self, node: Any, path: str, depth: int) -> None:
        if isinstance(node, bool):
            return  # `true` / `false` schemas
        if not isinstance(node, dict):
            raise self.fail(path, "a schema must be an object")
        self.nodes += 1
        if self.nodes > LIMITS["nodes"]:
            raise self.fail(path, f"the schema has more than {LIMITS['nodes']:,} subschemas")
        if depth > LIMITS["depth"]:
            raise self.fail(path, f"it nests more than {LIMITS['depth']} levels deep")
        self._keywords(node, path)
        for key in _SUBSCHEMA_LISTS:
            items = node.get(key)
            if items is not None:
                if not isinstance(items, list):
                    raise self.fail(f"{path}.{key}", "must be a list of schemas")
                for i, sub in enumerate(items):
                    self.visit(sub, f"{path}.{key}[{i}]", depth + 1)
        for key in _SUBSCHEMA_MAPS:
            props = node.get(key)
            if props is not None:
                if not isinstance(props, dict):
                    raise self.fail(f"{path}.{key}", "must be an object of schemas")
                if key == "properties" and len(props) > LIMITS["properties"]:
                    raise self.fail(f"{path}.{key}", f"more than {LIMITS['properties']:,} properties")
                for name, sub in props.items():
                    self.literal(path, name)
                    self.visit(sub, f"{path}.{key}.{name}", depth + 1)
        items = node.get("items")
        if isinstance(items, list):
            for i, sub in enumerate(items):
                self.visit(sub, f"{path}.items[{i}]", depth + 1)
        elif items is not None:
            self.visit(items, f"{path}.items", depth + 1)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            self.visit(extra, f"{path}.additionalProperties", depth + 1)

    def _keywords(self, node: dict[str, Any], path: str) -> None:
        kind = node.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
        for k in kinds:
            if k not in _TYPES:
                raise self.fail(f"{path}.type", f"{k!r} is not a JSON-schema type ({', '.join(sorted(_TYPES))})")
        ref = node.get("$ref")
        if ref is not None:
            self._ref(ref, f"{path}.$ref")
        if "enum" in node:
            values = node["enum"]
            if not isinstance(values, list) or not values:
                raise self.fail(f"{path}.enum", "must be a non-empty list")
            if len(values) > LIMITS["enum"]:
                raise self.fail(f"{path}.enum", f"{len(values):,} values, over the {LIMITS['enum']:,} allowed")
            for v in values:
                self.literal(f"{path}.enum", v)
        if "const" in node:
            self.literal(f"{path}.const", node["const"])
        for key, cap in _COUNTS:
            if key in node:
                self._count(node[key], f"{path}.{key}", LIMITS[cap])
        for key in ("minLength", "minItems"):
            upper = key.replace("min", "max")
            if isinstance(node.get(key), int) and isinstance(node.get(upper), int) and node[key] > node[upper]:
                raise self.fail(f"{path}.{key}", f"{key} is over {upper}, so no value can match")
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and len(prefix) > LIMITS["items"]:
            raise self.fail(f"{path}.prefixItems", f"more than {LIMITS['items']:,} items")
        pattern = node.get("pattern")
        if pattern is not None:
            why = pattern_problem(pattern) if isinstance(pattern, str) else "a pattern must be a string"
            if why:
                raise self.fail(f"{path}.pattern", why)

    def _count(self, value: Any, field: str, cap: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(field, "must be a whole number, 0 or more")
        if value > cap:
            raise self.fail(field, f"{value:,} is over the {cap:,} allowed")
        self.repetition += value
        if self.repetition > LIMITS["repetition_total"]:
            raise self.fail(
                field, f"the schema's lengths and item counts add up to over {LIMITS['repetition_total']:,}"
            )

    def _ref(self, ref: Any, field: str) -> None:
        try:
            ref_target(self.root, ref, self.refs)
        except RefProblem as exc:
            raise self.fail(field, str(exc)) from None

    def literal(self, path: str, value: Any) -> None:
        try:
            self.literal_chars += len(json.dumps(value))
        except (TypeError, ValueError):
            raise self.fail(path, "holds a value that is not JSON") from None
        if self.literal_chars > LIMITS["literal_chars"]:
            raise self.fail(
                path, f"its names and enum/const values add up to over {LIMITS['literal_chars']:,} characters"
            )


def check_schema(schema: Any, param: str = "schema") -> None:
    """Raise SchemaTooComplex naming the field when `schema` is past a bound; pure Python, no native code.
    `param` is where the schema sits in the caller's request (``response_format.json_schema.schema``)."""
    if not isinstance(schema, dict):
        raise SchemaTooComplex(f"the JSON schema at {param} must be an object", param)
    _Walk(schema, param).visit(schema, "", 0)
