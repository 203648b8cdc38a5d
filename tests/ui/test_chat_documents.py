"""Documents in the chat window: the Documents menu lists the collections (or says where to add some) and turns one
on for the open conversation; a reply citing [1] shows a Sources block, its [1] a link that opens the passage in
the side panel, whose Open file opens the file; the sources are there again after a restart; a file attached to
the message grounds the reply."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QUrl

from app.core.engines.base import GenerateRequest
from app.ui.chat import source_panel
from app.ui.chat.chat_documents import ATTACH, EMPTY_LINE
from app.ui.chat.render import render_message
from tests.core.chat.doc_fixtures import DISK, indexed
from tests.ui.chat_harness import new_chat, send_and_wait

REPLY = "It means the disk is full [1]."


@pytest.fixture
def with_documents(make_chat, documents):
    """A chat page whose model cites [1], over `documents`; the requests it was given are in `asked`."""
    asked: list[GenerateRequest] = []

    def reply(request: GenerateRequest) -> str:
        asked.append(request)
        return REPLY

    def make():
        h, page = make_chat(load=False, script=reply)
        page.shutdown()  # opened before the documents were given; the next one has them
        h.documents = documents
        page = h.open_page()
        h.load()
        return h, page, asked

    return make


def turn_on(qtbot, page, name: str) -> None:
    """As the Documents menu does it, once a chat is open; waits until it is saved."""
    page.documents._fill()
    action = next(a for a in page.documents.menu.actions() if a.text().startswith(name + " — "))
    assert action.isCheckable() and not action.isChecked()
    with qtbot.waitSignal(page.documents.changed, timeout=5000):
        action.setChecked(True)


def test_the_menu_lists_collections_and_turning_one_on_is_saved_with_the_chat(with_documents, documents, notes, qtbot):
    indexed(documents, "Notes", [notes])
    _h, page, _asked = with_documents()
    conv_id = new_chat(qtbot, page)
    assert page.header.documents_button.text() == "Documents" and page.header.documents_button.isEnabled()
    page.documents._fill()
    texts = [a.text() for a in page.documents.menu.actions()]
    assert texts[0] == "Notes — 2 files" and ATTACH in texts
    turn_on(qtbot, page, "Notes")
    assert page.store.get_conversation(conv_id).doc_collections == ("Notes",)
    assert page.header.documents_button.text() == "Documents (1)"
    page.documents._fill()
    assert page.documents.menu.actions()[0].isChecked()
    with qtbot.waitSignal(page.documents.changed, timeout=5000):
        page.documents.menu.actions()[0].setChecked(False)
    assert page.store.get_conversation(conv_id).doc_collections == ()


def test_a_renamed_collection_stays_on_in_the_chats_that_search_it(with_documents, documents, notes, qtbot):
    indexed(documents, "Notes", [notes])
    _h, page, _asked = with_documents()
    conv_id = new_chat(qtbot, page)
    turn_on(qtbot, page, "Notes")
    with qtbot.waitSignal(page.documents.changed, timeout=5000):
        documents.rename("notes", "Garden")  # from another thread in the app (the Documents page's pool)
    assert page.store.get_conversation(conv_id).doc_collections == ("Garden",)
    assert page.header.documents_button.text() == "Documents (1)"
    page.documents._fill()
    first = page.documents.menu.actions()[0]
    assert first.text().startswith("Garden — ") and first.isChecked()


def test_with_no_collections_the_menu_says_where_to_add_documents(make_chat, qtbot):
    _h, page = make_chat()  # a page given no documents at all
    new_chat(qtbot, page)
    page.documents._fill()
    first = page.documents.menu.actions()[0]
    assert first.text() == EMPTY_LINE and not first.isEnabled()
    assert "Add documents on the Documents page" in EMPTY_LINE


def test_a_cited_reply_shows_its_sources_and_a_citation_opens_the_passage_beside_the_thread(
    with_documents, documents, notes, qtbot, monkeypatch
):
    indexed(documents, "Notes", [notes])
    h, page, asked = with_documents()
    conv_id = new_chat(qtbot, page)
    turn_on(qtbot, page, "Notes")
    msg_id, result = send_and_wait(qtbot, page, "What does error E1042 mean?")
    assert result.status == "done" and result.text == REPLY
    assert "[1] errors.md, Errors\n" + DISK in asked[-1].messages[-1].content
    row = page.thread_view.messages.row(msg_id)
    assert row is not None and row.sources[0].text == DISK
    html = page.thread_view.messages.rendered(row).html
    assert "<a href='cite:1'>[1]</a>" in html and "<b>Sources</b>" in html and "errors.md, Errors" in html
    assert not page.source_panel.isVisible()
    page.thread_view.view.anchor_clicked.emit(msg_id, "cite:1")  # what a click on the [1] link sends
    panel = page.source_panel
    assert panel.isVisible() and panel.title.text() == "[1] errors.md"
    assert panel.place.text() == "Errors · collection Notes" and panel.passage.toPlainText() == DISK
    assert page.thread_split.sizes()[1] >= panel.minimumWidth()
    opened: list[QUrl] = []
    monkeypatch.setattr(source_panel.QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    panel.open_button.click()
    assert [u.toLocalFile() for u in opened] == [str(notes / "errors.md")]
    panel.close_button.click()
    assert not panel.isVisible()
    # A restart: the reply reads its sources back, as they were, even though the file changed since.
    (notes / "errors.md").write_text("# Errors\n\nE1042 is about the network now.\n")
    h.close_page(page)
    page = h.open_page()
    page.open_conversation(conv_id)
    row = page.thread_view.messages.row(msg_id)
    assert row is not None and row.sources[0].text == DISK
    page.thread_view.activate(msg_id, "source:1")  # a line of the Sources block
    assert page.source_panel.passage.toPlainText() == DISK


def test_a_document_dropped_on_the_message_box_grounds_the_reply(with_documents, qtbot, tmp_path):
    _h, page, asked = with_documents()
    memo = tmp_path / "memo.md"
    memo.write_text("# Memo\n\nThe meeting moved to Thursday.\n")
    drop = QMimeData()
    drop.setUrls([QUrl.fromLocalFile(str(memo))])
    assert page.composer.editor.canInsertFromMimeData(drop)
    page.composer.editor.insertFromMimeData(drop)
    qtbot.waitUntil(lambda: len(page.composer.documents.documents) == 1, timeout=10_000)
    assert page.composer.documents.chips()[0].text().startswith("memo.md")
    assert page.composer.text() == ""  # the file's name is not typed into the message
    page.composer.set_text("When is the meeting?")
    msg_id, result = send_and_wait(qtbot, page, None)  # as Send does: the composer's text and files
    assert result.status == "done"
    sent = asked[-1].messages[-1].content
    assert "[1] memo.md\nThe meeting moved to Thursday." in sent and sent.endswith("Question: When is the meeting?")
    assert page.composer.documents.documents == [] and not page.composer.documents.isVisible()
    (given,) = page.thread_view.messages.row(msg_id).sources
    assert given.collection == "" and given.file == memo


def test_a_file_that_cannot_be_read_is_not_attached_and_says_why(with_documents, qtbot, tmp_path):
    _h, page, _asked = with_documents()
    (tmp_path / "empty.txt").write_text("   \n")
    with qtbot.waitSignal(page.documents.notice, timeout=10_000) as said:
        page.documents.attach_files([tmp_path / "empty.txt"])
    assert said.args[0].startswith("Not attached: empty.txt") and said.args[1] == "error"
    assert page.composer.documents.documents == []


def test_citations_in_code_and_numbers_not_given_stay_text():
    html = render_message("See [1] and [7]; `x[1]` in code.", citations=frozenset({1})).html
    assert html.count("href='cite:1'") == 1 and "href='cite:7'" not in html and "x[1]" in html
    assert "href='cite" not in render_message("See [1].").html  # a reply given no passages
