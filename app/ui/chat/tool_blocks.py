"""How tool calls and results read in the thread: an assistant turn's calls as a block under its text (tool and
arguments), a result as a block of its own (errors in red), long results folded to their first lines with a
`tool:toggle` link to open them."""

from __future__ import annotations

import html
import json
from typing import Any

from app.ui.chat.render import look

FOLDED_LINES = 8
MAX_SHOWN_CHARS = 20_000  # even opened, a result this long is cut on screen (the model got up to 32,000)


def calls_html(calls: list[dict[str, Any]] | None) -> str:
    """The calls a turn made, each as the tool's name and its arguments."""
    out = []
    for call in calls or ():
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
        out.append(
            f"<p style='color:{look().muted}; margin-top:4px'>→ Called <b>{html.escape(str(call.get('tool')))}</b>"
            f" from {html.escape(str(call.get('server')))}</p>"
            f"<pre style='background:{look().code_bg}; white-space:pre-wrap'>{html.escape(arguments)}</pre>"
        )
    return "".join(out)


def result_html(text: str, *, error: bool, expanded: bool) -> str:
    """A tool's result: folded to its first lines unless `expanded`; an error in the theme's error colour."""
    lines = text.splitlines()
    folded = not expanded and len(lines) > FOLDED_LINES
    shown = "\n".join(lines[:FOLDED_LINES]) if folded else text
    if len(shown) > MAX_SHOWN_CHARS:
        shown = shown[:MAX_SHOWN_CHARS] + "\n…"
    colour = f"color:{look().error}; " if error else ""
    body = f"<pre style='{colour}background:{look().code_bg}; white-space:pre-wrap'>{html.escape(shown)}</pre>"
    if folded:
        body += f"<p><a href='tool:toggle'>▸ Show all {len(lines):,} lines</a></p>"
    elif len(lines) > FOLDED_LINES:
        body += "<p><a href='tool:toggle'>▾ Fold</a></p>"
    return body
