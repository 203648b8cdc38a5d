"""ChatStore: conversations, messages and branches, presets, search, restart and corruption."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from app.core.chat.migrations import MIGRATIONS, backup, backup_path
from app.core.chat.models import ChatNotFound, ChatStoreCorrupt, ChatStoreError
from app.core.chat.store import ChatStore
from app.core.engines.base import GenerationStats, SamplingParams


def _chat(store: ChatStore, title: str, *turns: tuple[str, str]) -> int:
    conv = store.create_conversation(title)
    for user, reply in turns:
        u = store.add_user_message(conv.id, user)
        a = store.begin_assistant(conv.id, u)
        store.finish_assistant(a, reply, "done", GenerationStats(generated_tokens=3), "stop")
    return conv.id


def _texts(store: ChatStore, conv_id: int) -> list[str]:
    return [m.content for m in store.active_path(conv_id)]


def test_open_sets_wal_full_sync_and_foreign_keys(store):
    with store.db.locked() as conn:  # the writer connection: these settings are per connection
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version


def test_images_are_kept_with_their_message_in_order_and_go_with_it(store):
    from app.core.engines.base import ImageInput

    conv = store.create_conversation("pictures")
    red, blue = ImageInput(data=b"\x89PNG red", offset=0), ImageInput(data=b"\x89PNG blue", offset=9)
    first = store.add_user_message(conv.id, "Compare these", [red, blue])
    second = store.add_user_message(conv.id, "no picture")
    assert store.images_of([first, second]) == {first: [red, blue]}
    store.delete_conversation(conv.id)
    assert store.images_of([first]) == {}  # deleted with the message


def test_conversation_crud_and_order(store):
    a = store.create_conversation("  first   chat ")
    b = store.create_conversation("second")
    assert a.title == "first chat"
    assert [c.id for c in store.list_conversations()] == [b.id, a.id]
    store.add_user_message(a.id, "bump")  # activity moves it to the top
    assert [c.id for c in store.list_conversations()] == [a.id, b.id]
    assert [c.id for c in store.list_conversations(limit=1)] == [a.id]

    store.rename_conversation(b.id, "renamed")
    assert store.get_conversation(b.id).title == "renamed"
    with pytest.raises(ChatNotFound):
        store.rename_conversation(9999, "x")

    store.delete_conversation(a.id)
    with pytest.raises(ChatNotFound):
        store.get_conversation(a.id)
    assert store.all_messages(a.id) == []
    assert [c.id for c in store.list_conversations()] == [b.id]


def test_settings_per_conversation(store):
    conv = store.create_conversation("s", system_prompt="be brief", model_id="lib:smollm2")
    assert conv.sampling == SamplingParams()
    updated = store.update_settings(conv.id, sampling=SamplingParams(temperature=0.3, seed=7), context_length=8192)
    assert updated.sampling.temperature == 0.3 and updated.sampling.seed == 7
    assert updated.context_length == 8192
    assert updated.system_prompt == "be brief" and updated.model_id == "lib:smollm2"
    cleared = store.update_settings(conv.id, model_id=None)
    assert cleared.model_id is None and cleared.context_length == 8192


def test_message_lifecycle_and_stats(store):
    conv = store.create_conversation()
    u = store.add_user_message(conv.id, "hi")
    a = store.begin_assistant(conv.id, u)
    assert store.get_message(a).status == "streaming"
    assert store.update_streaming(a, "Hel")
    assert store.get_message(a).content == "Hel"
    stats = GenerationStats(prompt_tokens=5, generated_tokens=2, decode_tok_s=12.5)
    store.finish_assistant(a, "Hello", "stopped", stats, "cancelled")
    m = store.get_message(a)
    assert (m.content, m.status, m.finish_reason) == ("Hello", "stopped", "cancelled")
    assert m.stats["decode_tok_s"] == 12.5 and m.stats["prompt_tokens"] == 5
    assert not store.update_streaming(a, "late chunk")  # finished: no longer streaming
    assert store.get_message(a).content == "Hello"
    with pytest.raises(ValueError):
        store.finish_assistant(a, "x", "streaming")
    with pytest.raises(ChatNotFound):
        store.finish_assistant(u, "x")  # a user message is not a reply


def test_parent_must_belong_to_the_conversation(store):
    one = _chat(store, "one", ("q", "a"))
    two = store.create_conversation("two")
    foreign = store.active_path(one)[0].id
    with pytest.raises(ChatNotFound):
        store.begin_assistant(two.id, foreign)
    assert store.all_messages(two.id) == []


def test_edit_and_resend_keeps_the_old_branch(store):
    conv = _chat(store, "b", ("q1", "a1"), ("q2", "a2"))
    path = store.active_path(conv)
    old_q2, old_a2 = path[2], path[3]

    new_q2 = store.edit_user_message(old_q2.id, "q2 edited")
    a = store.begin_assistant(conv, new_q2)
    store.finish_assistant(a, "a2 new")
    assert _texts(store, conv) == ["q1", "a1", "q2 edited", "a2 new"]

    siblings = store.branches(new_q2)
    assert [m.content for m in siblings] == ["q2", "q2 edited"]
    assert store.get_message(old_a2.id).content == "a2"  # kept, just not shown

    store.switch_branch(old_q2.id)
    assert _texts(store, conv) == ["q1", "a1", "q2", "a2"]
    store.switch_branch(new_q2)
    assert _texts(store, conv) == ["q1", "a1", "q2 edited", "a2 new"]
    assert len(store.all_messages(conv)) == 6


def test_regenerate_adds_an_assistant_sibling(store):
    conv = _chat(store, "r", ("q", "first answer"))
    old = store.active_path(conv)[-1]
    new = store.regenerate(old.id)
    store.finish_assistant(new, "second answer")
    assert _texts(store, conv) == ["q", "second answer"]
    assert [m.content for m in store.branches(new)] == ["first answer", "second answer"]
    store.switch_branch(old.id)
    assert _texts(store, conv) == ["q", "first answer"]


def test_delete_message_reconnects_the_thread(store):
    conv = _chat(store, "d", ("q1", "a1"), ("q2", "a2"))
    q1, a1, q2, a2 = store.active_path(conv)
    store.delete_message(a1.id)
    assert _texts(store, conv) == ["q1", "q2", "a2"]
    assert store.get_message(q2.id).parent_id == q1.id
    store.delete_message(a2.id)  # the shown leaf: the thread now ends at its parent
    assert _texts(store, conv) == ["q1", "q2"]
    nxt = store.add_user_message(conv, "q3")
    assert store.get_message(nxt).parent_id == q2.id


def test_presets_builtin_and_crud(store):
    builtins = {p.name: p for p in store.list_presets()}
    assert set(builtins) == {"Default", "Precise", "Creative"}
    assert builtins["Precise"].sampling.temperature == 0.2
    assert builtins["Creative"].sampling.temperature == 1.0
    assert all(p.builtin for p in builtins.values())

    mine = store.save_preset("Coder", "You write Python.", SamplingParams(temperature=0.1, top_k=10))
    assert not mine.builtin and mine.sampling.top_k == 10
    with pytest.raises(ChatStoreError, match="already exists"):
        store.save_preset("Coder")
    with pytest.raises(ChatStoreError, match="already exists"):
        store.update_preset(mine.id, name="Precise")
    changed = store.update_preset(mine.id, system_prompt="You write Rust.")
    assert changed.system_prompt == "You write Rust." and changed.sampling.top_k == 10

    conv = store.create_conversation()
    applied = store.apply_preset(conv.id, mine.id)
    assert applied.preset_id == mine.id and applied.system_prompt == "You write Rust."
    assert applied.sampling.temperature == 0.1
    store.delete_preset(mine.id)
    assert mine.id not in [p.id for p in store.list_presets()]
    after = store.get_conversation(conv.id)
    assert after.preset_id is None and after.system_prompt == "You write Rust."


def test_builtin_presets_are_seeded_once(db_path):
    ChatStore(db_path).close()
    with ChatStore(db_path) as again:
        assert [p.name for p in again.list_presets()].count("Default") == 1


@pytest.mark.parametrize("fts", [True, False])
def test_search_title_and_text(store, fts):
    if fts and not store.fts:
        pytest.skip("this sqlite3 has no FTS5")
    store.fts = fts
    recipes = _chat(store, "Dinner recipes", ("how to make risotto", "Toast the arborio rice first."))
    code = _chat(store, "Python help", ("sort a dict by value", "Use sorted(d.items(), key=...)."))
    _chat(store, "Empty talk", ("hello", "hi"))
    assert [c.id for c in store.search("recipes")] == [recipes]
    assert [c.id for c in store.search("arborio")] == [recipes]
    assert [c.id for c in store.search("sorted")] == [code]
    assert store.search("nonexistentword") == []
    for hostile in ['"', "AND (", "*", "risotto OR", "100%", "a_b", "NEAR("]:
        store.search(hostile)  # user text is never query syntax: no exception


def test_search_sees_finished_text_not_stale_streaming_text(store):
    conv = store.create_conversation("s")
    u = store.add_user_message(conv.id, "q")
    a = store.begin_assistant(conv.id, u)
    store.update_streaming(a, "partial zebra")
    store.finish_assistant(a, "final giraffe")
    assert [c.id for c in store.search("giraffe")] == [conv.id]
    assert store.search("zebra") == []


def test_restart_keeps_everything(db_path):
    with ChatStore(db_path) as s:
        conv = _chat(s, "kept", ("q1", "a1"), ("q2", "a2"))
        s.update_settings(conv, system_prompt="sys", context_length=2048)
        before = s.all_messages(conv)
    with ChatStore(db_path) as s:
        assert s.all_messages(conv) == before
        c = s.get_conversation(conv)
        assert (c.title, c.system_prompt, c.context_length) == ("kept", "sys", 2048)
        assert s.recovered_interrupted == 0


def test_leftover_streaming_reply_becomes_interrupted(db_path):
    s = ChatStore(db_path)
    conv = s.create_conversation("crash")
    u = s.add_user_message(conv.id, "q")
    a = s.begin_assistant(conv.id, u)
    s.update_streaming(a, "half an octopus")
    s.close()  # no finish_assistant: as if the app died
    with ChatStore(db_path) as s:
        assert s.recovered_interrupted == 1
        m = s.get_message(a)
        assert (m.status, m.content) == ("interrupted", "half an octopus")
        assert s.get_message(u).content == "q"
        assert [c.id for c in s.search("octopus")] == [conv.id]


def test_not_a_database_is_reported_as_corrupt(db_path):
    db_path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(ChatStoreCorrupt) as err:
        ChatStore(db_path)
    assert str(db_path) in str(err.value)
    assert db_path.read_bytes().startswith(b"this is not sqlite")  # left untouched


def test_damaged_pages_are_reported_with_the_latest_backup(db_path):
    with ChatStore(db_path) as s:
        for i in range(40):
            _chat(s, f"c{i}", (f"question {i} " * 50, f"answer {i} " * 50))
        with s.db.locked() as conn:
            backup(conn, backup_path(db_path, 1))
    data = bytearray(db_path.read_bytes())
    page = 4096
    for p in range(2, len(data) // page):
        data[p * page + 8 : p * page + 64] = b"\xff" * 56  # trash page headers, keep the file header
    db_path.write_bytes(bytes(data))
    with pytest.raises(ChatStoreCorrupt) as err:
        ChatStore(db_path)
    assert str(backup_path(db_path, 1)) in str(err.value)


def test_newer_schema_is_refused(db_path):
    ChatStore(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ChatStoreError, match="newer Hearth"):
        ChatStore(db_path)


def test_threads_share_the_store(store):
    conv = store.create_conversation("t")
    u = store.add_user_message(conv.id, "q")
    a = store.begin_assistant(conv.id, u)
    errors: list[BaseException] = []

    def streamer():
        try:
            for i in range(200):
                store.update_streaming(a, "x" * i)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=streamer)
    t.start()
    made = [store.create_conversation(f"other {i}").id for i in range(50)]
    t.join()
    assert errors == []
    assert store.get_message(a).content == "x" * 199
    assert len(set(made)) == 50


def test_search_index_stays_consistent_through_edits_and_deletes(db_path):
    with ChatStore(db_path) as s:
        if not s.fts:
            pytest.skip("this sqlite3 has no FTS5")
        gone = _chat(s, "gone", ("platypus facts", "they lay eggs"))
        kept = _chat(s, "kept", ("q1", "a1"), ("q2", "a2"))
        _q1, a1, q2, _a2 = s.active_path(kept)
        s.edit_user_message(q2.id, "q2 wombat")
        s.delete_message(a1.id)
        s.delete_conversation(gone)
        u = s.add_user_message(kept, "kangaroo")
        a = s.begin_assistant(kept, u)
        s.update_streaming(a, "echidna")
        assert s.integrity_ok()
    with ChatStore(db_path) as s:
        assert s.integrity_ok()
        assert s.search("platypus") == [] and [c.id for c in s.search("wombat")] == [kept]
        assert [c.id for c in s.search("echidna")] == [kept]  # recovered as interrupted, then indexed
        # No streaming rows left, so the index must match the messages table exactly.
        with s.db.locked() as conn:
            conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")


def test_an_edited_message_keeps_its_images_within_its_new_text(store):
    from app.core.engines.base import ImageInput

    conv = store.create_conversation("pictures")
    red, blue = ImageInput(data=b"\x89PNG red", offset=0), ImageInput(data=b"\x89PNG blue", offset=20)
    first = store.add_user_message(conv.id, "What are these two??", [red, blue])
    edited = store.edit_user_message(first, "Name them")
    assert store.images_of([edited]) == {edited: [red, ImageInput(data=blue.data, offset=9)]}
    assert store.images_of([first]) == {first: [red, blue]}  # the old branch keeps its own


def test_tool_calls_and_results_are_kept_with_the_thread_and_read_back_for_the_model(store):
    from app.core.chat.context import history_for_request

    conv = store.create_conversation("tools")
    assert conv.tool_servers == ()
    assert store.set_tool_servers(conv.id, ["files", "web"]).tool_servers == ("files", "web")
    user = store.add_user_message(conv.id, "List my files")
    call_turn = store.begin_assistant(conv.id, user)
    calls = [{"id": "call_1", "server": "files", "tool": "list dir", "arguments": {"path": "/tmp"}}]
    store.finish_assistant(call_turn, "", "done", None, "tool_calls", tool_calls=calls)
    result = store.add_tool_result(conv.id, call_turn, "call_1", "a.txt\nb.txt")
    denied = store.add_tool_result(conv.id, result, "call_2", "Error: the user denied this call", error="denied")
    answer = store.begin_assistant(conv.id, denied)
    store.finish_assistant(answer, "Two files.", "done")
    path = store.active_path(conv.id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "tool", "assistant"]
    assert path[1].tool_calls == calls and path[2].tool_call_id == "call_1" and path[3].status == "error"
    history = history_for_request("", path)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]  # an empty call turn is kept
    call = history[1].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_1", "files__list_dir", '{"path":"/tmp"}')
    assert history[2].tool_call_id == "call_1" and history[3].content.startswith("Error:")
