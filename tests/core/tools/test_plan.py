"""tool_choice and tool lists, format detection, schema-typed Qwen3-Coder values, one parser for a reply."""

from __future__ import annotations

import json

import pytest

from app.core.tools import (
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
    ToolError,
    ToolFormat,
    detect_format,
    plan_tools,
)
from app.core.tools.qwen3_coder import coerce_value
from tests.core.tools.samples import TOOLS

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ '<tool_call>\\n<function=' + tool.name + '>' }}", ToolFormat("qwen3_coder")),
        ('{{- \'<tool_call>\\n{"name": "\' }}', ToolFormat("hermes")),
        ("{{ '[TOOL_CALLS][' }}", ToolFormat("mistral", "list")),
        ("{{ '[TOOL_CALLS]' + name + '[ARGS]' }}", ToolFormat("mistral", "args")),
        ("{{ '<｜tool▁calls▁begin｜>' + tool['type'] + '\\n```json\\n' }}", ToolFormat("deepseek", "v3")),
        (
            "{{ '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' }}",
            ToolFormat("deepseek", "v3.1"),
        ),
        ("{{ '<|python_tag|>' }}", ToolFormat("llama3")),
        ('{{ \'Environment: ipython\' }} {"name": ..., "parameters": ...}', ToolFormat("llama3")),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", ToolFormat("hermes")),
        (None, ToolFormat("hermes")),
    ],
)
def test_format_detection(template, expected):
    assert detect_format(template) == expected


@pytest.mark.parametrize(
    ("raw", "schema", "value"),
    [
        ("3", {"type": "integer"}, 3),
        ("3", {"type": "number"}, 3),
        ("2.5", {"type": "number"}, 2.5),
        ("True", {"type": "boolean"}, True),
        ('{"a": [1]}', {"type": "object"}, {"a": [1]}),
        ("[1, 2]", {"type": "array"}, [1, 2]),
        ("null", {"type": ["integer", "null"]}, None),
        ("3", {"type": "string"}, "3"),
        ("3", None, "3"),
        ("three", {"type": "integer"}, "three"),  # cannot convert: kept as the model wrote it
        ("inf", {"type": "number"}, "inf"),
        ("3", {"type": ["string", "integer"]}, "3"),
    ],
)
def test_qwen3_coder_values_follow_the_schema(raw, schema, value):
    assert coerce_value(raw, schema) == value


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        ([{"type": "retrieval"}], None, "type 'function'"),
        ([{"type": "function", "function": {"name": "has space"}}], None, "letters"),
        (
            [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}],
            None,
            "two",
        ),
        ([{"type": "function", "function": {"name": "a", "parameters": "x"}}], None, "schema"),
        (None, "required", "at least one"),
        (TOOLS, "sometimes", "tool_choice"),
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, "not in tools"),
        (TOOLS, {"type": "function"}, "name"),
        (TOOLS, 3, "tool_choice"),
    ],
)
def test_bad_tools_or_choice_is_a_tool_error(tools, choice, message):
    with pytest.raises(ToolError, match=message):
        plan_tools(tools, choice)


def test_choices_decide_rendering_grammar_and_parsing():
    auto = plan_tools(TOOLS)
    assert auto.choice.mode == "auto" and auto.grammar is None and auto.template_tools == TOOLS
    none = plan_tools(TOOLS, "none")
    assert none.template_tools is None and none.grammar is None
    assert none.parse(HERMES_CALL).tool_calls == [] and none.parse(HERMES_CALL).content == HERMES_CALL
    assert plan_tools(None).choice.mode == "none"
    required = plan_tools(TOOLS, "required")
    assert required.grammar and required.max_calls is None
    assert plan_tools(TOOLS, "required", parallel_tool_calls=False).max_calls == 1
    named = plan_tools(TOOLS, {"type": "function", "name": "get_time"})  # the Responses API shape
    assert named.choice.name == "get_time" and named.max_calls == 1
    no_grammar = plan_tools(TOOLS, "required", grammar=False)  # an engine without grammars
    assert no_grammar.grammar is None and no_grammar.parse(HERMES_CALL).tool_calls


def test_format_follows_the_template():
    plan = plan_tools(TOOLS, chat_template="{{ '[TOOL_CALLS]' }}")
    out = plan.parse('[TOOL_CALLS][{"name": "get_time", "arguments": {}}]')
    assert [c.name for c in out.tool_calls] == ["get_time"]


def test_one_parser_splits_reasoning_then_calls_streamed():
    text = "<think>Need the weather.</think>\n\nChecking.\n" + HERMES_CALL
    parser = plan_tools(TOOLS).parser(new_id=lambda: "call_1")
    events = [e for ch in text for e in parser.feed(ch)] + parser.finish()
    kinds = [type(e) for e in events]
    assert kinds[0] is ReasoningDelta and kinds[-2:] == [ToolCallStart, ToolCallArgs]
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Need the weather."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Checking."
    assert events[-2] == ToolCallStart(index=0, id="call_1", name="get_weather")
    assert json.loads(events[-1].fragment) == {"city": "Paris"}


def test_a_call_inside_reasoning_is_not_a_call():
    out = plan_tools(TOOLS).parse("<think>maybe " + HERMES_CALL + "?</think>No call needed.")
    assert out.tool_calls == [] and out.content == "No call needed." and HERMES_CALL in out.reasoning


def test_generation_that_starts_inside_reasoning():
    out = plan_tools(TOOLS).parse("thinking…</think>" + HERMES_CALL, start_in_reasoning=True)
    assert out.reasoning == "thinking…" and out.content == "" and len(out.tool_calls) == 1


def test_parallel_false_stops_at_one_call_and_says_so():
    plan = plan_tools(TOOLS, "auto", parallel_tool_calls=False)
    parser = plan.parser()
    parser.feed(HERMES_CALL)
    assert parser.limit_reached
    out = plan.parse(HERMES_CALL + "\n" + HERMES_CALL.replace("Paris", "Rome"))
    assert [json.loads(c.arguments)["city"] for c in out.tool_calls] == ["Paris"] and out.content == ""
