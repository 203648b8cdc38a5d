"""Stored responses: bounded by count and size (oldest evicted first), on disk only when the user keeps
them, an unreadable file ignored rather than fatal; and the segments both agent APIs build replies from."""

from __future__ import annotations

import itertools
import json

from app.core.tools import ReasoningDelta, TextDelta, ToolCallArgs, ToolCallStart
from app.server.responses.store import ResponseStore, Stored
from app.server.segments import Appended, Closed, Opened, Segmenter, segments_of


def stored(n: int, text: str = "hello") -> Stored:
    return Stored({"id": f"resp_{n}", "output": []}, [{"role": "user", "content": text}], [])


def test_the_oldest_go_first_past_the_count_and_the_size():
    store = ResponseStore(max_items=3)
    for n in range(5):
        store.put(stored(n))
    assert len(store) == 3 and store.get("resp_0") is None and store.get("resp_4") is not None
    store.put(stored(2))  # stored again: now the newest
    store.put(stored(5))
    assert store.get("resp_3") is None and store.get("resp_2") is not None
    small = ResponseStore(max_chars=stored(0, "x" * 1000).size() * 2 + 10)
    for n in range(4):
        small.put(stored(n, "x" * 1000))
    assert len(small) == 2 and small.get("resp_3") is not None
    big = ResponseStore(max_chars=10)
    big.put(stored(9, "y" * 100))
    assert big.get("resp_9") is not None  # one response bigger than the budget is still kept, alone


def test_on_disk_only_when_kept_and_removed_when_no_longer(tmp_path):
    path = tmp_path / "responses.json"
    memory = ResponseStore()
    memory.put(stored(1))
    assert not path.exists()
    memory.persist(path)  # the user turned it on: what is in memory is written now
    again = ResponseStore(path)
    assert again.get("resp_1") is not None and again.get("resp_1").conversation == [
        {"role": "user", "content": "hello"}
    ]
    again.put(stored(2))
    assert ResponseStore(path).get("resp_2") is not None
    assert again.delete("resp_2") and not again.delete("resp_2")
    assert ResponseStore(path).get("resp_2") is None
    again.persist(None)  # turned off: the file goes, the responses stay for this run
    assert not path.exists() and again.get("resp_1") is not None


def test_an_unreadable_or_foreign_file_is_ignored(tmp_path):
    path = tmp_path / "responses.json"
    path.write_text("{not json")
    assert len(ResponseStore(path)) == 0
    path.write_text(json.dumps({"version": 99, "items": [{"response": {"id": "x"}, "conversation": []}]}))
    assert len(ResponseStore(path)) == 0
    path.write_text(json.dumps({"version": 1, "items": [{"nope": 1}, {"response": {"id": "ok"}, "conversation": []}]}))
    store = ResponseStore(path)
    assert len(store) == 1 and store.get("ok") is not None


def test_a_full_disk_costs_the_saved_copy_not_the_reply(tmp_path, monkeypatch):
    import app.server.responses.store as module

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "atomic_write_text", full)
    store = ResponseStore(tmp_path / "r.json")
    store.put(stored(1))
    assert store.get("resp_1") is not None


def test_the_file_is_a_journal_appended_per_change_and_replayed_with_the_same_bounds(tmp_path):
    path = tmp_path / "responses.json"
    store = ResponseStore(path, max_items=3)
    store.put(stored(0))
    sizes = [path.stat().st_size]
    for n in range(1, 5):
        store.put(stored(n))
        sizes.append(path.stat().st_size)
    assert store.delete("resp_3")
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"version": 2} and len(lines) == 1 + 5 + 1  # one line per change
    assert all(b - a == sizes[1] - sizes[0] for a, b in itertools.pairwise(sizes))  # appended, not rewritten
    again = ResponseStore(path, max_items=3)
    assert [k for k in ("resp_0", "resp_1", "resp_2", "resp_3", "resp_4") if again.get(k)] == ["resp_2", "resp_4"]


def test_the_journal_is_rewritten_once_it_outgrows_what_it_holds(tmp_path, monkeypatch):
    import app.server.responses.store as module

    monkeypatch.setattr(module, "COMPACT_FLOOR", 0)
    path = tmp_path / "responses.json"
    store = ResponseStore(path)
    for _ in range(20):
        store.put(stored(1, "x" * 200))  # the same response again and again: one item held
    assert path.stat().st_size < 4 * stored(1, "x" * 200).size() + 200  # compacted, not 20 puts long
    assert ResponseStore(path).get("resp_1") is not None


def test_a_torn_last_line_is_skipped_and_an_old_file_is_read_and_rewritten(tmp_path):
    path = tmp_path / "responses.json"
    store = ResponseStore(path)
    store.put(stored(1))
    store.put(stored(2))
    path.write_text(path.read_text()[:-15])  # a crash mid-append
    again = ResponseStore(path)
    assert again.get("resp_1") is not None and again.get("resp_2") is None
    old = {"version": 1, "items": [{"response": {"id": "old"}, "conversation": [{"role": "user", "content": "hi"}]}]}
    path.write_text(json.dumps(old))
    migrated = ResponseStore(path)
    assert migrated.get("old") is not None
    assert json.loads(path.read_text().splitlines()[0]) == {"version": 2}  # now a journal
    assert ResponseStore(path).get("old").conversation == [{"role": "user", "content": "hi"}]


def test_a_full_disk_on_append_costs_the_saved_copy_not_the_reply(tmp_path, monkeypatch):
    import app.server.responses.store as module

    store = ResponseStore(tmp_path / "r.json")
    store.put(stored(1))

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "append_line", full)
    store.put(stored(2))
    assert store.get("resp_2") is not None and ResponseStore(tmp_path / "r.json").get("resp_1") is not None


def test_segments_open_append_and_close_in_order_and_hold_whitespace_between():
    events = [
        ReasoningDelta("thinking"),
        ReasoningDelta(" more"),
        TextDelta("\n\n"),
        TextDelta("Answer"),
        TextDelta("\n"),
        ToolCallStart(0, "call_1", "f"),
        ToolCallArgs(0, '{"a":'),
        ToolCallArgs(0, "1}"),
        TextDelta("  "),
    ]
    segmenter = Segmenter()
    ops = segmenter.feed(events) + segmenter.finish()
    kinds = [(type(op).__name__, op.segment.kind) for op in ops]
    assert kinds == [
        ("Opened", "reasoning"),
        ("Appended", "reasoning"),
        ("Appended", "reasoning"),
        ("Closed", "reasoning"),
        ("Opened", "text"),
        ("Appended", "text"),
        ("Appended", "text"),
        ("Closed", "text"),
        ("Opened", "tool"),
        ("Appended", "tool"),
        ("Appended", "tool"),
        ("Closed", "tool"),
    ]
    reasoning, text, tool = segmenter.segments
    assert reasoning.text == "thinking more" and text.text == "\n\nAnswer\n"
    assert (tool.call_id, tool.name, tool.text, tool.index) == ("call_1", "f", '{"a":1}', 2)
    assert all(isinstance(op, (Opened, Appended, Closed)) for op in ops)
    # A whole reply gives the same segments.
    assert [(s.kind, s.text) for s in segments_of(events)] == [(s.kind, s.text) for s in segmenter.segments]


def test_only_whitespace_makes_no_segment():
    assert segments_of([TextDelta("\n \n")]) == []


def test_responses_kept_across_restarts_are_the_users_alone(tmp_path):
    """The file holds conversations: 0600 from its first line, whatever the umask (issue 46)."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = tmp_path / "api-responses.json"
        ResponseStore(path).put(stored(1))
    finally:
        os.umask(old)
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
