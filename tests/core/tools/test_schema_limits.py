"""The bounds a JSON schema keeps before it becomes a grammar (T38): each refused with the field that broke
it, in pure Python; schemas real clients send pass."""

from __future__ import annotations

import pytest

from app.core.tools.pattern_shape import MAX_PATTERN_COUNT, pattern_problem
from app.core.tools.schema_limits import LIMITS, SchemaTooComplex, check_schema


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


REAL = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name"]},
    {"type": "string", "maxLength": 10_000},
    {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 1_000},
    {"type": "string", "enum": [f"v{i}" for i in range(1_000)]},
    {"type": "string", "pattern": "^[A-Z]{2}-\\d{4}$"},
    {"type": "string", "pattern": "^([a-z]+\\.)?[a-z]+@example\\.com$"},
    {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}}}}, "$ref": "#/$defs/p"},
    {"anyOf": [{"type": "null"}, {"type": ["string", "integer"]}]},
    _nested(LIMITS["depth"] - 1),
    # A chain of references, and a recursion: neither is a loop with no schema in it.
    {"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"type": "string"}}, "$ref": "#/$defs/d0"},
    {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    # 2,000 references in a row: followed once each, not once per step of the chain.
    {"$defs": {**{f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(2_000)}, "d2000": {}}, "$ref": "#/$defs/d0"},
]


@pytest.mark.parametrize("schema", REAL, ids=range(len(REAL)))
def test_schemas_clients_send_pass(schema):
    check_schema(schema, "response_format.json_schema.schema")


# (schema, the field the error names, after the caller's prefix "s")
REFUSED = [
    ({"type": "string", "maxLength": 20_000}, "s.maxLength"),
    ({"type": "string", "minLength": -1}, "s.minLength"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "s.minLength"),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 1_001}, "s.maxItems"),
    ({"type": "object", "properties": {"a": {"type": "blob"}}}, "s.properties.a.type"),
    ({"$ref": "https://example.com/schema.json"}, "s.$ref"),
    ({"type": "object", "properties": {"me": {"$ref": "#"}}}, "s.properties.me.$ref"),
    ({"$ref": "#/$defs/missing"}, "s.$ref"),
    ({"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"$ref": "#/$defs/d0"}}, "$ref": "#/$defs/d0"}, "s.$ref"),
    (
        {"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"$ref": "https://example.com/s.json"}}, "$ref": "#/$defs/d0"},
        "s.$ref",
    ),
    ({"enum": list(range(1_001))}, "s.enum"),
    ({"enum": []}, "s.enum"),
    ({"const": "x" * 100_001}, "s.const"),
    ({"type": "object", "properties": {f"p{i}": {} for i in range(1_001)}}, "s.properties"),
    ({"type": "string", "pattern": "^(a{0,10}){0,100}$"}, "s.pattern"),
    ({"type": "string", "pattern": "^(a+)+$"}, "s.pattern"),
    ({"anyOf": "string"}, "s.anyOf"),
    ({"items": [1]}, "s.items[0]"),
    (_nested(LIMITS["depth"] + 1), "s" + ".properties.a" * (LIMITS["depth"] + 1)),
    (
        {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 9_000} for i in range(3)}},
        "s.properties.p2.maxLength",
    ),
]


@pytest.mark.parametrize(("schema", "field"), REFUSED, ids=[f for _, f in REFUSED])
def test_a_schema_past_a_bound_is_refused_naming_the_field(schema, field):
    with pytest.raises(SchemaTooComplex) as caught:
        check_schema(schema, "s")
    assert caught.value.code == "schema_too_complex"
    # The deepest path is cut by the depth bound where it first goes over.
    assert field.startswith(caught.value.param), (caught.value.param, field)
    assert caught.value.param in str(caught.value)
    assert caught.value.details == {"param": caught.value.param}


def test_too_many_subschemas_are_refused():
    schema = {"anyOf": [{"anyOf": [{"type": "string"}] * 100} for _ in range(60)]}
    with pytest.raises(SchemaTooComplex, match="subschemas"):
        check_schema(schema, "s")


def test_a_schema_that_is_not_an_object_is_refused():
    with pytest.raises(SchemaTooComplex, match="must be an object"):
        check_schema(["type", "string"], "s")


@pytest.mark.parametrize(
    "pattern",
    ["^\\d{3}-\\d{4}$", "^[a-z]+$", "^(ab|cd){2,5}$", "^a{100}$", "^(x[0-9]+)?y*$", "^[]a]$", "^(a|b)?$"],
)
def test_flat_patterns_pass(pattern):
    assert pattern_problem(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("^(a{0,10}){0,100}$", "can match nothing"),
        ("^(a?)*$", "can match nothing"),
        ("^(a|)+$", "can match nothing"),
        ("^(a+)+$", "itself repeats"),
        ("^(a{1,2}){0,100}$", "itself repeats"),
        ("^((ab)+c)*$", "itself repeats"),
        (f"^a{{{MAX_PATTERN_COUNT + 1}}}$", "more than"),
        ("^a{5,2}$", "not a repetition count"),
        ("^a{x}$", "not a repetition count"),
        ("^(?=a)b$", "lookarounds"),
        ("^(ab$", "not closed"),
        ("^ab)$", "closes no group"),
        ("^[ab$", "not closed"),
        ("^*a$", "repeats nothing"),
        ("abc", 'start with "^"'),
        ("^" + "a" * 1_000 + "$", "over the 1,000"),
        ("^" + "(" * 40 + "a" + ")" * 40 + "$", "32 deep"),
    ],
)
def test_patterns_that_multiply_grammar_stacks_are_refused(pattern, words):
    why = pattern_problem(pattern)
    assert why is not None and words in why
