"""The chat fixes of issue 13: what the page shows once a reply finishes, keyboard focus in the
composer, the context meter, the settings panel and the window width, long titles, unfenced code, a
failed model load, and a search with no matches."""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, QObject, QRect, Qt
from PySide6.QtWidgets import QApplication

from app.core.chat.models import Message
from app.ui.chat.message_view import MessageView
from app.ui.chat.messages_model import MessagesModel


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
