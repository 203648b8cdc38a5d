"""Unsent text stays with its conversation: Ctrl+N starts an empty chat, and going back puts the draft back."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.chat_harness import new_chat, send_and_wait


def test_ctrl_n_starts_empty_and_the_draft_comes_back_with_its_chat(make_chat, qtbot):
    _h, page = make_chat()
    send_and_wait(qtbot, page, "hello")
    first = page.conv_id
    page.activateWindow()
    qtbot.waitUntil(page.isActiveWindow)  # a shortcut reaches only the active window
    page.composer.editor.setFocus()
    qtbot.keyClicks(page.composer.editor, "half a thought")
    with qtbot.waitSignal(page.conversation_opened, timeout=5000) as opened:
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    second = opened.args[0]
    assert second != first and page.composer.text() == ""  # the new chat starts empty
    qtbot.keyClicks(page.composer.editor, "for the second")
    page.open_conversation(first)
    assert page.composer.text() == "half a thought"
    page.open_conversation(second)
    assert page.composer.text() == "for the second"


def test_an_edit_in_progress_is_not_kept_as_a_draft(make_chat, qtbot):
    _h, page = make_chat()
    send_and_wait(qtbot, page, "a question")
    first = page.conv_id
    page.thread_view.begin_edit(page.thread_view.rows[0].id)
    assert page.composer.text() == "a question" and page.replies.editing is not None
    new_chat(qtbot, page)
    assert page.composer.text() == "" and page.replies.editing is None
    page.open_conversation(first)
    assert page.composer.text() == ""  # the edit ended; the message itself is unchanged


def test_deleting_a_chat_drops_its_draft_and_shows_the_next_ones(make_chat, qtbot):
    _h, page = make_chat()
    send_and_wait(qtbot, page, "one")
    first = page.conv_id
    page.composer.set_text("first's draft")
    second = new_chat(qtbot, page)
    page.composer.set_text("second's draft")
    page.edits.delete(second)
    assert page.composer.text() != "second's draft"  # never the deleted chat's draft, in any chat
    qtbot.waitUntil(lambda: page.conv_id == first, timeout=15_000)  # opened once the deletion is shown
    assert page.composer.text() == "first's draft"
    page.chats.flush()
    qtbot.waitUntil(lambda: page.unsent.draft(second) == "", timeout=5000)
