"""A model predicted to write slower than people read says so, instead of looking like any other pick."""

from __future__ import annotations

from app.ui.widgets.fit_view import fmt_rate

# Silent reading runs at about 240 words a minute (Brysbaert 2019), 4 words a second, and English takes about
# 1.3 tokens a word: about 5 tokens a second. A reply written slower than that keeps the reader waiting on
# every line. A fact about people, not machines: the same on every computer.
READING_SPEED_TOK_S = 5.0


def is_slow(decode_tok_s: float | None) -> bool:
    """Whether a predicted decode rate is below reading speed (None: no prediction, not called slow)."""
    return decode_tok_s is not None and 0 < decode_tok_s < READING_SPEED_TOK_S


def slow_text(decode_tok_s: float) -> str:
    return f"Slow on this machine: ~{fmt_rate(decode_tok_s)} tok/s"


def slow_why(decode_tok_s: float) -> str:
    return (
        f"Predicted to write about {fmt_rate(decode_tok_s)} tokens a second, slower than reading speed "
        f"(about {READING_SPEED_TOK_S:.0f}): replies will keep you waiting. A smaller model runs faster."
    )
