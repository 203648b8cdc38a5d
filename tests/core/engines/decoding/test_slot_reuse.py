"""plan_reuse: how a slot takes a new prompt, decided once for llama.cpp and MLX alike."""

from __future__ import annotations

from app.core.engines.decoding.sequences import MIN_COPY_GAIN, PromptCache, Slot, plan_reuse

SYSTEM = list(range(100, 140))  # a 40-token system prompt two conversations share


def slot(seq_id: int, tokens: list[int]) -> Slot:
    return Slot(seq_id, list(tokens))


def test_a_slot_continuing_its_own_conversation_keeps_it():
    s = slot(0, SYSTEM + [1, 2, 3])
    reuse = plan_reuse(s, SYSTEM + [1, 2, 3, 4], 43, PromptCache(1 << 20), [])
    assert (reuse.set_aside, reuse.restore, reuse.donor, reuse.shared) == (False, None, None, 43)


def test_a_prompt_that_drops_a_stretch_sets_the_conversation_aside():
    s = slot(0, SYSTEM + list(range(60)))
    reuse = plan_reuse(s, SYSTEM + [999], len(SYSTEM), PromptCache(1 << 20), [])
    assert reuse.set_aside and reuse.restore is None and reuse.donor is None and reuse.shared == len(SYSTEM)
    # Sharing under half of what it holds counts as dropping it too, however short the rest.
    short = slot(1, [1, 2, 3, 4, 5])
    assert plan_reuse(short, [1, 2, 9], 2, PromptCache(1 << 20), []).set_aside


def test_a_saved_state_that_shares_more_is_restored_and_leaves_the_cache():
    cache = PromptCache(1 << 20)
    cache.put(SYSTEM + [7, 8, 9], b"state", 5)
    s = slot(0, SYSTEM + [1])
    reuse = plan_reuse(s, SYSTEM + [7, 8, 9, 10], len(SYSTEM), cache, [])
    assert reuse.set_aside and reuse.restore is not None and reuse.restore.data == b"state"
    assert reuse.shared == len(SYSTEM) + 3 and len(cache) == 0
    # Without a cache budget nothing is looked up.
    assert plan_reuse(slot(0, []), SYSTEM, 0, PromptCache(0), []).restore is None


def test_a_donor_is_copied_only_when_it_saves_enough_and_a_better_one_puts_the_state_back():
    donor = slot(1, SYSTEM + list(range(MIN_COPY_GAIN + 5)))
    prompt = SYSTEM + list(range(MIN_COPY_GAIN + 5)) + [500]
    empty = slot(0, [])
    reuse = plan_reuse(empty, prompt, 0, PromptCache(1 << 20), [donor])
    assert reuse.donor is donor and reuse.shared == len(donor.tokens) and not reuse.set_aside
    # A gain under MIN_COPY_GAIN is not worth the copy.
    little = slot(2, prompt[: MIN_COPY_GAIN - 1])
    assert plan_reuse(empty, prompt, 0, PromptCache(1 << 20), [little]).donor is None
    # A saved state that shares less than the donor goes back to the cache.
    cache = PromptCache(1 << 20)
    cache.put(SYSTEM, b"short", 5)
    reuse = plan_reuse(slot(0, [42]), prompt, 0, cache, [donor])
    assert reuse.donor is donor and reuse.restore is None and reuse.set_aside and len(cache) == 1
