"""The chat fixes of issue 13: what the page shows once a reply finishes, keyboard focus in the
composer, the context meter, the settings panel and the window width, long titles, unfenced code, a
failed model load, and a search with no matches."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from PySide6.QtCore import QEvent, QObject, QRect, Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QApplication

from app.core.chat.models import Message
from app.core.chat.rows import MAX_TITLE
from app.core.engines.base import LoadSpec
from app.ui.chat.message_view import MessageView
from app.ui.chat.messages_model import MessagesModel
from app.ui.chat.render import render_message
from tests.ui.chat_harness import limit_tokens, new_chat, send_and_wait


class PaintSpy(QObject):
    """The regions a widget was asked to paint, from its paint events."""

    def __init__(self) -> None:
        super().__init__()
        self.regions: list[QRect] = []

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        if event.type() == QEvent.Type.Paint:
            self.regions.append(event.rect())
        return False


def test_a_finished_reply_repaints_with_its_stats_without_a_mouse_event(qtbot, qapp):
    now = time.time()
    model = MessagesModel()
    model.set_messages(
        [
            Message(1, 1, None, "user", "hi", "done", now, now),
            Message(2, 1, 1, "assistant", "", "streaming", now, now),
        ]
    )
    view = MessageView()
    qtbot.addWidget(view)
    view.setModel(model)
    view.resize(600, 400)
    view.show()
    qtbot.waitExposed(view)
    model.update_text(2, "Hello there")  # the last flush: the final text, still "writing…"
    spy = PaintSpy()
    view.viewport().installEventFilter(spy)
    qtbot.waitUntil(lambda: bool(spy.regions))
    view.grab()  # paints now, real heights in place: nothing is left to repaint
    qapp.processEvents()
    spy.regions.clear()
    # The same text and, with a one-line stats note in place of "writing…", the same height.
    model.finish(2, "done", "Hello there", {"generated_tokens": 2, "decode_tok_s": 50.0}, "stop", None)
    reply = view.visualRect(model.index(1, 0))
    qtbot.waitUntil(lambda: any(r.intersects(reply) for r in spy.regions), timeout=2000)
    shown = view.delegate.document(model.rows[1], model).toPlainText()
    assert "50.0 tok/s" in shown and "writing…" not in shown


def test_tab_in_the_message_box_moves_focus_and_inserts_nothing(make_chat, qtbot):
    _h, page = make_chat()
    editor = page.composer.editor
    page.activateWindow()
    qtbot.waitActive(page)
    editor.setFocus()
    qtbot.waitUntil(editor.hasFocus)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    assert not editor.hasFocus() and editor.toPlainText() == ""
    after = QApplication.focusWidget()
    qtbot.keyClick(after, Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier)
    assert editor.hasFocus() and editor.toPlainText() == ""
    qtbot.keyClick(editor, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)  # Qt drops text typed with Ctrl
    assert "\t" not in editor.toPlainText()


def test_the_context_meter_is_a_labelled_bar_with_its_reading(make_chat, qtbot, themed):
    _h, page = make_chat(n_ctx=4096)
    limit_tokens(page, 40)
    meter = page.header.meter
    send_and_wait(qtbot, page, "Tell me a tale")
    qtbot.waitUntil(lambda: "/ 4,096" in meter.label.text())
    assert meter.caption.isVisible() and meter.caption.text() == "Context"
    used = int(meter.label.text().lstrip("~").split(" / ")[0].replace(",", ""))
    assert used > 40 and meter.label.text().startswith(f"{used:,} / 4,096")
    assert meter.bar.toolTip().startswith(f"Context: {used:,} of 4,096 tokens used")
    assert meter.bar.isVisible() and (meter.bar.value(), meter.bar.maximum()) == (used, 4096)
    # It reads as a meter: a thin bar whose empty part is a grey track, not a white box like a text field.
    assert meter.bar.height() <= 8
    image = meter.bar.grab().toImage()
    track = image.pixelColor(image.width() - 4, image.height() // 2)
    assert track.name() != "#ffffff" and track.lightness() < 240


def settle(qapp, page) -> None:
    """Run the pending layout requests now (a top-level widget grows to its layout's minimum there)."""
    qapp.sendPostedEvents(None, QEvent.Type.LayoutRequest)
    page.layout().activate()
    qapp.processEvents()


def test_the_settings_panel_opens_and_closes_without_widening_the_window(make_chat, qtbot, qapp):
    _h, page = make_chat()
    page.resize(900, 750)  # the page is the window here, as narrow as a laptop's half screen
    settle(qapp, page)
    assert page.width() == 900
    page.header.settings_button.click()
    settle(qapp, page)
    assert page.settings.isVisible() and page.settings.visibleRegion().boundingRect().width() > 150
    assert page.width() == 900, "opening the settings must not grow the window"
    page.header.settings_button.click()
    settle(qapp, page)
    assert not page.settings.isVisible() and page.width() == 900


def test_a_long_title_ends_in_an_ellipsis_with_the_full_title_in_the_tooltip(make_chat, qtbot):
    _h, page = make_chat()
    title = "A conversation about " + "very " * 30 + "long titles"  # within MAX_TITLE, wider than the header
    assert len(title) <= MAX_TITLE
    conv_id = new_chat(qtbot, page)
    page.edits.rename(conv_id, title)
    shown = page.header.title
    qtbot.waitUntil(lambda: shown.toolTip() == title)
    assert shown.text().endswith("…") and len(shown.text()) < len(title)
    assert shown.fontMetrics().horizontalAdvance(shown.text()) <= shown.contentsRect().width()
    # The list: its row is as wide as the list (so the painted text is elided to it), not the title.
    listed = page.conversations.list
    qtbot.waitUntil(lambda: listed.count() == 1 and listed.item(0).toolTip() == title)
    rect = listed.visualRect(listed.model().index(0, 0))
    assert rect.width() <= listed.viewport().width()
    assert listed.textElideMode() == Qt.TextElideMode.ElideRight
    assert listed.fontMetrics().elidedText(title, Qt.TextElideMode.ElideRight, rect.width()).endswith("…")
    # A short title again is shown whole.
    page.edits.rename(conv_id, "Short")
    qtbot.waitUntil(lambda: shown.text() == "Short")


def shown_lines(html_text: str) -> list[str]:
    """The lines a QTextDocument shows for the HTML (its plain text turns no-break spaces into spaces)."""
    doc = QTextDocument()
    doc.setHtml(html_text)
    return [line.rstrip() for line in doc.toPlainText().splitlines()]  # setHtml ends in a space


def test_code_without_fences_keeps_its_lines_and_indentation(qtbot):
    code = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    assert shown_lines(render_message(code).html) == ["def f(x):", "    if x:", "        return 1", "    return 2"]
    # Prose keeps flowing as Markdown: emphasis, lists and fenced code are untouched.
    prose = "Some *text*\nand more.\n\n- one\n- two\n  continued\n\n```python\nx = 1\n```\n"
    html_text = render_message(prose).html
    assert "<em>text</em>" in html_text and "<li>one</li>" in html_text
    assert shown_lines(html_text)[:2] == ["Some text", "and more."]
    assert "\u00a0" not in html_text, "a list item's continuation is not indented code"


RAW_LOAD_ERROR = (
    "llama.cpp could not load broken.gguf: Failed to load model from file: /models/broken.gguf"
    " (gguf_init_from_file_impl: invalid magic characters: 'XXXX', expected 'GGUF')"
)


def test_a_failed_load_says_why_in_a_sentence_with_the_engine_text_behind_details(make_chat, qtbot):
    _h, page = make_chat(load=False, fail_on_load=RAW_LOAD_ERROR)
    bar = page.model_bar
    assert bar.load_spec(LoadSpec(path=Path("/models/broken.gguf"), n_ctx=2048), "fake", "broken.gguf")
    qtbot.waitUntil(lambda: bar.state.status == "error" and bar.error.isVisible(), timeout=5000)
    assert bar.error.text() == "Could not load broken.gguf: the file is not a valid GGUF model."
    assert RAW_LOAD_ERROR not in bar.error.text()
    assert bar.details_button.isVisible() and not bar.details.isVisible()
    bar.details_button.click()
    assert bar.details.isVisible() and bar.details.toPlainText() == RAW_LOAD_ERROR
    bar.details_button.click()
    assert not bar.details.isVisible()
    # Picking another model clears the error.
    other = SimpleNamespace(id=2, name="other", path="/models/other.fake", format="fake")
    bar.picker.addItem("other · fake", other)
    bar.picker.setCurrentIndex(bar.picker.count() - 1)
    assert not bar.error.isVisible() and not bar.details_button.isVisible() and not bar.details.isVisible()
    # The same failure again (a second try) is shown again.
    assert bar.load_spec(LoadSpec(path=Path("/models/broken.gguf"), n_ctx=2048), "fake", "broken.gguf")
    qtbot.waitUntil(lambda: bar.error.isVisible() and bar.details_button.isVisible(), timeout=5000)


def test_a_search_with_no_matches_says_so(make_chat, qtbot):
    _h, page = make_chat()
    send_and_wait(qtbot, page, "Tell me about otters")
    chats = page.conversations
    assert not chats.no_match.isVisible()
    chats.search.setText("zebras")
    qtbot.waitUntil(lambda: chats.no_match.isVisible(), timeout=5000)
    assert chats.list.count() == 0 and chats.no_match.text() == "No conversations match “zebras”."
    chats.search.setText("otters")
    qtbot.waitUntil(lambda: chats.list.count() == 1, timeout=5000)
    assert not chats.no_match.isVisible()
    chats.search.setText("zebras")
    qtbot.waitUntil(chats.no_match.isVisible, timeout=5000)
    chats.clear_search()  # the plain list: an empty one is no failed search
    qtbot.waitUntil(lambda: chats.list.count() == 1 and not chats.no_match.isVisible(), timeout=5000)


def test_after_a_load_the_focus_goes_to_the_message_box(make_chat, qtbot):
    h, page = make_chat(load=False)
    page.activateWindow()
    qtbot.waitActive(page)
    page.conversations.search.setFocus()
    qtbot.waitUntil(page.conversations.search.hasFocus)
    h.load()
    qtbot.waitUntil(page.composer.editor.hasFocus, timeout=5000)
