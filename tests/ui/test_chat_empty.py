"""An empty chat says what to do: the model it talks to and example prompts, or how to load a model."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.chat.empty_state import EXAMPLE_PROMPTS
from tests.ui.chat_harness import send_and_wait


def test_with_no_model_the_empty_thread_says_how_to_load_one(make_chat):
    _h, page = make_chat(load=False)
    empty = page.thread_view.empty
    assert page.thread_view.showing_empty and empty.isVisible()
    assert empty.title.text() == "No model loaded" and "press Load" in empty.line.text()
    assert not any(b.isVisible() for b in empty.examples)  # nothing could be sent yet


def test_a_new_chat_shows_the_model_and_examples_that_fill_the_composer(make_chat, qtbot):
    h, page = make_chat(load=False)
    h.load()
    empty = page.thread_view.empty
    qtbot.waitUntil(lambda: empty.title.text() == "model.fake", timeout=5000)
    assert empty.line.text() == "Ask anything. Replies stay on this computer."
    assert [b.text() for b in empty.examples if b.isVisible()] == list(EXAMPLE_PROMPTS)
    qtbot.mouseClick(empty.examples[1], Qt.MouseButton.LeftButton)
    assert page.composer.text() == EXAMPLE_PROMPTS[1] and page.thread_view.showing_empty  # filled, not sent
    send_and_wait(qtbot, page, page.composer.text())
    assert not page.thread_view.showing_empty and page.thread_view.view.isVisible()
