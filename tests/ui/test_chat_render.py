"""Message rendering: Markdown, pygments highlighting, collapsible reasoning, hostile HTML as text."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl

from app.core.chat.models import Message
from app.ui.chat.message_view import MessageView, SafeDocument
from app.ui.chat.messages_model import MessagesModel
from app.ui.chat.render import render_message, split_reasoning


def test_markdown_becomes_html():
    r = render_message("# Title\n\nSome **bold** and *italic*.\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert "<h1>Title</h1>" in r.html and "<strong>bold</strong>" in r.html and "<em>italic</em>" in r.html
    assert "<li>one</li>" in r.html and "<table>" in r.html


def test_code_blocks_are_highlighted_with_a_copy_link_each():
    text = "```python\ndef f(x):\n    return x  # done\n```\n\ntext\n\n```\nplain <b>code</b>\n```"
    r = render_message(text)
    assert r.code_blocks == ["def f(x):\n    return x  # done\n", "plain <b>code</b>\n"]
    assert "href='copy:0'" in r.html and "href='copy:1'" in r.html
    assert '<span style="color' in r.html  # pygments inline styles
    assert "&lt;b&gt;code&lt;/b&gt;" in r.html  # unhighlighted blocks are escaped too


def test_reasoning_is_split_out_and_collapsed_by_default():
    text = "<think>secret chain of thought</think>The answer is 4."
    collapsed = render_message(text)
    assert collapsed.has_reasoning and "Reasoning" in collapsed.html and "think:toggle" in collapsed.html
    assert "secret chain" not in collapsed.html and "The answer is 4." in collapsed.html
    expanded = render_message(text, reasoning_expanded=True)
    assert "secret chain of thought" in expanded.html


def test_unterminated_reasoning_while_streaming_and_a_bare_closing_marker():
    streaming = render_message("<think>still thinking about", streaming=True)
    assert "thinking…" in streaming.html and "still thinking" not in streaming.html
    parts = split_reasoning("template opened it</think>final")
    assert parts.reasoning == "template opened it" and parts.answer == "final"
    assert split_reasoning("no reasoning here").has_reasoning is False


class Listener:
    """A local TCP listener that records every connection (nothing may reach it)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(5)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def test_hostile_html_is_text_and_loads_nothing(qtbot, listener):
    url = f"http://127.0.0.1:{listener.port}"
    hostile = (
        f"<img src={url}/a.png> <script>alert('x')</script> <iframe src='{url}/f'></iframe>\n\n"
        f"![pixel]({url}/b.png) [click]({url}/c) <a href='javascript:alert(1)'>js</a>"
    )
    r = render_message(hostile)
    assert "<img" not in r.html and "<script" not in r.html and "<iframe" not in r.html
    assert "&lt;img src=" in r.html and "&lt;script&gt;" in r.html
    assert "[image: pixel]" in r.html and 'href="javascript' not in r.html
    now = time.time()
    model = MessagesModel()
    model.set_messages([Message(1, 1, None, "assistant", hostile, "done", now, now)])
    view = MessageView()
    qtbot.addWidget(view)
    view.setModel(model)
    view.resize(600, 400)
    view.show()
    view.grab()  # paints the row
    # Defense in depth: even a real <img> in a document is never fetched.
    doc = SafeDocument()
    doc.setHtml(f"<p><img src='{url}/d.png'></p>")
    doc.setTextWidth(300)
    view.viewport().repaint()
    assert doc.loadResource(2, QUrl(f"{url}/e.png")).isEmpty()
    qtbot.wait(300)
    assert listener.hits == 0
    assert model.renders == 1


def test_rendered_html_is_cached_per_message_version(qtbot):
    now = time.time()
    model = MessagesModel()
    model.set_messages([Message(1, 1, None, "assistant", "**hi**", "done", now, now)])
    row = model.rows[0]
    first = model.rendered(row)
    assert model.rendered(row) is first and model.renders == 1
    model.update_text(1, "**hi** there")
    assert "there" in model.rendered(row).html and model.renders == 2
    model.toggle_reasoning(1)
    model.rendered(row)
    assert model.renders == 3


def streaming_past_markdown(qtbot) -> tuple[MessagesModel, MessageView, str]:
    """A view of one reply streaming just past STREAM_MARKDOWN_CHARS (shown as plain text, appended to)."""
    from app.ui.chat.messages_model import STREAM_MARKDOWN_CHARS

    now = time.time()
    model = MessagesModel()
    text = "word " * (STREAM_MARKDOWN_CHARS // 5 + 10)
    model.set_messages([Message(1, 1, None, "assistant", text, "streaming", now, now)])
    view = MessageView()
    qtbot.addWidget(view)
    view.setModel(model)
    view.resize(600, 400)
    return model, view, text


def test_long_streaming_reply_grows_one_document_in_place(qtbot):
    model, view, text = streaming_past_markdown(qtbot)
    delegate, row = view.delegate, model.rows[0]
    first = delegate.document(row, model)
    for i in range(5):
        text += f"more {i} "
        model.update_text(1, text)
        doc = delegate.document(row, model)
        assert doc is first  # appended to, not rebuilt
    assert first.toPlainText().endswith("more 4 ")
    assert model.renders == 0  # no Markdown render while it streams this long
    model.finish(1, "done", text + "**end**", {"generated_tokens": 9}, "stop", None)
    done = delegate.document(model.rows[0], model)
    assert done is not first and "end" in done.toPlainText() and "**" not in done.toPlainText()


def test_a_paragraph_that_never_ends_streams_in_pieces_and_finishes_whole(qtbot):
    """A model that writes no line breaks: while it streams, its document is cut into paragraphs of about
    STREAM_PARAGRAPH_CHARS (Qt lays out a whole paragraph on every append); finished, it is one again."""
    from app.ui.chat.message_view import STREAM_PARAGRAPH_CHARS, paragraph_pieces

    assert paragraph_pieces("ab cd\nef", 0) == ("ab cd\nef", 2)
    cut, run = paragraph_pieces("x" * 10 + " tail", STREAM_PARAGRAPH_CHARS - 5)
    assert cut == "x" * 10 + "\ntail" and run == 4  # the first space past the limit becomes the break
    model, view, text = streaming_past_markdown(qtbot)
    delegate, row = view.delegate, model.rows[0]
    delegate.document(row, model)
    for _ in range(30):
        text += "word " * 400
        model.update_text(1, text)
        doc = delegate.document(row, model)
    lengths, block = [], doc.begin()
    while block.isValid():
        lengths.append(block.length())
        block = block.next()
    # The text shown before the appends began is laid out once; every paragraph appended after it is short.
    assert len(lengths) > 30 and max(lengths[2:]) <= STREAM_PARAGRAPH_CHARS + len("word ")
    assert doc.toPlainText().replace("\n", " ").rstrip().endswith(text.rstrip())  # the same words, in pieces
    model.finish(1, "done", text, {"generated_tokens": 9}, "stop", None)
    done = delegate.document(model.rows[0], model)
    assert done.blockCount() <= 3 and "word word" in done.toPlainText()  # one paragraph, as written


RACE = """
import threading
from app.ui.chat import render
barrier = threading.Barrier(2)
errors = []
def warm():
    barrier.wait()
    try:
        render.warm()
    except Exception as e:
        errors.append(repr(e))
t = threading.Thread(target=warm)
t.start()
barrier.wait()
try:
    render.render_message("```python\\nx = 1\\n```")
except Exception as e:
    errors.append(repr(e))
t.join()
print(errors)
"""


def test_warming_on_a_pool_thread_while_the_ui_renders_loads_pygments_once():
    # In a fresh interpreter: pygments' lazily filled modules raised ImportError when two threads
    # first loaded them at once (seen when the app opened on a chat with a code block).
    root = Path(__file__).resolve().parents[2]
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", RACE], cwd=root, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]"
