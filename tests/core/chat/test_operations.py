"""ChatOperations: every chat write on its one writer thread, in order; failures as user messages;
reads that see the writes in flight; a closed writer refuses without raising."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from app.core.chat.models import ChatImportError, ChatNotFound, ChatStoreError, ChatStoreWriteError
from app.core.chat.operations import WRITER_THREAD, ChatOperations, SavedTurn
from app.core.chat.store import ChatStore
from app.core.engines.base import GenerationStats, SamplingParams

WRITES = (
    "create_conversation",
    "rename_conversation",
    "delete_conversation",
    "update_settings",
    "save_preset",
    "update_preset",
    "delete_preset",
    "add_user_message",
    "begin_assistant",
    "edit_user_message",
    "delete_message",
    "switch_branch",
    "update_streaming",
    "finish_assistant",
    "import_conversation",
)


@pytest.fixture
def ops(store):
    o = ChatOperations(store)
    yield o
    o.close()


def record_writes(store: ChatStore, monkeypatch) -> list[tuple[str, str]]:
    """(method, thread name) for every store write from now on."""
    calls: list[tuple[str, str]] = []
    for name in WRITES:
        real = getattr(store, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, threading.current_thread().name))
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)
    return calls


def blocked(ops: ChatOperations) -> threading.Event:
    """Hold the writer in a slow write (an fsync on a slow disk) until the event is set."""
    release = threading.Event()
    ops.run(release.wait, 10)
    return release


def test_every_operation_runs_on_the_writer_thread_in_order(ops, store, monkeypatch, tmp_path):
    calls = record_writes(store, monkeypatch)
    release = blocked(ops)
    conv_f = ops.create_conversation("first", system_prompt="Be brief.")
    # Nothing ran yet: every operation waits its turn behind the slow write, and none blocked here.
    assert calls == [] and not conv_f.done()
    release.set()
    conv = conv_f.result(5)
    turn = ops.send(conv.id, "hello", title="Greeting").result(5)
    assert isinstance(turn, SavedTurn) and turn.conversation_id == conv.id and turn.reply_id is not None
    ops.save_partial(turn.reply_id, "Hi").result(5)
    ops.finish_reply(turn.reply_id, "Hi there", "done", GenerationStats(generated_tokens=2), "stop", None).result(5)
    again = ops.regenerate(conv.id, turn.parent_id).result(5)
    assert again.parent_id == turn.parent_id and again.reply_id not in (None, turn.reply_id)
    assert ops.switch_branch(again.reply_id, -1).result(5) == turn.reply_id
    edited = ops.edit_and_resend(conv.id, turn.parent_id, "hello again", reply=False).result(5)
    assert edited.reply_id is None and store.get_message(edited.parent_id).content == "hello again"
    ops.rename(conv.id, "Renamed").result(5)
    saved = ops.update_settings(conv.id, sampling=SamplingParams(temperature=0.3), context_length=2048).result(5)
    assert saved.sampling.temperature == 0.3 and saved.context_length == 2048
    preset = ops.save_preset("Mine", "Be kind.", SamplingParams(temperature=0.9), conv_id=conv.id).result(5)
    assert store.get_conversation(conv.id).preset_id == preset.id
    ops.update_preset(preset.id, system_prompt="Be kinder.", sampling=SamplingParams(top_k=5)).result(5)
    applied = ops.apply_preset(conv.id, preset.id).result(5)
    assert applied.system_prompt == "Be kinder." and applied.sampling.top_k == 5
    ops.delete_preset(preset.id).result(5)
    ops.delete_message(edited.parent_id).result(5)
    path = tmp_path / "chat.json"
    from app.core.chat.export import export_json

    path.write_text(export_json(store, conv.id))
    imported = ops.import_file(path).result(5)
    ops.delete_conversation(conv.id).result(5)
    new_chat = ops.send(None, "fresh start", title="fresh start").result(5)

    assert {name for name, _ in calls} == set(WRITES)
    assert all(thread.startswith(WRITER_THREAD) for _, thread in calls), calls
    assert [n for n, _ in calls][:3] == ["create_conversation", "add_user_message", "rename_conversation"]
    titles = {c.title for c in store.list_conversations()}
    assert titles == {"fresh start", "Renamed"} and imported != conv.id and new_chat.conversation_id != conv.id
    with pytest.raises(ChatNotFound):
        store.get_conversation(conv.id)


def test_a_store_error_keeps_its_text_and_a_bug_becomes_could_not_save(ops, store, monkeypatch, caplog):
    conv = ops.create_conversation("c").result(5)

    def full(*args, **kwargs):
        raise ChatStoreWriteError("Could not save the new title: the disk is full.")

    def bug(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(store, "rename_conversation", full)
    err = ops.rename(conv.id, "x").exception(5)
    assert isinstance(err, ChatStoreWriteError) and "disk is full" in str(err)
    monkeypatch.setattr(store, "delete_message", bug)
    with caplog.at_level(logging.ERROR, logger="app.core.chat.operations"):
        err = ops.delete_message(1).exception(5)
    assert type(err) is ChatStoreError and str(err) == "Could not save the chat: boom"
    assert isinstance(err.__cause__, RuntimeError)
    assert any(r.exc_info and "chat write failed" in r.getMessage() for r in caplog.records)
    # The writer survives both: the next write runs.
    assert ops.update_settings(conv.id, system_prompt="still here").result(5).system_prompt == "still here"


def test_only_unwatched_writes_report_on_failed(ops, store, monkeypatch):
    conv = ops.create_conversation("c").result(5)
    reply = store.begin_assistant(conv.id, store.add_user_message(conv.id, "hi"))
    reported: list[tuple[str, str]] = []
    ops.failed.connect(lambda text: reported.append((text, threading.current_thread().name)))

    def full(*args, **kwargs):
        raise ChatStoreWriteError("Could not save the reply: the disk is full.")

    monkeypatch.setattr(store, "update_streaming", full)
    monkeypatch.setattr(store, "rename_conversation", full)
    assert ops.rename(conv.id, "x").exception(5) is not None  # its caller shows it
    assert isinstance(ops.save_partial(reply, "par").exception(5), ChatStoreWriteError)
    assert [t for t, _ in reported] == ["Could not save the reply: the disk is full."]
    assert reported[0][1].startswith(WRITER_THREAD)


def test_reads_show_a_rename_and_settings_in_flight_and_the_store_after_a_failure(ops, store, monkeypatch):
    conv = ops.create_conversation("old").result(5)
    release = blocked(ops)
    renaming = ops.rename(conv.id, "  new   title ")
    saving = ops.update_settings(conv.id, system_prompt="Be brief.", sampling=SamplingParams(temperature=0.1))
    assert store.get_conversation(conv.id).title == "old"  # not committed yet
    shown = ops.get_conversation(conv.id)
    assert shown.title == "new title" and shown.system_prompt == "Be brief." and shown.sampling.temperature == 0.1
    assert [c.title for c in ops.list_conversations()] == ["new title"]
    assert [c.title for c in ops.search("old")] == ["new title"]  # matched by the stored title, shown renamed
    release.set()
    renaming.result(5), saving.result(5)
    assert ops.get_conversation(conv.id) == store.get_conversation(conv.id)
    assert store.get_conversation(conv.id).title == "new title"

    def full(*args, **kwargs):
        raise ChatStoreWriteError("disk full")

    monkeypatch.setattr(store, "update_settings", full)
    release = blocked(ops)
    failing = ops.update_settings(conv.id, system_prompt="lost")
    later = ops.update_settings(conv.id, context_length=1024)
    assert ops.get_conversation(conv.id).system_prompt == "lost"
    release.set()
    assert failing.exception(5) is not None and later.exception(5) is not None
    back = ops.get_conversation(conv.id)
    assert back.system_prompt == "Be brief." and back.context_length is None


def test_a_rename_committed_while_a_read_is_under_way_is_shown_by_that_read(ops, store, monkeypatch):
    """The read's store query ran before the commit, and the overlay was settled before the read looked at it:
    the old title was shown (a rename under load, seen in CI)."""
    conv = ops.create_conversation("old").result(5)
    release = blocked(ops)
    renaming = ops.rename(conv.id, "new")
    stored = store.get_conversation

    def commit_during_the_read(conv_id):
        before = stored(conv_id)  # the store answers with the title as it was...
        release.set()  # ...then the rename commits and settles, before the read applies its overlay
        renaming.result(5)
        return before

    monkeypatch.setattr(store, "get_conversation", commit_during_the_read)
    assert ops.get_conversation(conv.id).title == "new"


def test_a_listing_made_while_a_rename_commits_shows_the_new_title(ops, store, monkeypatch):
    conv = ops.create_conversation("old").result(5)
    release = blocked(ops)
    renaming = ops.rename(conv.id, "new")
    listed = store.list_conversations

    def commit_during_the_read(limit=None):
        before = listed(limit)
        release.set()
        renaming.result(5)
        return before

    monkeypatch.setattr(store, "list_conversations", commit_during_the_read)
    assert [c.title for c in ops.list_conversations()] == ["new"]


def test_a_later_change_of_a_field_outlives_the_earlier_one(ops, store):
    conv = ops.create_conversation("c").result(5)
    release = blocked(ops)
    first = ops.update_settings(conv.id, system_prompt="one")
    hold = threading.Event()
    ops.run(hold.wait, 10)  # the second change stays in flight after the first is committed
    second = ops.update_settings(conv.id, system_prompt="two")
    release.set()
    first.result(5)
    assert ops.get_conversation(conv.id).system_prompt == "two"
    hold.set()
    second.result(5)
    assert store.get_conversation(conv.id).system_prompt == "two"


def test_a_deletion_in_flight_hides_the_conversation_until_it_fails(ops, store, monkeypatch):
    keep = ops.create_conversation("keep").result(5)
    gone = ops.create_conversation("gone").result(5)
    release = blocked(ops)
    deleting = ops.delete_conversation(gone.id)
    assert [c.id for c in ops.list_conversations()] == [keep.id]
    assert [c.id for c in ops.search("gone")] == []
    with pytest.raises(ChatNotFound):
        ops.get_conversation(gone.id)
    release.set()
    deleting.result(5)
    assert [c.id for c in store.list_conversations()] == [keep.id]

    def locked(*args, **kwargs):
        raise ChatStoreWriteError("Could not save the deletion: database is locked.")

    monkeypatch.setattr(store, "delete_conversation", locked)
    assert ops.delete_conversation(keep.id).exception(5) is not None
    assert [c.id for c in ops.list_conversations()] == [keep.id]  # back, since nothing was deleted
    assert ops.get_conversation(keep.id).title == "keep"


def test_the_final_save_of_a_reply_whose_chat_was_deleted_is_not_an_error(ops, store):
    conv = ops.create_conversation("c").result(5)
    turn = ops.send(conv.id, "hi").result(5)
    reported: list[str] = []
    ops.failed.connect(reported.append)
    ops.delete_conversation(conv.id).result(5)
    assert ops.save_partial(turn.reply_id, "par").result(5) is False
    assert ops.finish_reply(turn.reply_id, "partial", "stopped", None, "cancelled", None).exception(5) is None
    assert reported == []


def test_bad_input_and_a_closed_writer_fail_in_the_future_never_by_raising(ops, store, tmp_path):
    assert str(ops.save_preset("   ", "", SamplingParams()).exception(5)) == "a preset needs a name"
    assert isinstance(ops.apply_preset(1, 9999).exception(5), ChatNotFound)
    assert isinstance(ops.import_file(tmp_path / "missing.json").exception(5), ChatImportError)
    (tmp_path / "bad.json").write_text(json.dumps({"not": "an export"}))
    assert isinstance(ops.import_file(tmp_path / "bad.json").exception(5), ChatImportError)
    ops.close()
    assert ops.closed and ops.flush(1)
    err = ops.create_conversation("late").exception(5)
    assert isinstance(err, ChatStoreError) and "closed" in str(err)
    assert store.list_conversations() == []


def test_close_finishes_the_writes_already_submitted(store):
    ops = ChatOperations(store)
    release = blocked(ops)
    futures = [ops.create_conversation(f"c{i}") for i in range(5)]
    threading.Timer(0.05, release.set).start()
    ops.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(store.list_conversations()) == 5
