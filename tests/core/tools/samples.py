"""Recorded-style outputs per tool-call family, written from each family's documented format.

Each sample: the raw model output, the content it leaves, and the calls (name, arguments) in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    id: str
    family: str
    text: str
    content: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


PARIS = ("get_weather", {"city": "Paris"})
ROME = ("get_weather", {"city": "Rome", "days": 3})
TIME = ("get_time", {})

B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _hermes(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def _coder(name: str, params: dict[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def _ds3(name: str, args: str) -> str:
    return f"{CB}function{SEP}{name}\n```json\n{args}\n```{CE}"


def _ds31(name: str, args: str) -> str:
    return f"{CB}{name}{SEP}{args}{CE}"


SAMPLES = [
    # hermes
    Sample("hermes-text", "hermes", "Paris is sunny today.\n", "Paris is sunny today.\n"),
    Sample("hermes-one", "hermes", _hermes("get_weather", '{"city": "Paris"}'), "", [PARIS]),
    Sample(
        "hermes-text-then-two",
        "hermes",
        "Let me check both.\n"
        + _hermes("get_weather", '{"city": "Paris"}')
        + "\n"
        + _hermes("get_weather", '{"city": "Rome", "days": 3}'),
        "Let me check both.",
        [PARIS, ROME],
    ),
    Sample(
        "hermes-text-after",
        "hermes",
        "Checking.\n" + _hermes("get_time", "{}") + "\nI asked for the time.",
        "Checking.\n\nI asked for the time.",
        [TIME],
    ),
    Sample(
        "hermes-arguments-as-string",
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>',
        "",
        [PARIS],
    ),
    Sample(
        "hermes-bad-json",
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>',
    ),
    Sample(
        "hermes-unknown-shape",
        "hermes",
        '<tool_call>\n{"function": 3}\n</tool_call>',
        '<tool_call>\n{"function": 3}\n</tool_call>',
    ),
    Sample(
        "hermes-unterminated",
        "hermes",
        'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
        'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    ),
    Sample(
        "hermes-tag-in-prose",
        "hermes",
        "Wrap calls in <tool_call> tags, like this.",
        "Wrap calls in <tool_call> tags, like this.",
    ),
    Sample(
        "hermes-garbage-then-good",
        "hermes",
        "<tool_call>oops</tool_call> " + _hermes("get_time", "{}"),
        "<tool_call>oops</tool_call>",
        [TIME],
    ),
    # qwen3_coder
    Sample("coder-text", "qwen3_coder", "No tools needed: 2 + 2 = 4.", "No tools needed: 2 + 2 = 4."),
    Sample("coder-one", "qwen3_coder", _coder("get_weather", {"city": "Paris"}), "", [PARIS]),
    Sample(
        "coder-text-then-two",
        "qwen3_coder",
        "I'll look.\n\n"
        + _coder("get_weather", {"city": "Paris"})
        + "\n"
        + _coder("get_weather", {"city": "Rome", "days": "3"}),
        "I'll look.",
        [PARIS, ROME],
    ),
    Sample(
        "coder-text-after",
        "qwen3_coder",
        _coder("get_time", {}) + "\nDone.",
        "Done.",
        [TIME],
    ),
    Sample(
        "coder-multiline-value",
        "qwen3_coder",
        _coder("write_file", {"path": "a.py", "content": "def f():\n    return '<b>'\n"}),
        "",
        [("write_file", {"path": "a.py", "content": "def f():\n    return '<b>'\n"})],
    ),
    Sample(
        "coder-malformed",
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>",
    ),
    Sample(
        "coder-unterminated",
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
    ),
    # llama3
    Sample("llama3-text", "llama3", "The weather in Paris is mild.", "The weather in Paris is mild."),
    Sample("llama3-one", "llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [PARIS]),
    Sample(
        "llama3-python-tag-two",
        "llama3",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}',
        "",
        [PARIS, ROME],
    ),
    Sample(
        "llama3-text-after",
        "llama3",
        '  {"name": "get_time", "parameters": {}}\n\nThat is the call.',
        "That is the call.",
        [TIME],
    ),
    Sample("llama3-json-answer", "llama3", '{"answer": 42, "unit": "none"}', '{"answer": 42, "unit": "none"}'),
    Sample("llama3-name-but-no-parameters", "llama3", '{"name": "Bob", "age": 3}', '{"name": "Bob", "age": 3}'),
    Sample(
        "llama3-bad-json",
        "llama3",
        '{"name": "get_weather", "parameters": {"city": Paris}}',
        '{"name": "get_weather", "parameters": {"city": Paris}}',
    ),
    Sample(
        "llama3-unterminated",
        "llama3",
        '{"name": "get_weather", "parameters": {"city": "Par',
        '{"name": "get_weather", "parameters": {"city": "Par',
    ),
    Sample(
        "llama3-brace-mid-text",
        "llama3",
        'Use {"name": "x", "parameters": {}} to call.',
        'Use {"name": "x", "parameters": {}} to call.',
    ),
    # mistral
    Sample("mistral-text", "mistral", "Bonjour ! Il fait beau.", "Bonjour ! Il fait beau."),
    Sample(
        "mistral-list-one",
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        "",
        [PARIS],
    ),
    Sample(
        "mistral-list-two-with-ids",
        "mistral",
        'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, '
        '{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}, "id": "f5g6h7i8j"}]',
        "Checking.",
        [PARIS, ROME],
    ),
    Sample("mistral-args-one", "mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "", [PARIS]),
    Sample(
        "mistral-args-two-text-after",
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[CALL_ID]x9y8z7w6v[ARGS]{} Then I answer.',
        "Then I answer.",
        [PARIS, TIME],
    ),
    Sample(
        "mistral-bad-json",
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {city}}]',
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {city}}]',
    ),
    Sample(
        "mistral-unterminated",
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa',
    ),
    Sample(
        "mistral-not-a-name",
        "mistral",
        "[TOOL_CALLS] is a token, get weather[ARGS]{}",
        "[TOOL_CALLS] is a token, get weather[ARGS]{}",
    ),
    # deepseek
    Sample("deepseek-text", "deepseek", "晴天。Sunny in Paris.", "晴天。Sunny in Paris."),
    Sample("deepseek-v3-one", "deepseek", B + _ds3("get_weather", '{"city": "Paris"}') + E, "", [PARIS]),
    Sample(
        "deepseek-v3-text-two",
        "deepseek",
        "Let me see."
        + B
        + _ds3("get_weather", '{"city": "Paris"}')
        + "\n"
        + _ds3("get_weather", '{"city": "Rome", "days": 3}')
        + E,
        "Let me see.",
        [PARIS, ROME],
    ),
    Sample("deepseek-v31-one", "deepseek", B + _ds31("get_weather", '{"city": "Paris"}') + E, "", [PARIS]),
    Sample(
        "deepseek-v31-two-text-after",
        "deepseek",
        B + _ds31("get_weather", '{"city": "Paris"}') + _ds31("get_time", "{}") + E + "\nBack soon.",
        "Back soon.",
        [PARIS, TIME],
    ),
    Sample("deepseek-no-end-marker", "deepseek", B + _ds31("get_time", "{}"), "", [TIME]),
    Sample(
        "deepseek-bad-json",
        "deepseek",
        B + _ds31("get_weather", "{city: Paris}") + E,
        B + _ds31("get_weather", "{city: Paris}") + E,
    ),
    Sample(
        "deepseek-unterminated",
        "deepseek",
        B + CB + "get_weather" + SEP + '{"city"',
        B + CB + "get_weather" + SEP + '{"city"',
    ),
]

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "minimum": 1},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": {"type": "object", "properties": {}}}
TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
    for n, s in SCHEMAS.items()
]
