"""Grammars that force a call: valid GBNF for llama.cpp in every family's syntax, and (with the real
SmolLM2) a greedy generation under each one yields a call that parses and fits the schema."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from app.core.engines import collect as collect_chunks
from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.core.tools import ToolError, ToolFormat, plan_tools
from app.core.tools.grammar import literal, schema_rules
from app.core.tools.schema_limits import SchemaTooComplex
from tests.core.tools.samples import TOOLS

FORMATS = [
    ToolFormat("hermes"),
    ToolFormat("qwen3_coder"),
    ToolFormat("llama3"),
    ToolFormat("mistral", "list"),
    ToolFormat("mistral", "args"),
    ToolFormat("deepseek", "v3"),
    ToolFormat("deepseek", "v3.1"),
]
CHOICES = [("required", True), ("required", False), ({"type": "function", "function": {"name": "get_weather"}}, True)]
NESTED = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {
                "guests": {"type": "array", "items": {"type": "string"}},
                "room": {"type": "object", "properties": {"beds": {"type": "integer"}}},
                "late": {"type": "boolean"},
                "note": {"type": "string", "description": 'quotes " and \\ and <|im_end|>'},
            },
            "required": ["guests"],
        },
    },
}


def fmt_id(fmt: ToolFormat) -> str:
    return f"{fmt.family}-{fmt.variant}" if fmt.variant else fmt.family


def validate(args: dict[str, Any], schema: dict[str, Any]) -> None:
    """A hand check of what the test schemas use: required keys, known keys, types, enums."""
    props = schema.get("properties", {})
    assert set(schema.get("required", [])) <= set(args), args
    kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}
    for key, value in args.items():
        assert key in props, key
        assert isinstance(value, kinds[props[key]["type"]]), (key, value)
        if "enum" in props[key]:
            assert value in props[key]["enum"]
        if props[key].get("minimum") is not None:
            assert value >= props[key]["minimum"]


def test_literal_escapes_what_gbnf_needs():
    assert literal('a"b\\c\nd\te') == '"a\\"b\\\\c\\nd\\te"'
    assert literal("<｜tool▁sep｜>") == '"<｜tool▁sep｜>"'
    assert literal("\x01") == '"\\x01"'


def test_schema_rules_are_prefixed_everywhere():
    root, rules = schema_rules(TOOLS[0]["function"]["parameters"], "t7-")
    assert root == "t7-root"
    defined = re.findall(r"^([\w-]+) ::=", rules, re.MULTILINE)
    assert defined and all(name.startswith("t7-") for name in defined)
    bodies = re.sub(r'"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]', "", rules)  # drop literals and classes
    referenced = set(re.findall(r"[A-Za-z][\w-]*", "\n".join(line.split("::=", 1)[1] for line in bodies.splitlines())))
    assert referenced <= set(defined)


@pytest.mark.parametrize("fmt", FORMATS, ids=fmt_id)
@pytest.mark.parametrize(("choice", "parallel"), CHOICES, ids=["required-parallel", "required-one", "named"])
def test_grammar_is_accepted_by_llama_cpp(smollm2_engine, fmt: ToolFormat, choice: Any, parallel: bool):
    import llama_cpp

    from app.core.engines.llamacpp.options import build_grammar

    plan = plan_tools([*TOOLS, NESTED], choice, parallel_tool_calls=parallel, tool_format=fmt)
    assert plan.grammar is not None
    llama_cpp.LlamaGrammar.from_string(plan.grammar, verbose=False)
    # llama-cpp-python does not parse GBNF itself; llama.cpp's parser runs when the sampler is made.
    build_grammar(llama_cpp, GenerateRequest(prompt="x", grammar=plan.grammar), smollm2_engine._llm._model.vocab)
    # A named function forces that one; "required" offers them all.
    assert ("book" in plan.grammar) == (choice == "required")


def test_the_llama_cpp_check_does_catch_a_broken_grammar(smollm2_engine):
    import llama_cpp

    from app.core.engines.llamacpp.options import build_grammar

    with pytest.raises(SchemaTooComplex, match="could not be parsed") as caught:
        build_grammar(
            llama_cpp,
            GenerateRequest(prompt="x", grammar='root ::= "a" undefined-rule'),
            smollm2_engine._llm._model.vocab,
        )
    assert caught.value.code == "schema_too_complex" and caught.value.param == "grammar"


def test_without_llama_cpp_a_forced_call_is_a_clear_error(monkeypatch):
    import app.core.native

    def missing(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(app.core.native, "import_native", missing)
    with pytest.raises(ToolError, match="llama-cpp-python"):
        plan_tools(TOOLS, "required")
    assert plan_tools(TOOLS, "auto").grammar is None  # nothing to force, nothing imported


@pytest.mark.parametrize("fmt", FORMATS, ids=fmt_id)
def test_greedy_generation_under_the_grammar_gives_a_valid_call(smollm2_engine, fmt: ToolFormat):
    plan = plan_tools(TOOLS, "required", parallel_tool_calls=False, tool_format=fmt)
    request = GenerateRequest(
        messages=[
            ChatMessage(role="system", content="You are a helpful assistant who answers in English."),
            ChatMessage(role="user", content="What's the weather in Paris for the next 3 days?"),
        ],
        tools=plan.template_tools,
        grammar=plan.grammar,
        sampling=SamplingParams(temperature=0.0, max_tokens=256),
    )
    text, last = collect_chunks(smollm2_engine.generate(request, threading.Event()))
    assert last.finish_reason == "stop", text  # the grammar ended, so the model could only stop
    out = plan.parse(text)
    assert out.content == "" and len(out.tool_calls) == 1, text
    call = out.tool_calls[0]
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    validate(json.loads(call.arguments), schema)
