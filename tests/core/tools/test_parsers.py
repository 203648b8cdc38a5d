"""Every family's parser, whole and streamed in every split: the same calls, the same text, never an error."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.tools import FAMILIES, TextDelta, ToolCallArgs, ToolCallStart, collect, get_family
from app.core.tools.types import OutputEvent
from tests.core.tools.samples import SAMPLES, SCHEMAS, Sample

BY_ID = {s.id: s for s in SAMPLES}


def stream(sample: Sample, pieces: list[str], **kw) -> list[OutputEvent]:
    parser = get_family(sample.family).stream(schemas=SCHEMAS, **kw)
    events: list[OutputEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.finish()


def summary(events: list[OutputEvent]) -> tuple[str, list[tuple[str, object]]]:
    result = collect(events)
    return result.content, [(c.name, json.loads(c.arguments)) for c in result.tool_calls]


def check_event_order(events: list[OutputEvent]) -> None:
    """Starts come in index order with unique non-empty ids; args follow their own start."""
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [s.index for s in starts] == list(range(len(starts)))
    ids = [s.id for s in starts]
    assert all(ids) and len(set(ids)) == len(ids)
    opened: set[int] = set()
    for event in events:
        if isinstance(event, ToolCallStart):
            opened.add(event.index)
        elif isinstance(event, ToolCallArgs):
            assert event.index in opened


def cuts(text: str, positions: list[int]) -> list[str]:
    bounds = [0, *sorted(positions), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def test_every_family_has_samples_of_each_kind():
    for family in FAMILIES:
        mine = [s for s in SAMPLES if s.family == family]
        assert any(not s.calls for s in mine) and any(len(s.calls) == 1 for s in mine)
        assert any(len(s.calls) > 1 for s in mine)
        assert any("text-after" in s.id for s in mine)
        malformed = [s for s in mine if "bad" in s.id or "malformed" in s.id or "unterminated" in s.id]
        assert any("unterminated" in s.id for s in malformed) and len(malformed) >= 2
        assert all(not s.calls and s.content == s.text for s in malformed)  # they come back as text


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_whole_parse(sample: Sample):
    content, calls = get_family(sample.family).parse(sample.text, schemas=SCHEMAS)
    assert content == sample.content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == sample.calls
    assert len({c.id for c in calls}) == len(calls) and all(c.id for c in calls)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_streamed_character_by_character(sample: Sample):
    events = stream(sample, list(sample.text))
    assert summary(events) == (sample.content, sample.calls)
    check_event_order(events)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_streamed_in_every_two_way_cut(sample: Sample):
    for cut in range(len(sample.text) + 1):
        events = stream(sample, cuts(sample.text, [cut]))
        assert summary(events) == (sample.content, sample.calls), cut
        check_event_order(events)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_streamed_in_random_cuts(sample: Sample, data: st.DataObject):
    positions = data.draw(st.lists(st.integers(0, len(sample.text)), max_size=12))
    events = stream(sample, cuts(sample.text, positions))
    assert summary(events) == (sample.content, sample.calls)
    check_event_order(events)


def test_text_passes_through_at_once_and_a_marker_prefix_is_held_only_until_ruled_out():
    parser = get_family("hermes").stream()
    assert parser.feed("Hello") == [TextDelta("Hello")]
    assert parser.feed(" there <tool") == [TextDelta(" there")]  # " <tool" may open a call
    assert parser.feed("box>") == [TextDelta(" <toolbox>")]
    assert parser.finish() == []


def test_llama3_json_answer_is_ruled_out_at_its_first_key():
    parser = get_family("llama3").stream()
    assert parser.feed('{"na') == []  # could still be {"name": ...}
    assert parser.feed('ughty": 1') == [TextDelta('{"naughty": 1')]


def test_a_hermes_call_goes_out_when_its_block_closes():
    parser = get_family("hermes").stream(new_id=lambda: "call_fixed")
    assert parser.feed('<tool_call>\n{"name": "get_time", "arguments": {}}\n') == []
    assert parser.feed("</tool_call>") == [
        ToolCallStart(index=0, id="call_fixed", name="get_time"),
        ToolCallArgs(index=0, fragment="{}"),
    ]


def test_default_ids_are_call_and_24_alphanumerics_and_mistral_ids_are_9():
    _, calls = get_family("hermes").parse(BY_ID["hermes-text-then-two"].text)
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", c.id) for c in calls)
    _, calls = get_family("mistral").parse(BY_ID["mistral-args-one"].text)
    assert re.fullmatch(r"[A-Za-z0-9]{9}", calls[0].id)
    _, calls = get_family("mistral").parse(BY_ID["mistral-list-two-with-ids"].text)
    assert [c.id for c in calls] == ["a1b2c3d4e", "f5g6h7i8j"]  # the model's own ids are kept


def test_a_repeating_id_factory_still_gives_unique_ids():
    _, calls = get_family("hermes").parse(BY_ID["hermes-text-then-two"].text, new_id=lambda: "same")
    assert len({c.id for c in calls}) == 2


@pytest.mark.parametrize("sample", [s for s in SAMPLES if len(s.calls) > 1], ids=lambda s: s.id)
def test_max_calls_keeps_the_first_and_drops_the_rest(sample: Sample):
    parser = get_family(sample.family).stream(schemas=SCHEMAS, max_calls=1)
    events = parser.feed(sample.text) + parser.finish()
    assert summary(events) == (sample.content, sample.calls[:1])
    assert parser.limit_reached


FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<function=f>",
    "<parameter=x>",
    "</parameter>",
    "</function>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    '{"name": "f", "arguments": {}}',
    '{"name": "f", "parameters": {"a": 1}}',
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    ";",
    "\n",
    " ",
    "f",
    "```json",
    "```",
]


@pytest.mark.parametrize("family", list(FAMILIES))
@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=14), seed=st.integers(0, 1000))
def test_arbitrary_output_never_raises_and_streaming_agrees(family: str, parts: list[str], seed: int):
    text = "".join(parts)
    content, calls = get_family(family).parse(text, schemas=SCHEMAS)
    if not calls:
        assert content == text  # nothing taken for a call: the text comes back unchanged
    rng = random.Random(seed)
    positions = [rng.randint(0, len(text)) for _ in range(rng.randint(0, 6))]
    events = stream(Sample("fuzz", family, text, content), cuts(text, positions))
    assert summary(events) == (content, [(c.name, json.loads(c.arguments)) for c in calls])
    check_event_order(events)
