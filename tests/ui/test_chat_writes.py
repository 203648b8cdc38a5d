"""The Chat page writes nothing on the UI thread: new/rename/delete chats, delete messages, switch
branches, settings and presets go to the chat writer thread; their results reach the page, the page
is right while they are in flight, and a failed write says why and keeps what the user did."""

from __future__ import annotations

import json
import threading

from PySide6.QtCore import Qt

from app.core.chat.export import export_json
from app.core.chat.models import ChatStoreWriteError
from app.core.chat.operations import WRITER_THREAD
from app.core.engines.base import SamplingParams
from app.ui.chat import ChatPage
from tests.core.chat.test_operations import WRITES
from tests.ui.chat_harness import limit_tokens, new_chat, send_and_wait, switch_branch


def record_writes(page: ChatPage, monkeypatch) -> list[tuple[str, threading.Thread]]:
    """(store method, thread) for every write of the page's store from now on."""
    calls: list[tuple[str, threading.Thread]] = []
    for name in WRITES:
        real = getattr(page.store, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, threading.current_thread()))
            return _real(*args, **kwargs)

        monkeypatch.setattr(page.store, name, spy)
    return calls


def hold_writer(page: ChatPage) -> threading.Event:
    """The writer is stuck in a slow write (an fsync on a slow disk) until the event is set."""
    release = threading.Event()
    page.chats.run(release.wait, 10)
    return release


def break_writes(page: ChatPage, monkeypatch, *names: str, error: Exception | None = None) -> None:
    def full(*args, **kwargs):
        raise error or ChatStoreWriteError("Could not save it: the disk is full.")

    for name in names:
        monkeypatch.setattr(page.store, name, full)


def listed(page: ChatPage) -> list[int]:
    lst = page.conversations.list
    return [lst.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lst.count())]


def settled(qtbot, page: ChatPage) -> None:
    """Wait until every write asked so far is done and its answer delivered (answers come in order)."""
    done: list[object] = []
    page.writes.watch(page.chats.run(lambda: None), done.append)
    qtbot.waitUntil(lambda: bool(done), timeout=5000)


def error_shown(qtbot, page: ChatPage, text: str) -> None:
    qtbot.waitUntil(lambda: page.notice.property("level") == "error" and page.notice.isVisible(), timeout=5000)
    assert text in page.notice.text()


def test_every_chat_write_runs_on_the_writer_thread_and_its_result_reaches_the_page(
    make_chat, qtbot, monkeypatch, tmp_path
):
    _h, page = make_chat()
    limit_tokens(page, 5)
    calls = record_writes(page, monkeypatch)
    first = page.conv_id
    _, first_reply = send_and_wait(qtbot, page, "hello")  # the user turn, the reply row and its final save
    with qtbot.waitSignal(page.reply_finished, timeout=10_000) as got:
        assert page.replies.regenerate()
    second_reply = got.args[0]
    switch_branch(qtbot, page, second_reply, -1)
    assert page.thread_view.rows[-1].text == first_reply.text

    second = new_chat(qtbot, page)
    assert page.conv_id == second and listed(page)[0] == second
    page.edits.rename(second, "Planning")
    page.chats.flush()
    assert page.store.get_conversation(second).title == "Planning"

    panel = page.settings
    panel.system_prompt.setPlainText("Be brief.")
    panel.temperature.setValue(0.25)
    with qtbot.waitSignal(panel.saved, timeout=5000) as saved:
        panel.save()
    assert saved.args[0].system_prompt == "Be brief." and saved.args[0].sampling.temperature == 0.25
    assert page.store.get_conversation(second).sampling.temperature == 0.25

    panel.save_as_preset("Mine")
    qtbot.waitUntil(lambda: panel.presets.currentText() == "Mine", timeout=5000)
    mine = panel.presets.currentData()
    assert page.store.get_conversation(second).preset_id == mine
    panel.temperature.setValue(0.5)
    panel.update_selected_preset()
    page.chats.flush()
    qtbot.waitUntil(lambda: page.store.get_preset(mine).sampling.temperature == 0.5, timeout=5000)
    builtin = next(p for p in page.store.list_presets() if p.builtin)
    panel.pick_preset(builtin.id)  # saves the edit above first, then applies the preset
    qtbot.waitUntil(lambda: page.store.get_conversation(second).preset_id == builtin.id, timeout=5000)
    stored = page.store.get_conversation(second)
    assert stored.preset_id == builtin.id and stored.sampling == builtin.sampling
    assert panel.temperature.value() == builtin.sampling.temperature
    panel.presets.setCurrentIndex(panel.presets.findData(mine))
    panel.delete_selected_preset()
    qtbot.waitUntil(lambda: panel.presets.findData(mine) == -1, timeout=5000)

    page.open_conversation(first)
    user = page.thread_view.rows[0].id
    with qtbot.waitSignal(page.thread_view.changed, timeout=5000):
        page.thread_view.delete_message(page.thread_view.rows[-1].id)
    assert [r.id for r in page.thread_view.rows] == [user]

    (tmp_path / "c.json").write_text(export_json(page.store, first))
    with qtbot.waitSignal(page.files_done, timeout=5000):
        page.import_from(tmp_path / "c.json")
    imported = page.conv_id
    assert imported not in (first, second) and [r.text for r in page.thread_view.rows] == ["hello"]
    page.edits.delete(imported)
    page.chats.flush()
    qtbot.waitUntil(lambda: imported not in listed(page), timeout=5000)
    assert imported not in [c.id for c in page.store.list_conversations()]

    assert {n for n, _ in calls} >= {
        "add_user_message",
        "begin_assistant",
        "finish_assistant",
        "switch_branch",
        "create_conversation",
        "rename_conversation",
        "update_settings",
        "save_preset",
        "update_preset",
        "delete_preset",
        "delete_message",
        "import_conversation",
        "delete_conversation",
    }
    assert all(t.name.startswith(WRITER_THREAD) for _, t in calls), [(n, t.name) for n, t in calls]
    assert page.notice.property("level") != "error"


def test_the_page_is_right_while_writes_wait_and_never_waits_for_them(make_chat, qtbot):
    _h, page = make_chat()
    keep = page.store.create_conversation("keep")
    gone = page.store.create_conversation("gone")
    page.refresh_conversations()
    page.open_conversation(gone.id)
    release = hold_writer(page)
    page.edits.rename(gone.id, "Going")
    assert page.header.title.text() == "Going" and page.conversations.list.item(0).text() == "Going"
    page.settings.system_prompt.setPlainText("typed while the disk is slow")
    page.settings.save()
    page.open_conversation(keep.id)
    page.open_conversation(gone.id)  # reopened before the save is committed: the edit still shows
    assert page.settings.system_prompt.toPlainText() == "typed while the disk is slow"
    page.edits.delete(gone.id)
    assert listed(page) == [keep.id] and page.conv_id == keep.id  # gone at once; the next chat opens
    assert not release.is_set()  # every call above returned while the writer was stuck
    release.set()
    settled(qtbot, page)
    assert [c.id for c in page.store.list_conversations()] == [keep.id] and listed(page) == [keep.id]


def test_settings_being_saved_are_the_ones_the_request_uses(make_chat, qtbot):
    h, page = make_chat()
    limit_tokens(page, 5)
    page.settings.system_prompt.setPlainText("You answer in French.")  # saved with the send, off the UI thread
    release = hold_writer(page)
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        assert page.replies.send("hello")
        release.set()
    sent = h.engines[0].generations[-1]
    assert sent.messages[0].role == "system" and sent.messages[0].content == "You answer in French."
    assert page.store.get_conversation(page.conv_id).system_prompt == "You answer in French."


def test_a_failed_rename_new_chat_or_deletion_says_why_and_puts_things_back(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    conv = page.store.create_conversation("Original")
    page.refresh_conversations()
    page.open_conversation(conv.id)
    break_writes(page, monkeypatch, "rename_conversation", "create_conversation", "delete_conversation")

    release = hold_writer(page)
    page.edits.rename(conv.id, "Never saved")
    assert page.header.title.text() == "Never saved"  # shown at once…
    release.set()
    error_shown(qtbot, page, "disk is full")
    assert page.header.title.text() == "Original"  # …and back when the write failed
    assert page.conversations.list.item(0).text() == "Original"

    page.show_notice("")
    page.new_conversation()
    error_shown(qtbot, page, "disk is full")
    assert listed(page) == [conv.id] and page.conv_id == conv.id

    page.show_notice("")
    release = hold_writer(page)
    page.edits.delete(conv.id)
    assert listed(page) == [] and page.conv_id is None
    release.set()
    error_shown(qtbot, page, "disk is full")
    assert listed(page) == [conv.id] and page.conv_id == conv.id  # nothing was deleted: shown again
    assert page.store.get_conversation(conv.id).title == "Original"


def test_failed_message_writes_keep_the_thread_as_stored(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    limit_tokens(page, 5)
    send_and_wait(qtbot, page, "hello")
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        assert page.replies.regenerate()
    before = [(r.id, r.text, r.branch) for r in page.thread_view.rows]
    break_writes(page, monkeypatch, "delete_message", "switch_branch")
    page.thread_view.delete_message(before[-1][0])
    error_shown(qtbot, page, "disk is full")
    assert [(r.id, r.text, r.branch) for r in page.thread_view.rows] == before
    page.show_notice("")
    page.thread_view.activate(before[-1][0], "branch:prev")
    error_shown(qtbot, page, "disk is full")
    assert [(r.id, r.text, r.branch) for r in page.thread_view.rows] == before
    assert page.store.active_path(page.conv_id)[-1].id == before[-1][0]


def test_a_failed_settings_save_keeps_what_was_typed_and_saves_it_later(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    limit_tokens(page, 5)
    panel, real = page.settings, page.store.update_settings
    break_writes(page, monkeypatch, "update_settings")
    panel.system_prompt.setPlainText("Keep this prompt.")
    panel.save()
    error_shown(qtbot, page, "disk is full")
    assert panel.system_prompt.toPlainText() == "Keep this prompt."
    assert page.store.get_conversation(page.conv_id).system_prompt == ""
    monkeypatch.setattr(page.store, "update_settings", real)  # space freed
    with qtbot.waitSignal(panel.saved, timeout=5000):
        panel.save()  # nothing typed since: the failed edit is written now
    assert page.store.get_conversation(page.conv_id).system_prompt == "Keep this prompt."


def test_failed_preset_writes_say_why_and_the_panel_shows_the_stored_settings(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    limit_tokens(page, 5)
    panel = page.settings
    stored = page.store.get_conversation(page.conv_id)
    builtin = next(p for p in page.store.list_presets() if p.builtin and p.sampling != stored.sampling)
    break_writes(page, monkeypatch, "update_settings", "save_preset")
    release = hold_writer(page)
    panel.pick_preset(builtin.id)
    assert panel.temperature.value() == builtin.sampling.temperature  # shown at once…
    release.set()
    error_shown(qtbot, page, "disk is full")
    assert panel.temperature.value() == stored.sampling.temperature  # …and back: the stored settings
    assert panel.conv.sampling == stored.sampling
    page.show_notice("")
    count = panel.presets.count()
    panel.save_as_preset("Mine")
    error_shown(qtbot, page, "disk is full")
    assert panel.presets.count() == count
    page.show_notice("")
    panel.presets.setCurrentIndex(panel.presets.findData(builtin.id))
    panel.delete_selected_preset()  # refused before any write
    assert page.notice.text() == "Built-in presets cannot be deleted."


def test_a_bug_in_a_write_is_reported_as_could_not_save(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    conv = page.store.create_conversation("c")
    page.refresh_conversations()
    page.open_conversation(conv.id)
    break_writes(page, monkeypatch, "rename_conversation", error=RuntimeError("boom"))
    page.edits.rename(conv.id, "x")
    error_shown(qtbot, page, "Could not save the chat: boom")
    assert page.header.title.text() == "c"


def test_deleting_a_chat_while_its_reply_streams_stops_it_without_an_error(make_chat, qtbot):
    _h, page = make_chat(tok_s=300)
    limit_tokens(page, 400)
    doomed = page.conv_id
    other = page.store.create_conversation("other")
    assert page.replies.send("a long answer please")
    qtbot.waitUntil(
        lambda: len(page.thread_view.rows) == 2 and len(page.thread_view.rows[-1].text.split()) >= 5, timeout=5000
    )
    with qtbot.waitSignal(page.reply_finished, timeout=10_000) as got:
        page.edits.delete(doomed)
    assert got.args[1].status == "stopped"
    settled(qtbot, page)
    assert page.conv_id == other.id and listed(page) == [other.id]
    assert [c.id for c in page.store.list_conversations()] == [other.id]
    assert page.notice.property("level") != "error", page.notice.text()


def test_a_send_with_no_chat_open_creates_one_off_the_ui_thread(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    assert page.conv_id is None
    calls = record_writes(page, monkeypatch)
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        assert page.replies.send("first words here")
    conv = page.store.get_conversation(page.conv_id)
    assert conv.title == "first words here" and listed(page) == [conv.id]
    assert next(r.text for r in page.thread_view.rows) == "first words here"
    assert calls and all(t.name.startswith(WRITER_THREAD) for _, t in calls)
    exported = json.loads(export_json(page.store, conv.id))
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]


def test_a_new_chat_copies_the_open_chats_settings(make_chat, qtbot):
    _h, page = make_chat()
    limit_tokens(page, 7)
    conv = page.store.get_conversation(page.conv_id)
    assert conv.sampling == SamplingParams(max_tokens=7)
    second = new_chat(qtbot, page)  # copies the open chat's settings, as before
    assert page.store.get_conversation(second).sampling.max_tokens == 7
