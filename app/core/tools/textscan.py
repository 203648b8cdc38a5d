"""Small scanners over partial model output: balanced JSON, marker prefixes, whitespace.

Streamed text can stop anywhere, so each scanner says "complete", "not yet" or "cannot be".
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "INCOMPLETE",
    "INVALID",
    "NAME_RE",
    "expect",
    "json_end",
    "load_arguments",
    "load_json",
    "partial_suffix",
    "skip_ws",
]

INCOMPLETE = -1  # the text stops before the value ends
INVALID = -2  # the text cannot be the start of such a value
_PAIRS = {"{": "}", "[": "]"}
# Function names as OpenAI allows them, plus "." (namespaced tool names).
NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def expect(text: str, pos: int, literal: str) -> int:
    """Index after `literal` at `pos`; INCOMPLETE if the text stops inside it; INVALID if it differs."""
    piece = text[pos : pos + len(literal)]
    if piece == literal:
        return pos + len(literal)
    return INCOMPLETE if literal.startswith(piece) and len(piece) < len(literal) else INVALID


def json_end(text: str, pos: int) -> int:
    """Index after the JSON object or array that opens at `pos` (brackets balanced, strings skipped).

    Only the bracket structure is checked here; `json.loads` checks the rest.
    """
    if pos >= len(text):
        return INCOMPLETE
    if text[pos] not in _PAIRS:
        return INVALID
    stack: list[str] = []
    in_string = escaped = False
    for i in range(pos, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return INVALID
            if not stack:
                return i + 1
    return INCOMPLETE


def load_json(text: str) -> Any:
    """The JSON value, or None when the text is not JSON (None and JSON null are alike here)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def load_arguments(value: Any) -> dict[str, Any] | None:
    """Call arguments as a dict: an object, an object given as a JSON string, or nothing (→ {})."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = load_json(value) if value.strip() else {}
    return value if isinstance(value, dict) else None


def partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `markers`."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best
