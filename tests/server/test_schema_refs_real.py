"""JSON schemas with `$ref` chains and recursion through `response_format` on the real SmolLM2: a chain of
references (d0 → d1) is followed to the schema it ends at and the answer follows it; a recursive schema
(a tree of nodes) is a grammar the model writes to; references that loop with no schema between them are
a 400 naming the field, before the request queues."""

from __future__ import annotations

import json
import re

import pytest

from tests.server.conftest import SYSTEM_PROMPT

pytestmark = pytest.mark.slow

CHAIN = {"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"type": "string"}}, "$ref": "#/$defs/d0"}
CITY = {
    "$defs": {
        "d0": {"$ref": "#/$defs/d1"},
        "d1": {"type": "object", "properties": {"city": {"$ref": "#/$defs/d2"}}, "required": ["city"]},
        "d2": {"$ref": "#/$defs/d3"},
        "d3": {"type": "string", "maxLength": 12},
    },
    "$ref": "#/$defs/d0",
}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["name", "children"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


def _ask(smol_server, question: str, schema: dict, max_tokens: int = 40):
    model = smol_server.client.get("/v1/models").json()["data"][0]["id"]
    return smol_server.client.post(
        "/v1/chat/completions",
        json={
            "model": model,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        },
    )


def test_a_chain_of_references_is_followed(smol_server):
    r = _ask(smol_server, "Name a colour as a JSON string.", CHAIN)
    assert r.status_code == 200, r.text[:400]
    assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"]), str)
    r = _ask(smol_server, "Name the capital of France as JSON.", CITY)
    assert r.status_code == 200, r.text[:400]
    city = json.loads(r.json()["choices"][0]["message"]["content"])["city"]
    assert isinstance(city, str) and len(city) <= 12


def test_a_recursive_schema_is_written_to(smol_server):
    r = _ask(smol_server, "Describe a family tree as JSON.", TREE, max_tokens=40)
    assert r.status_code == 200, r.text[:400]
    choice = r.json()["choices"][0]
    text = choice["message"]["content"]
    if choice["finish_reason"] == "stop":  # a whole tree
        json.loads(text)
    # Whole or cut at the token limit, every level is a node: its keys are the node's, children nested in
    # children (SmolLM2 at temperature 0 nests one family tree in the next).
    keys = re.findall(r'"([^"]*)"\s*:', text)
    assert keys[:2] == ["name", "children"] and set(keys) == {"name", "children"}, text
    assert keys.count("children") >= 2, text  # the recursion was taken


def test_references_that_loop_are_a_400_naming_the_field(smol_server):
    loop = {"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"$ref": "#/$defs/d0"}}, "$ref": "#/$defs/d0"}
    r = _ask(smol_server, "hi", loop)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "schema_too_complex" and error["param"] == "response_format.json_schema.schema.$ref"
    assert "loop" in error["message"]
