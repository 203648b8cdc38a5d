"""A JSON schema → GBNF, bounded (T38): lengths and item counts as llama.cpp's flat `{m,n}` rules, what
the converter cannot express a SchemaTooComplex, and a grammar's nesting kept far below what overflows
the engine thread's stack — the overflow itself tried in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.core.runtime.engine_host import ENGINE_STACK_BYTES
from app.core.tools.schema_grammar import (
    MAX_GRAMMAR_CHARS,
    MAX_GRAMMAR_NESTING,
    check_gbnf,
    expand_shorthands,
    gbnf_nesting,
    schema_to_gbnf,
)
from app.core.tools.schema_limits import LIMITS, SchemaTooComplex
from tests.helpers import require_llama_cpp

ROOT = Path(__file__).resolve().parents[3]


def _parses(vocab, gbnf: str) -> bool:
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
    return bool(sampler)


def test_lengths_and_item_counts_become_flat_repetitions():
    require_llama_cpp()
    text = schema_to_gbnf({"type": "string", "minLength": 2, "maxLength": LIMITS["length"]})
    assert "{2,10000}" in text and gbnf_nesting(text) <= 2
    items = schema_to_gbnf({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 5})
    assert "{0,4}" in items  # the first item, then up to four more after commas
    none = schema_to_gbnf({"type": "array", "items": {"type": "integer"}, "maxItems": 0})
    assert '"[" space  "]" space' in none


def test_the_largest_schemas_allowed_parse_in_llama_cpp(smollm2_engine):
    vocab = smollm2_engine._llm._model.vocab
    largest = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": LIMITS["length"]},
            "list": {"type": "array", "items": {"type": "number"}, "maxItems": LIMITS["items"]},
            "code": {"type": "string", "pattern": "^[A-Z]{100}-\\d{1,100}(x[0-9]){0,100}$"},
            "kind": {"enum": [f"kind-{i}" for i in range(LIMITS["enum"])]},
        },
        "required": ["text", "list", "code", "kind"],
    }
    gbnf = schema_to_gbnf(largest)
    assert _parses(vocab, gbnf)
    assert gbnf_nesting(gbnf) < MAX_GRAMMAR_NESTING


def test_regex_shorthands_become_classes_llama_cpp_reads(smollm2_engine):
    assert expand_shorthands("^[\\d.]+\\s\\D\\w$") == "^[0-9.]+[ \\t\\n\\r][^0-9][a-zA-Z0-9_]$"
    # The converter copied \d into a literal, which llama.cpp's parser rejects.
    assert _parses(smollm2_engine._llm._model.vocab, schema_to_gbnf({"type": "string", "pattern": "^\\d{3}$"}))


CHAIN = {"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"type": "string"}}, "$ref": "#/$defs/d0"}
# A chain whose end holds references of its own, beside the root's $ref (which the converter never read past).
CHAIN_INTO_OBJECT = {
    "$defs": {
        "d0": {"$ref": "#/$defs/d1"},
        "d1": {"type": "object", "properties": {"name": {"$ref": "#/$defs/d2"}}, "required": ["name"]},
        "d2": {"$ref": "#/$defs/d3"},
        "d3": {"type": "string", "maxLength": 8},
    },
    "$ref": "#/$defs/d0",
}
# A tree: a node may hold children, each a node. Recursive, but each level can end (an empty list).
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
            "required": ["name"],
        },
        "n": {"$ref": "#/$defs/node"},
    },
    "$ref": "#/$defs/node",
}


def _rules(gbnf: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in gbnf.splitlines() if " ::= " in line)


def test_a_chain_of_references_is_followed_to_the_schema_it_ends_at(smollm2_engine):
    vocab = smollm2_engine._llm._model.vocab
    assert _rules(schema_to_gbnf(CHAIN))["root"] == "string"
    obj = _rules(schema_to_gbnf(CHAIN_INTO_OBJECT))
    assert obj["root"] == "d1" and obj["d1-name"] == "d3" and "{0,8}" in obj["d3"]  # d1's property is d3's string
    tree = _rules(schema_to_gbnf(TREE))
    assert tree["root"] == "node" and tree["node-children-item"] == "node"  # each child is a node again
    for schema in (CHAIN, CHAIN_INTO_OBJECT, TREE):
        assert _parses(vocab, schema_to_gbnf(schema))


def test_a_recursion_that_reads_nothing_first_is_left_to_llama_cpps_parser_which_refuses_it(smollm2_engine):
    # a ::= a | null: llama.cpp refuses left recursion, and the engine's probe of every grammar makes that
    # a 400 (tests/server/test_hostile_grammar_live.py).
    left = {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"}
    assert not _parses(smollm2_engine._llm._model.vocab, schema_to_gbnf(left))


def test_references_that_loop_with_no_schema_between_them_are_refused_naming_the_loop():
    require_llama_cpp()
    loop = {"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"$ref": "#/$defs/d0"}}, "$ref": "#/$defs/d0"}
    with pytest.raises(SchemaTooComplex, match="#/\\$defs/d0 → #/\\$defs/d1 → #/\\$defs/d0 loop") as caught:
        schema_to_gbnf(loop, "response_format.json_schema.schema")
    assert caught.value.param == "response_format.json_schema.schema.$ref"
    itself = {"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}}
    with pytest.raises(SchemaTooComplex, match="loop"):
        schema_to_gbnf(itself, "s")


def test_a_reference_gets_its_own_rule_even_where_a_property_has_its_name():
    require_llama_cpp()
    schema = {
        "type": "object",
        "properties": {
            "d1": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            "x": {"$ref": "#/$defs/d1"},
        },
        "required": ["d1", "x"],
        "$defs": {"d1": {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}},
    }
    rules = _rules(schema_to_gbnf(schema))
    x = rules[rules["x"]]  # the converter reused the property's rule: x took an object of "n"
    assert "-s-kv" in x and "-n-kv" not in x, rules
    # A value that looks like a reference is data: the constant is written as given.
    const = schema_to_gbnf({"type": "object", "properties": {"v": {"const": {"$ref": "#/nowhere"}}}})
    assert "#/nowhere" in const and "input#" not in const


@pytest.mark.parametrize(
    "schema",
    [{"type": "string", "pattern": "^a(?=b)$"}],
    ids=["lookahead"],
)
def test_what_the_converter_cannot_express_is_a_schema_error(schema):
    require_llama_cpp()
    with pytest.raises(SchemaTooComplex) as caught:
        schema_to_gbnf(schema, "text.format.schema")
    assert caught.value.param.startswith("text.format.schema")


def test_gbnf_nesting_skips_literals_classes_and_comments():
    assert gbnf_nesting('root ::= ( "(((" [(] ( "a" ) ) # ((((\n') == 2
    assert gbnf_nesting('root ::= "\\"(" x') == 0


def test_a_grammar_too_large_or_too_deep_is_refused():
    deep = "root ::= " + "(" * (MAX_GRAMMAR_NESTING + 1) + '"a"' + ")" * (MAX_GRAMMAR_NESTING + 1)
    with pytest.raises(SchemaTooComplex, match="nests"):
        check_gbnf(deep)
    with pytest.raises(SchemaTooComplex, match="characters"):
        check_gbnf('root ::= "' + "a" * MAX_GRAMMAR_CHARS + '"')
    check_gbnf("root ::= " + "(" * MAX_GRAMMAR_NESTING + '"a"' + ")" * MAX_GRAMMAR_NESTING)


_CHILD = textwrap.dedent(
    """
    import sys, threading
    import llama_cpp
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), params)
    vocab = llama_cpp.llama_model_get_vocab(model)
    depth, stack = int(sys.argv[2]), int(sys.argv[3])
    gbnf = "root ::= " + "(" * depth + '"a"' + ")?" * depth
    parsed = []
    def parse():
        parsed.append(bool(llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")))
    threading.stack_size(stack)
    worker = threading.Thread(target=parse)
    worker.start()
    worker.join()
    print("parsed" if parsed == [True] else "refused", flush=True)
    """
)


def _parse_in_child(gguf: Path, depth: int, stack: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(gguf), str(depth), str(stack)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(sys.platform == "win32", reason="a stack overflow is not a signal on Windows")
def test_the_nesting_limit_parses_on_a_sixteenth_of_the_engine_stack_where_deep_grammars_crash(smollm2_gguf):
    require_llama_cpp()
    small = ENGINE_STACK_BYTES // 16
    allowed = _parse_in_child(smollm2_gguf, MAX_GRAMMAR_NESTING, small)
    assert allowed.returncode == 0 and "parsed" in allowed.stdout, allowed.stderr[-2000:]
    # What the limit keeps out: the same shape, deep enough, kills the process on that stack.
    crashed = _parse_in_child(smollm2_gguf, 200_000, small)
    assert crashed.returncode < 0, (crashed.returncode, crashed.stdout, crashed.stderr[-500:])
