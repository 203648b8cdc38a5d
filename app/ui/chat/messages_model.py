"""The message list model: the shown thread as a QStandardItemModel (see message_view.py for how
it is painted). Rendered HTML is cached by what it shows (text, status, stats, branch, reasoning
state), so reloading the thread after a send re-renders nothing.
"""

from __future__ import annotations

import collections
import html
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QObject, QSize, Qt
from PySide6.QtGui import QColor, QImage, QStandardItem, QStandardItemModel

from app.core.chat.attachments import THUMB_SIDE
from app.core.chat.grounding import Source, cited
from app.core.chat.models import Message
from app.core.chat.tool_loop import unused_tools_line
from app.core.engines.base import GenerationStats
from app.core.units import fmt_n
from app.ui.chat.render import Rendered, look, look_generation, plain_html, render_message
from app.ui.chat.tool_blocks import calls_html, result_html

logger = logging.getLogger(__name__)

HTML_CACHE = 2_000  # rendered HTML is small next to a document; enough for a long chat and its branches
# A streaming reply longer than this is shown as plain text until it finishes, and only the new text
# is appended to its document each flush (message_view.py): re-rendering and re-laying out a growing
# document every 40 ms costs time in proportion to its length and stalled the UI near the end.
STREAM_MARKDOWN_CHARS = 6_000
ROLE_LABEL = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}
STATUS_NOTE = {
    "stopped": "Stopped by you",
    "interrupted": "Interrupted: Hearth closed while this reply was being written",
    "streaming": "writing…",
}


@dataclass
class Row:
    message: Message
    text: str
    status: str
    branch: tuple[int, int] = (1, 1)  # (position, count) among the siblings
    stats: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None
    version: int = 0  # bumped on every change of the row; `key()` is rebuilt when it moves
    expanded: bool = False
    image_count: int = 0  # images attached to the message
    tool: str = ""  # a tool turn: "tool from server", the call it answers
    sources: tuple[Source, ...] = ()  # the passages the reply was given from documents (its turn's, with tools)
    thumbnails: list[QImage] | None = field(default=None, repr=False)  # made on the pool; None until then
    rendered: Rendered | None = field(default=None, repr=False)
    _key: tuple[int, tuple] | None = field(default=None, repr=False)

    @property
    def id(self) -> int:
        return self.message.id

    @property
    def role(self) -> str:
        return self.message.role

    @property
    def content(self) -> str:  # the text shown, newer than `message.content` while and after streaming
        return self.text

    def key(self) -> tuple:
        """Everything the row's HTML depends on: equal keys render the same, across reloads."""
        if self._key is None or self._key[0] != self.version:
            self._key = (
                self.version,
                (
                    self.text,
                    self.status,
                    self.expanded,
                    self.branch,
                    stats_line(self.stats, self.finish_reason),
                    self.error,
                    self.image_count,
                    self.thumbnails is not None,
                    self.sources,
                ),
            )
        return (*self._key[1], look_generation())  # a new theme's colours render anew


def stats_line(stats: dict[str, Any] | None, finish_reason: str | None) -> str:
    s = stats or {}
    parts = []
    ttft = s.get("time_to_first_token_s") or 0
    if ttft:
        parts.append(f"TTFT {ttft:.2f} s")
    tps = s.get("decode_tok_s") or 0
    if tps:
        parts.append(f"{tps:.1f} tok/s")
    if s.get("generated_tokens"):
        parts.append(fmt_n(int(s["generated_tokens"]), "token"))
    # Prompt tokens reused from the engine's cache (a slot's or the RAM cache's), not evaluated again.
    cached = int(s.get("prompt_tokens") or 0) - int(s.get("prompt_tokens_evaluated") or 0)
    if s.get("prompt_tokens_evaluated") is not None and cached > 0:
        parts.append(f"{cached:,} cached")
    drafts = GenerationStats(
        draft_tokens=int(s.get("draft_tokens") or 0), draft_accepted=int(s.get("draft_accepted") or 0)
    )
    if (rate := drafts.acceptance_rate) is not None:  # speculative decoding drafted tokens
        # Plain words for "draft acceptance": the share of the tokens guessed ahead that the model kept.
        parts.append(f"guessed ahead: {100 * rate:.0f} % kept")
    if finish_reason:
        parts.append(f"finish: {finish_reason}")
    if s.get("tools_offered") and s.get("tools_used") == 0:  # tools rode in the prompt and went unused
        parts.append(unused_tools_line(int(s["tools_offered"]), s.get("tools_prompt_tokens")))
    return " · ".join(parts)


class MessagesModel(QStandardItemModel):
    """The rows live in `rows` (Python); each has a QStandardItem holding its text (for
    accessibility) and its size hint. Storing the hints in C++ items lets QListView lay out a
    5,000-row chat in under a millisecond: asking a Python delegate for every row's size on each
    streaming flush cost ~3 µs a row. `sizer` (the view's) computes a row's hint."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []
        self._index: dict[int, int] = {}
        self._html: collections.OrderedDict[int, tuple[tuple, Rendered]] = collections.OrderedDict()
        self._expanded: set[int] = set()  # reasoning blocks the user opened, kept across reloads
        self.renders = 0  # markdown renders so far (tests check caching)
        # Thumbnails of messages' images, by message id, made on the pool (ThreadView); kept across reloads.
        self.thumbnails: collections.OrderedDict[int, list[QImage]] = collections.OrderedDict()
        self.sizer: Callable[[Row, bool], QSize] | None = None  # (row, exact) -> size hint

    # -- content --------------------------------------------------------------------------------
    def _item(self, row: Row, exact: bool) -> QStandardItem:
        item = QStandardItem(row.text)
        item.setEditable(False)
        if self.sizer is not None:
            item.setData(self.sizer(row, exact), Qt.ItemDataRole.SizeHintRole)
        return item

    def set_messages(
        self,
        messages: list[Message],
        branches: dict[int, tuple[int, int]] | None = None,
        live: dict[int, str] | None = None,
        image_counts: dict[int, int] | None = None,
        sources: dict[int, list[Source]] | None = None,
    ) -> None:
        """Replace the thread. `live`: text of replies streaming right now (newer than the DB); `sources`: the
        passages replies were given, by message id."""
        branches, live, image_counts = branches or {}, live or {}, image_counts or {}
        self.rows = [
            Row(
                m,
                live.get(m.id, m.content),
                m.status,
                branches.get(m.id, (1, 1)),
                m.stats,
                m.finish_reason,
                m.error,
                expanded=m.id in self._expanded,
                image_count=image_counts.get(m.id, 0),
                thumbnails=self.thumbnails.get(m.id),
            )
            for m in messages
        ]
        self._index = {r.id: i for i, r in enumerate(self.rows)}
        self._spread_sources(sources or {})
        calls = {c.get("id"): c for r in self.rows for c in r.message.tool_calls or ()}
        for r in self.rows:
            if r.role == "tool" and (call := calls.get(r.message.tool_call_id)) is not None:
                r.tool = f"{call.get('tool')} from {call.get('server')}"
        last = len(self.rows) - 1
        items = [self._item(r, i == last) for i, r in enumerate(self.rows)]  # exact last: following lands
        self.clear()
        if items:
            self.invisibleRootItem().appendRows(items)

    def _spread_sources(self, sources: dict[int, list[Source]]) -> None:
        """Each reply's passages; a reply with tools saves them with its first turn, and the turns after its tool
        results (which cite them) show them too, up to the next message of the user's."""
        turn: tuple[Source, ...] = ()
        for r in self.rows:
            if r.role == "user":
                turn = ()
            elif r.role == "assistant":
                turn = tuple(sources.get(r.id, ())) or turn
                r.sources = turn

    def set_sources(self, msg_id: int, sources: list[Source]) -> None:
        """UI thread: a reply's passages, read once they are saved (its search ran after its row was shown)."""
        i = self._index.get(msg_id)
        if i is not None and tuple(sources) != self.rows[i].sources:
            self.rows[i].sources = tuple(sources)
            self._changed(i)

    def append(self, message: Message, image_count: int = 0) -> None:
        row = Row(message, message.content, message.status, image_count=image_count)
        self.rows.append(row)
        self._index[message.id] = len(self.rows) - 1
        self.appendRow(self._item(row, True))

    def resize_rows(self) -> None:
        """Size every row again (the width changed). No per-row signals: views are emitted once."""
        if self.sizer is None:
            return
        last = len(self.rows) - 1
        blocked = self.blockSignals(True)
        try:
            for i, row in enumerate(self.rows):
                self.item(i).setData(self.sizer(row, i == last), Qt.ItemDataRole.SizeHintRole)
        finally:
            self.blockSignals(blocked)

    def set_height(self, i: int, size: QSize) -> None:
        """The row's real size, known once it is painted (UI thread, from the delegate)."""
        item = self.item(i)
        if item is not None and item.data(Qt.ItemDataRole.SizeHintRole) != size:
            item.setData(size, Qt.ItemDataRole.SizeHintRole)

    def row_of(self, msg_id: int) -> int | None:
        return self._index.get(msg_id)

    def row(self, msg_id: int) -> Row | None:
        i = self._index.get(msg_id)
        return None if i is None else self.rows[i]

    def _changed(self, i: int) -> None:
        row = self.rows[i]
        row.version += 1
        item = self.item(i)
        emitted = item.data(Qt.ItemDataRole.DisplayRole) != row.text
        item.setData(row.text, Qt.ItemDataRole.DisplayRole)
        if self.sizer is not None:  # the changed row is measured exactly: it is the one being watched
            hint = self.sizer(row, True)
            emitted = emitted or item.data(Qt.ItemDataRole.SizeHintRole) != hint
            item.setData(hint, Qt.ItemDataRole.SizeHintRole)
        if not emitted:
            # setData emits nothing for an unchanged value: a reply finishing with its streamed text at the
            # same height changed only its status and stats, and the view kept painting "writing…".
            index = self.indexFromItem(item)
            self.dataChanged.emit(index, index)

    def update_text(self, msg_id: int, text: str) -> None:
        i = self._index.get(msg_id)
        if i is not None:
            self.rows[i].text = text
            self._changed(i)

    def finish(
        self, msg_id: int, status: str, text: str, stats: dict | None, finish_reason: str | None, error: str | None
    ) -> None:
        i = self._index.get(msg_id)
        if i is None:
            return
        r = self.rows[i]
        r.text, r.status, r.stats, r.finish_reason, r.error = text, status, stats, finish_reason, error
        self._changed(i)

    def set_thumbnails(self, msg_id: int, images: list[QImage]) -> None:
        """UI thread: a message's thumbnails are made; its row shows them."""
        self.thumbnails[msg_id] = images
        self.thumbnails.move_to_end(msg_id)
        while len(self.thumbnails) > HTML_CACHE:
            self.thumbnails.popitem(last=False)
        if (i := self._index.get(msg_id)) is not None:
            self.rows[i].thumbnails = images
            self._changed(i)

    def image_resources(self, row: Row) -> dict[str, QImage]:
        """The row's thumbnails by the names its HTML gives them (a document loads nothing else); a blank tile
        in the thread's colour for one not made yet or that no longer decodes, never Qt's broken-image icon."""
        made = row.thumbnails or []
        return {
            image_url(row.id, i): made[i] if i < len(made) and not made[i].isNull() else blank_tile()
            for i in range(row.image_count)
        }

    def toggle_reasoning(self, msg_id: int) -> None:
        i = self._index.get(msg_id)
        if i is not None:
            row = self.rows[i]
            row.expanded = not row.expanded
            (self._expanded.add if row.expanded else self._expanded.discard)(msg_id)
            self._changed(i)

    # -- rendering ------------------------------------------------------------------------------
    def rendered(self, row: Row) -> Rendered:
        key = row.key()
        hit = self._html.get(row.id)
        if hit is not None and hit[0] == key:
            self._html.move_to_end(row.id)
            row.rendered = hit[1]
            return hit[1]
        streaming = row.status == "streaming"
        if row.message.role == "tool":
            body = Rendered(result_html(row.text, error=row.status == "error", expanded=row.expanded))
        elif streaming and len(row.text) > STREAM_MARKDOWN_CHARS:
            body = Rendered(plain_html(row.text))
        else:
            body = render_message(
                row.text,
                role=row.message.role,
                reasoning_expanded=row.expanded,
                streaming=streaming,
                citations=frozenset(s.number for s in row.sources),
            )
        self.renders += 1
        images, calls = images_html(row), calls_html(row.message.tool_calls)
        given = sources_html(row) if not streaming else ""
        row.rendered = replace(body, html=header_html(row) + images + body.html + calls + given + _footer(row))
        self._html[row.id] = (key, row.rendered)
        self._html.move_to_end(row.id)
        while len(self._html) > HTML_CACHE:
            self._html.popitem(last=False)
        return row.rendered


def header_html(row: Row) -> str:
    label = ROLE_LABEL.get(row.message.role, row.message.role) + (f" · {html.escape(row.tool)}" if row.tool else "")
    out = f"<p style='margin-bottom:4px'><b>{label}</b>"
    pos, count = row.branch
    if count > 1:
        out += (
            f" &nbsp; <a href='branch:prev'>‹</a> <span style='color:{look().muted}'>{pos}/{count}</span>"
            " <a href='branch:next'>›</a>"
        )
    actions = ["<a href='act:copy'>Copy</a>"]
    if row.message.role == "user":
        actions.append("<a href='act:edit'>Edit</a>")
    actions.append("<a href='act:delete'>Delete</a>")
    out += " &nbsp; <span style='font-size:small'>" + " · ".join(actions) + "</span></p>"
    return out


def blank_tile() -> QImage:
    tile = QImage(THUMB_SIDE, THUMB_SIDE, QImage.Format.Format_RGB32)
    tile.fill(QColor(look().rule))
    return tile


def image_url(msg_id: int, i: int) -> str:
    return f"hearth-image:{msg_id}/{i}"


def images_html(row: Row) -> str:
    """The message's images as a row of thumbnails; blank tiles of the same size until they are made."""
    if not row.image_count:
        return ""
    tiles, thumbnails = [], row.thumbnails
    for i in range(row.image_count):
        thumb = thumbnails[i] if thumbnails and i < len(thumbnails) and not thumbnails[i].isNull() else None
        w, h = (thumb.width(), thumb.height()) if thumb is not None else (THUMB_SIDE, THUMB_SIDE)
        tiles.append(f"<img src='{image_url(row.id, i)}' width='{w}' height='{h}' alt='image {i + 1}'>")
    return "<p style='margin-bottom:6px'>" + "&nbsp;".join(tiles) + "</p>"


SOURCE_PREVIEW_CHARS = 160  # of a passage, under its place in the Sources block (the side panel shows it whole)


def shown_sources(row: Row) -> list[Source]:
    """The passages a reply's Sources block lists: the ones its text cites, or all it was given when it cites
    none (what the model read is never hidden)."""
    return cited(row.text, row.sources) or list(row.sources)


def sources_html(row: Row) -> str:
    """The Sources block under a reply: per passage its number (a link to the side panel), the file, page or
    section, and the passage's start. Every piece of it is the user's files' text: escaped."""
    if not row.sources or row.role != "assistant":
        return ""
    shown = shown_sources(row)
    title = "Sources" if cited(row.text, row.sources) else "Sources given (none cited)"
    muted = look().muted
    lines = []
    for s in shown:
        first = " ".join(s.text.split())
        preview = first[:SOURCE_PREVIEW_CHARS] + ("…" if len(first) > SOURCE_PREVIEW_CHARS else "")
        where = html.escape(s.where)
        origin = html.escape(s.collection) if s.collection else "attached"
        lines.append(
            f"<tr><td valign='top'><a href='source:{s.number}'>[{s.number}]</a></td>"
            f"<td><a href='source:{s.number}'>{where}</a> <span style='color:{muted}'>· {origin}</span><br>"
            f"<span style='color:{muted}; font-size:small'>{html.escape(preview)}</span></td></tr>"
        )
    return (
        f"<p style='margin-top:8px; margin-bottom:2px'><b>{title}</b></p>"
        "<table cellspacing='0' cellpadding='2'>" + "".join(lines) + "</table>"
    )


def _footer(row: Row) -> str:
    notes = []
    if row.message.role == "assistant":
        if line := stats_line(row.stats, row.finish_reason):
            notes.append(html.escape(line))
        if row.status in STATUS_NOTE:
            notes.append(STATUS_NOTE[row.status])
        if row.status == "error":
            notes.append(
                f"<span style='color:{look().error}'>Error: " + html.escape(row.error or "unknown") + "</span>"
            )
    if not notes:
        return ""
    return f"<p style='color:{look().muted}; font-size:small; margin-top:4px'>" + " · ".join(notes) + "</p>"
