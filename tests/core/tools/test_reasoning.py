"""The reasoning split: every family's markers, streamed in any split, starting inside a block."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.tools import (
    CHAT_MARKERS,
    ReasoningDelta,
    ReasoningSplitter,
    TextDelta,
    detect_reasoning_markers,
    prompt_opens_reasoning,
    split_reasoning,
)
from app.core.tools.reasoning import GPT_OSS, MISTRAL_THINK, SEED_THINK, THINK

CASES = [
    # (id, text, start_in_reasoning, reasoning, content)
    ("think", "<think>\nThe user wants 2+2.\n</think>\n\nIt is 4.", False, "The user wants 2+2.\n", "It is 4."),
    ("none", "Just an answer.", False, "", "Just an answer."),
    ("mistral", "[THINK]Check units.[/THINK]5 km.", False, "Check units.", "5 km."),
    ("seed", "<seed:think>hmm</seed:think>Answer", False, "hmm", "Answer"),
    (
        "gpt-oss",
        "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
        False,
        "Simple.",
        "Hello!",
    ),
    ("started-inside", "still thinking</think>\n\nDone.", True, "still thinking", "Done."),
    ("unterminated", "<think>never closes", False, "never closes", ""),
    ("two-blocks", "<think>a</think>x<think>b</think>y", False, "ab", "xy"),
    ("own-close-only", "<think>a [/THINK] b</think>c", False, "a [/THINK] b", "c"),
    ("case", "<THINK>up</THINK>ok", False, "up", "ok"),
]


def run(text: str, pieces: list[str], start: bool) -> tuple[str, str]:
    splitter = ReasoningSplitter(start_in_reasoning=start)
    deltas = [d for piece in pieces for d in splitter.feed(piece)] + splitter.finish()
    reasoning = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    content = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    return reasoning, content


@pytest.mark.parametrize(("text", "start", "reasoning", "content"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_split_whole_and_streamed(text: str, start: bool, reasoning: str, content: str):
    whole = split_reasoning(text, start_in_reasoning=start)
    assert (whole.reasoning, whole.content) == (reasoning, content)
    assert run(text, list(text), start) == (reasoning, content)
    for cut in range(len(text) + 1):
        assert run(text, [text[:cut], text[cut:]], start) == (reasoning, content), cut


@pytest.mark.parametrize(("text", "start", "reasoning", "content"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_split_in_random_cuts(text: str, start: bool, reasoning: str, content: str, data: st.DataObject):
    positions = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=10)))
    bounds = [0, *positions, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert run(text, pieces, start) == (reasoning, content)


def test_deltas_go_out_at_once_and_only_a_possible_marker_is_held():
    splitter = ReasoningSplitter()
    assert splitter.feed("<think>I wonder") == [ReasoningDelta("I wonder")]
    assert splitter.feed(" about it</th") == [ReasoningDelta(" about it")]
    assert splitter.feed("ink>The answer") == [TextDelta("The answer")]
    assert splitter.finish() == []


def test_unterminated_and_inferred_start():
    split = split_reasoning("<think>half a thought")
    assert split.unterminated and split.blocks == ["half a thought"]
    inferred = split_reasoning("opened by the template</think>answer", start_in_reasoning=None)
    assert (inferred.reasoning, inferred.content) == ("opened by the template", "answer")
    assert split_reasoning("no markers", start_in_reasoning=None).blocks == []


def test_without_trim_whitespace_is_kept():
    split = split_reasoning("<think>\nx\n</think>\n\ny", trim=False)
    assert (split.reasoning, split.content) == ("\nx\n", "\n\ny")


def test_chat_markers_keep_what_the_chat_view_showed():
    split = split_reasoning("<reasoning>r</reasoning>[THINK]not reasoning here[/THINK]", CHAT_MARKERS)
    assert split.reasoning == "r" and split.content == "[THINK]not reasoning here[/THINK]"


def test_prompt_that_opens_reasoning():
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n")


def test_markers_detected_from_the_template():
    assert detect_reasoning_markers("{{ '<think>\\n' }}") == (THINK,)
    assert detect_reasoning_markers("[THINK]{{ m }}[/THINK]") == (MISTRAL_THINK,)
    assert detect_reasoning_markers("<seed:think>") == (SEED_THINK,)
    assert detect_reasoning_markers(None) == (THINK, MISTRAL_THINK, SEED_THINK, GPT_OSS)
