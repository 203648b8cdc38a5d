"""Message text → safe HTML for a QTextDocument: Markdown (markdown-it, raw HTML off, so model
output HTML shows as text), pygments-highlighted code blocks with a copy link each, and
reasoning (`<think>…</think>`) split out as a collapsible block, collapsed by default.

Anchors the view handles (never followed as URLs): `copy:N` (code block N), `think:toggle`, `cite:N` (a reply's
citation [N] of a passage it was given, outside code), `source:N` (a line of its Sources block).
"""

from __future__ import annotations

import html
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from app.core.tools.reasoning import CHAT_MARKERS
from app.core.tools.reasoning import split_reasoning as core_split_reasoning

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatLook:
    """The colours a rendered message uses (HTML in a QTextDocument cannot read the style sheet). The
    defaults are the light theme's; `from_palette` makes the look of any theme."""

    code_bg: str = "#f6f8fa"
    muted: str = "#57606a"
    rule: str = "#d0d7de"
    error: str = "#cf222e"
    user_bg: str = "#eef4ff"
    assistant_bg: str = "#ffffff"
    pygments: str = "default"  # a pygments style made for this background

    @classmethod
    def from_palette(cls, colours: Mapping[str, str], dark: bool) -> ChatLook:
        return cls(
            code_bg=colours["surface_alt"],
            muted=colours["text_muted"],
            rule=colours["border"],
            error=colours["error"],
            user_bg=colours["accent_soft"],
            assistant_bg=colours["surface"],
            pygments="monokai" if dark else "default",
        )


_look = ChatLook()
_generation = 0  # bumped with each new look: cached HTML and documents of the old one are stale


def look() -> ChatLook:
    return _look


def look_generation() -> int:
    return _generation


def use_look(new: ChatLook) -> None:
    """Main thread: render from now on with `new` (the caches key on `look_generation()`)."""
    global _look, _generation
    if new != _look:
        _look, _generation = new, _generation + 1
        _build_formatter.cache_clear()


# Code blocks longer than this are shown without highlighting: pygments is slow on huge blocks.
MAX_HIGHLIGHT_CHARS = 20_000

# Held while the Markdown/pygments stack is first imported and built: `warm()` does that on a pool
# thread, and pygments' lazily filled modules raise ImportError when two threads load them at once.
_LOADING = threading.RLock()


@dataclass
class Parts:
    answer: str
    reasoning: str = ""
    reasoning_open: bool = False  # still streaming inside the reasoning block
    has_reasoning: bool = False


@dataclass
class Rendered:
    html: str
    code_blocks: list[str] = field(default_factory=list)  # raw source, indexed by copy:N
    has_reasoning: bool = False


def split_reasoning(text: str) -> Parts:
    """Separate reasoning sections from the answer; an unterminated one (streaming) is reasoning.

    The core splitter does the work with the markers the chat has always shown (<think>, <thinking>,
    <reasoning>); a closing marker before any opening one means the template opened the block.
    """
    split = core_split_reasoning(text, CHAT_MARKERS, start_in_reasoning=None, trim=False)
    reasoning = "\n\n".join(block.strip() for block in split.blocks).strip()
    return Parts(split.content.strip("\n"), reasoning, split.unterminated, bool(split.blocks))


def _newline_keeping_indent(state, silent: bool) -> bool:
    """CommonMark's line break, keeping the next line's indentation (as no-break spaces): code a model
    writes without fences is a paragraph, and dropping the indentation ran it together unreadably."""
    from markdown_it.rules_inline.newline import newline

    start = state.pos
    if not newline(state, silent):
        return False
    indent = state.src[start + 1 : state.pos]
    if indent and not silent:
        state.pending += indent.replace("\t", "    ").replace(" ", "\u00a0")
    return True


def _markdown():
    with _LOADING:
        return _build_markdown()


@lru_cache(maxsize=1)
def _build_markdown():
    from markdown_it import MarkdownIt

    # commonmark + tables/strikethrough; raw HTML off: `<script>` or `<img>` from a model is text.
    # `breaks`: a line break in a reply is a line break (as in chat apps), not a space.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.inline.ruler.at("newline", _newline_keeping_indent)

    def image(_self, tokens, idx, options, env):
        # Never an <img>: a remote image would be a request the user did not ask for.
        tok = tokens[idx]
        alt = html.escape("".join(c.content for c in (tok.children or [])) or "image")
        src = html.escape(tok.attrGet("src") or "")
        return f"[image: {alt}] <span style='color:{_look.muted}'>({src})</span>"

    def fence(_self, tokens, idx, options, env):
        tok = tokens[idx]
        lang = (tok.info or "").strip().split(" ")[0]
        blocks: list[str] = env.setdefault("code_blocks", [])
        blocks.append(tok.content)
        return code_block_html(tok.content, lang, len(blocks) - 1)

    def code_block(_self, tokens, idx, options, env):
        blocks: list[str] = env.setdefault("code_blocks", [])
        blocks.append(tokens[idx].content)
        return code_block_html(tokens[idx].content, "", len(blocks) - 1)

    def text(_self, tokens, idx, options, env):
        # Prose only: code spans and blocks have rules of their own, so a "[1]" in code stays text.
        out = html.escape(tokens[idx].content, quote=False)
        cites = env.get("citations")
        return _CITATION.sub(lambda m: _cite_link(m, cites), out) if cites else out

    md.add_render_rule("text", text)
    md.add_render_rule("image", image)
    md.add_render_rule("fence", fence)
    md.add_render_rule("code_block", code_block)
    return md


_CITATION = re.compile(r"\[(\d{1,3})\]")


def _cite_link(m: re.Match[str], cites: frozenset[int]) -> str:
    """A citation [N] of a passage the reply was given, as a link; a number it was not given stays text."""
    n = int(m.group(1))
    return f"<a href='cite:{n}'>[{n}]</a>" if n in cites else m.group(0)


def _lexer(lang: str):
    with _LOADING:
        return _load_lexer(lang)


@lru_cache(maxsize=64)
def _load_lexer(lang: str):
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        return get_lexer_by_name(lang, stripnl=False) if lang else None
    except ClassNotFound:
        return None


def _formatter():
    with _LOADING:
        return _build_formatter()


@lru_cache(maxsize=1)
def _build_formatter():
    from pygments.formatters import HtmlFormatter

    # Inline styles: a QTextDocument has no stylesheet classes for pygments' CSS.
    return HtmlFormatter(noclasses=True, nowrap=True, style=_look.pygments)


def highlight(code: str, lang: str) -> str:
    lexer = _lexer(lang.lower()) if lang else None
    if lexer is None or len(code) > MAX_HIGHLIGHT_CHARS:
        return html.escape(code)
    formatter = _formatter()
    from pygments import highlight as pyg_highlight

    return pyg_highlight(code, lexer, formatter).rstrip("\n")


def code_block_html(code: str, lang: str, index: int) -> str:
    body = highlight(code.rstrip("\n"), lang)
    label = html.escape(lang) if lang else "code"
    return (
        f"<table width='100%' cellspacing='0' cellpadding='6' bgcolor='{_look.code_bg}'"
        " style='margin-top:4px; margin-bottom:4px;'>"
        f"<tr><td><span style='color:{_look.muted}; font-size:small'>{label}</span>"
        f" &nbsp; <a href='copy:{index}' style='font-size:small'>Copy</a></td></tr>"
        f"<tr><td><pre style='margin:0'>{body}</pre></td></tr></table>"
    )


def markdown_html(text: str, citations: frozenset[int] = frozenset()) -> tuple[str, list[str]]:
    """Markdown → HTML (safe) and the raw code blocks it contains; `citations`: the numbers [N] in its prose
    that become `cite:N` links."""
    env: dict = {"citations": citations}
    out = _markdown().render(text, env)
    return out, env.get("code_blocks", [])


def render_message(
    text: str,
    *,
    role: str = "assistant",
    reasoning_expanded: bool = False,
    streaming: bool = False,
    citations: frozenset[int] = frozenset(),
) -> Rendered:
    """The body HTML of one message. User text is Markdown too (code pasted by the user reads well). `citations`:
    the passage numbers a reply was given, its [N] shown as links."""
    if role != "assistant":
        body, blocks = markdown_html(text)
        return Rendered(body, blocks)
    parts = split_reasoning(text)
    body, blocks = markdown_html(parts.answer, citations) if parts.answer else ("", [])
    if not parts.has_reasoning:
        return Rendered(body, blocks)
    words = len(parts.reasoning.split())
    arrow = "▾" if reasoning_expanded else "▸"
    state = "thinking…" if parts.reasoning_open and streaming else f"{words} word{'s' if words != 1 else ''}"
    head = (
        f"<p style='color:{_look.muted}'><a href='think:toggle'>{arrow} Reasoning</a>"
        f" <span style='font-size:small'>({state})</span></p>"
    )
    if reasoning_expanded:
        inner = html.escape(parts.reasoning).replace("\n", "<br>")
        head += (
            f"<table width='100%' cellpadding='6' style='margin-bottom:6px'><tr><td"
            f" style='color:{_look.muted}; border-left:3px solid {_look.rule}'>{inner}</td></tr></table>"
        )
    return Rendered(head + body, blocks, True)


def plain_html(text: str) -> str:
    """Cheap fallback while a very long reply streams: escaped text, line breaks kept."""
    return "<p style='white-space:pre-wrap'>" + html.escape(text) + "</p>"


def warm() -> None:
    """Any thread: import and build the Markdown and highlighting stack once, so the first reply
    shown does not pay for the imports on the UI thread."""
    render_message("*warm* `up`\n\n```python\nx = 1\n```")
