"""Context policy: drop the oldest whole turns after the system prompt, with a notice; refuse when
even the last message does not fit."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.chat.context import context_usage, estimate_tokens, fit_context, history_for_request
from app.core.chat.models import Message
from app.core.engines.base import ChatMessage


def words(msgs: list[ChatMessage]) -> int:
    return sum(len(m.content.split()) for m in msgs)


def conversation(turn_words: list[tuple[int, int]], last_user: int, system: int = 5) -> list[ChatMessage]:
    msgs = [ChatMessage(role="system", content="s " * system)]
    for i, (u, a) in enumerate(turn_words):
        msgs.append(ChatMessage(role="user", content=f"u{i} " * u))
        msgs.append(ChatMessage(role="assistant", content=f"a{i} " * a))
    msgs.append(ChatMessage(role="user", content="last " * last_user))
    return msgs


def test_fitting_conversation_is_sent_whole():
    msgs = conversation([(5, 5)] * 3, 5)
    plan = fit_context(msgs, words, n_ctx=100, reserve=10)
    assert plan.ok and plan.notice is None
    assert plan.messages == msgs and plan.prompt_tokens == 40 and plan.dropped_messages == 0


def test_over_long_conversation_drops_oldest_pairs_with_notice():
    msgs = conversation([(10, 10)] * 10, 10)  # 5 + 200 + 10 = 215 words
    plan = fit_context(msgs, words, n_ctx=100, reserve=20)
    assert plan.ok and plan.notice is not None and plan.notice.level == "info"
    assert plan.prompt_tokens == words(plan.messages) <= 80
    assert plan.messages[0] == msgs[0]  # the system prompt stays
    assert plan.messages[1:] == msgs[len(msgs) - len(plan.messages) + 1 :]  # a contiguous tail
    assert plan.messages[1].role == "user"  # whole pairs only
    dropped = len(msgs) - len(plan.messages)
    assert plan.dropped_messages == dropped == 14
    assert f"{dropped} oldest messages" in plan.notice.text
    # Minimal: keeping one more pair would not fit.
    assert words(msgs[:1] + msgs[1 + dropped - 2 :]) > 80


def test_giant_last_message_is_an_error_and_nothing_is_sent():
    msgs = conversation([(3, 3)], 500)
    plan = fit_context(msgs, words, n_ctx=256, reserve=64)
    assert not plan.ok and plan.notice.level == "error"
    assert plan.messages == []
    assert "505" in plan.notice.text and "192" in plan.notice.text  # needed vs available


def test_reserve_larger_than_context_is_an_error():
    plan = fit_context(conversation([], 1), words, n_ctx=100, reserve=100)
    assert not plan.ok and plan.messages == []


def test_counter_is_called_a_logarithmic_number_of_times():
    calls = []

    def counting(msgs):
        calls.append(1)
        return words(msgs)

    msgs = conversation([(10, 10)] * 1000, 10)
    start = time.perf_counter()
    plan = fit_context(msgs, counting, n_ctx=1000, reserve=100)
    assert plan.ok and plan.prompt_tokens <= 900
    assert len(calls) < 20
    assert time.perf_counter() - start < 1.0


@settings(max_examples=150, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=12),
    last=st.integers(1, 60),
    system=st.integers(0, 20),
    n_ctx=st.integers(1, 300),
    reserve=st.integers(0, 100),
)
def test_policy_properties(turns, last, system, n_ctx, reserve):
    msgs = conversation(turns, last, system)
    plan = fit_context(msgs, words, n_ctx=n_ctx, reserve=reserve)
    budget = n_ctx - reserve
    minimum = system + last
    if budget <= 0 or minimum > budget:
        assert not plan.ok and plan.messages == []
        return
    assert plan.ok and words(plan.messages) <= budget
    assert plan.messages[0] == msgs[0] and plan.messages[-1] == msgs[-1]
    assert plan.messages[1:] == msgs[len(msgs) - len(plan.messages) + 1 :]
    assert plan.dropped_messages == len(msgs) - len(plan.messages)
    assert plan.dropped_messages % 2 == 0
    if plan.dropped_messages:
        assert plan.notice is not None and str(plan.dropped_messages) in plan.notice.text
        assert words(msgs[:1] + msgs[1 + plan.dropped_messages - 2 :]) > budget
    else:
        assert plan.notice is None


def _msg(i, role, content, status="done"):
    return Message(
        id=i,
        conversation_id=1,
        parent_id=i - 1 or None,
        role=role,
        content=content,
        status=status,
        created_at=0.0,
        updated_at=0.0,
    )


def test_history_for_request_skips_failed_and_in_flight_replies():
    path = [
        _msg(1, "user", "q1"),
        _msg(2, "assistant", "", "error"),
        _msg(3, "user", "q2"),
        _msg(4, "assistant", "partial", "stopped"),
        _msg(5, "user", "q3"),
        _msg(6, "assistant", "typing…", "streaming"),
    ]
    out = history_for_request("Be kind.", path)
    assert [(m.role, m.content) for m in out] == [
        ("system", "Be kind."),
        ("user", "q1"),
        ("user", "q2"),
        ("assistant", "partial"),
        ("user", "q3"),
    ]
    assert history_for_request("  ", path[:1])[0].role == "user"


def test_context_usage_levels():
    assert context_usage(100, 4096) == "ok"
    assert context_usage(3600, 4096) == "warn"
    assert context_usage(4096, 4096) == "full"


def test_token_estimate_counts_ascii_by_thirds_and_other_characters_one_each():
    ascii_only = estimate_tokens([ChatMessage(role="user", content="a" * 300)])
    mixed = estimate_tokens([ChatMessage(role="user", content="a" * 300 + "日本語")])
    assert ascii_only == 2 + 100 + 6
    assert mixed == ascii_only + 3
    assert estimate_tokens([]) == 2


def test_stored_images_ride_with_their_turn_and_count_in_the_estimate():
    from app.core.chat.context import IMAGE_TOKENS
    from app.core.engines.base import ImageInput

    now = time.time()
    turns = [
        Message(1, 1, None, "user", "What is this?", "done", now, now),
        Message(2, 1, 1, "assistant", "A cat.", "done", now, now),
    ]
    cat = ImageInput(data=b"\x89PNG cat", offset=13)
    history = history_for_request("Be brief.", turns, {1: [cat]})
    assert [m.images for m in history] == [None, [cat], None]
    plain = history_for_request("Be brief.", turns)
    assert estimate_tokens(history) == estimate_tokens(plain) + IMAGE_TOKENS
