"""Speculative decoding's drafts in the API's usage (OpenAI's predicted-token fields) and llama-server's timings."""

from __future__ import annotations

from app.core.engines.base import GenerationStats
from app.server.replies import timings, usage


def test_usage_reports_drafts_kept_and_thrown_away():
    stats = GenerationStats(prompt_tokens=50, prompt_tokens_evaluated=20, generated_tokens=40)
    stats.draft_tokens, stats.draft_accepted = 24, 18
    u = usage(stats)
    assert u["prompt_tokens_details"]["cached_tokens"] == 30
    details = u["completion_tokens_details"]
    assert (details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]) == (18, 6)
    t = timings(stats)
    assert (t["draft_n"], t["draft_n_accepted"]) == (24, 18)


def test_nothing_drafted_reports_zero_and_no_draft_timings():
    u = usage(GenerationStats(prompt_tokens=5, prompt_tokens_evaluated=5, generated_tokens=3))
    assert u["completion_tokens_details"]["accepted_prediction_tokens"] == 0
    assert u["completion_tokens_details"]["rejected_prediction_tokens"] == 0
    assert "draft_n" not in timings(GenerationStats(generated_tokens=3))
    assert usage(None)["completion_tokens_details"]["rejected_prediction_tokens"] == 0
