"""The text in a request body, checked once as it is parsed, for every route and field alike (T34, T35): no lone
UTF-16 surrogate, and no more characters than one prompt may hold.

JSON may spell a lone surrogate ("\\ud800"); Python's parser keeps it in the str, and the first thing that
needs UTF-8 (the tokenizer, a SQLite write, the JSON reply that echoes it) failed with a 500. The body is
walked before any model is built from it, so the error names the field, wherever it sits: content,
system prompts, tool definitions, tool-call arguments (JSON texts, decoded here too), metadata.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic_core import PydanticCustomError

from app.core.engines.errors import MAX_PROMPT_CHARS

SURROGATE = re.compile("[\ud800-\udfff]")
# Fields whose string is a JSON text the server decodes (tool-call arguments): a surrogate escaped inside
# it ("\\ud800" in the body) comes out as a lone surrogate when the call is rendered for the template.
JSON_TEXTS = frozenset({"arguments"})
MAX_PART = 64  # of a key, in the field path an error names (keys are the client's text too)
# Where each API puts an image's data (OpenAI's image_url.url, Responses' image_url, Anthropic's source.data,
# Ollama's images[i]): base64, not prompt text, so it does not count against the characters (the body cap and
# the image limits bound it).
IMAGE_PATHS = (("image_url", "url"), ("image_url",), ("source", "data"))

__all__ = ["MAX_PROMPT_CHARS", "check_text"]


def check_text(data: Any, max_chars: int | None = MAX_PROMPT_CHARS) -> None:
    """Raise a PydanticCustomError (a 400 naming the field: ctx `param`, `code`) for the first string in
    `data` with a lone surrogate, or when its strings hold more than `max_chars` characters in all."""
    total = 0
    # (value, where it is, whether it came out of a JSON text: then it was counted as that string, and its
    # errors name that field, the one the client sent)
    stack: list[tuple[Any, tuple[str, ...], bool]] = [(data, (), False)]
    while stack:  # a loop, not recursion: JSON nests as deep as its parser allows
        value, path, decoded = stack.pop()
        if isinstance(value, str):
            total += 0 if decoded or _image_data(path) else len(value)
            if SURROGATE.search(value):
                _surrogate(path, value)
            if not decoded and path and path[-1] in JSON_TEXTS and "\\u" in value:
                try:
                    stack.append((json.loads(value), path, True))
                except ValueError:  # not JSON: the route says so, or takes it as text
                    pass
        elif isinstance(value, dict):
            for key in value:
                if isinstance(key, str) and SURROGATE.search(key):
                    _surrogate(path, key, in_key=True)
            items = reversed(value.items())
            stack.extend((v, path if decoded else (*path, str(k)[:MAX_PART]), decoded) for k, v in items)
        elif isinstance(value, list):
            entries = reversed(list(enumerate(value)))
            stack.extend((v, path if decoded else (*path, str(i)), decoded) for i, v in entries)
    if max_chars is not None and total > max_chars:
        raise PydanticCustomError(
            "prompt_too_long",
            "the request holds {chars} characters of text, over the {cap}-character cap on one prompt; shorten it",
            {"chars": f"{total:,}", "cap": f"{max_chars:,}", "param": None, "code": "context_length_exceeded"},
        )


def _image_data(path: tuple[str, ...]) -> bool:
    if len(path) >= 2 and path[-2] == "images" and path[-1].isdigit():
        return True
    return any(path[-len(tail) :] == tail for tail in IMAGE_PATHS)


def _surrogate(path: tuple[str, ...], text: str, *, in_key: bool = False) -> None:
    where = ".".join(path) or "the request body"
    bad = ord(SURROGATE.search(text).group())  # type: ignore[union-attr]
    what = "a key in it holds" if in_key else "holds"
    raise PydanticCustomError(
        "lone_surrogate",
        "{where}: {what} a lone UTF-16 surrogate ({code_point}), which is not a character; send valid Unicode "
        "(a surrogate escape needs its pair)",
        {"where": where, "what": what, "code_point": f"U+{bad:04X}", "param": ".".join(path) or None},
    )
