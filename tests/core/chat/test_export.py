"""Markdown and JSON export; JSON import round trip and rejection of bad files."""

from __future__ import annotations

import json

import pytest

from app.core.chat import export
from app.core.chat.export import export_json, export_markdown, import_json, import_json_file
from app.core.chat.models import ChatImportError
from app.core.engines.base import GenerationStats, SamplingParams

CODE = "Here you go:\n\n```python\ndef f(x):\n    return x * 2  # <b>not html</b>\n```\n\nDone."


@pytest.fixture
def conv(store):
    c = store.create_conversation("Code talk", system_prompt="You are terse.\nAnswer in code.")
    store.update_settings(
        c.id, sampling=SamplingParams(temperature=0.4, seed=3), context_length=4096, model_id="models/smollm2.gguf"
    )
    u1 = store.add_user_message(c.id, "double a number")
    a1 = store.begin_assistant(c.id, u1)
    store.finish_assistant(
        a1, CODE, "done", GenerationStats(generated_tokens=20, decode_tok_s=41.5, time_to_first_token_s=0.25), "stop"
    )
    u2 = store.add_user_message(c.id, "now in a loop")
    a2 = store.begin_assistant(c.id, u2)
    store.finish_assistant(
        a2,
        "Sure:\n```python\nfor i in range(3):\n    print(i",
        "stopped",
        GenerationStats(generated_tokens=9),
        "cancelled",
    )
    edited = store.edit_user_message(u2, "now with map()")  # a hidden branch must survive export
    a3 = store.begin_assistant(c.id, edited)
    store.finish_assistant(a3, "", "error", None, "error", error="engine crashed")
    return c.id


def test_markdown_has_role_headings_and_intact_code(store, conv):
    md = export_markdown(store, conv)
    assert md.startswith("# Code talk\n")
    assert "> You are terse.\n> Answer in code." in md
    assert "## User\n\ndouble a number" in md
    assert "## Assistant\n\n" + CODE in md
    assert "*20 tokens · 41.5 tok/s · first token 0.25 s · finish: stop*" in md
    assert "## Assistant (error)" in md and "> Error: engine crashed" in md
    assert "now in a loop" not in md  # the shown branch only


def test_markdown_closes_a_code_block_left_open_by_stop(store):
    c = store.create_conversation("stop")
    u = store.add_user_message(c.id, "q")
    a = store.begin_assistant(c.id, u)
    store.finish_assistant(a, "```js\nlet x = 1", "stopped")
    store.add_user_message(c.id, "next")
    md = export_markdown(store, c.id)
    assert "## Assistant (stopped)\n\n```js\nlet x = 1\n```\n" in md
    assert md.count("```") % 2 == 0
    assert md.rstrip().endswith("## User\n\nnext")


def _shape(store, conv_id):
    """Messages without ids, parents as indexes: comparable across databases."""
    msgs = store.all_messages(conv_id)
    index = {m.id: i for i, m in enumerate(msgs)}
    return [
        (
            m.role,
            m.content,
            m.status,
            m.stats,
            m.finish_reason,
            m.error,
            m.created_at,
            None if m.parent_id is None else index[m.parent_id],
        )
        for m in msgs
    ]


def test_json_round_trip(store, conv):
    data = export_json(store, conv)
    new = import_json(store, data)
    assert new != conv
    assert _shape(store, new) == _shape(store, conv)
    assert [m.content for m in store.active_path(new)] == [m.content for m in store.active_path(conv)]
    a, b = store.get_conversation(conv), store.get_conversation(new)
    for field in ("title", "system_prompt", "model_id", "sampling", "context_length", "created_at"):
        assert getattr(a, field) == getattr(b, field)


def test_json_import_from_file_of_another_store(tmp_path, store, conv):
    from app.core.chat.store import ChatStore

    f = tmp_path / "export.json"
    f.write_text(export_json(store, conv), encoding="utf-8")
    with ChatStore(tmp_path / "other.sqlite3") as other:
        new = import_json_file(other, f)
        assert _shape(other, new) == _shape(store, conv)


@pytest.fixture
def with_images(store):
    from app.core.engines.base import ImageInput

    conv = store.create_conversation("pictures")
    images = [ImageInput(data=b"\x89PNG one", offset=0), ImageInput(data=b"\xff\xd8 two", offset=6)]
    user = store.add_user_message(conv.id, "Which is brighter?", images)
    reply = store.begin_assistant(conv.id, user)
    store.finish_assistant(reply, "The first.")
    return conv.id, user, images


def test_images_go_out_and_come_back_with_their_message(store, with_images, tmp_path):
    from app.core.chat.store import ChatStore

    conv, _, images = with_images
    doc = json.loads(export_json(store, conv))
    assert doc["version"] == 4 and len(doc["messages"][0]["images"]) == 2
    with ChatStore(tmp_path / "other.sqlite3") as other:
        new = import_json(other, json.dumps(doc))
        first = other.active_path(new)[0]
        assert other.images_of([first.id]) == {first.id: images}
    assert "*(2 images attached)*" in export_markdown(store, conv)


def test_an_image_that_does_not_match_its_hash_is_refused_and_nothing_written(store, with_images):
    conv, _, _ = with_images
    doc = json.loads(export_json(store, conv))
    doc["messages"][0]["images"][0]["data"] = "aGVsbG8="  # "hello", not the image hashed
    before = len(store.list_conversations())
    with pytest.raises(ChatImportError, match="sha256"):
        import_json(store, json.dumps(doc))
    assert len(store.list_conversations()) == before


def test_a_version_1_export_still_imports(store, conv):
    doc = json.loads(export_json(store, conv))
    doc["version"] = 1
    for m in doc["messages"]:
        m.pop("images", None)
    assert _shape(store, import_json(store, json.dumps(doc))) == _shape(store, conv)


def test_streaming_message_imports_as_interrupted(store, conv):
    doc = json.loads(export_json(store, conv))
    doc["messages"][-1]["status"] = "streaming"
    new = import_json(store, json.dumps(doc))
    assert store.all_messages(new)[-1].status == "interrupted"


def _mutations():
    def extra_top(d):
        d["surprise"] = 1

    def bad_role(d):
        d["messages"][0]["role"] = "root"

    def forward_parent(d):
        d["messages"][0]["parent"] = d["messages"][-1]["id"]

    def dup_id(d):
        d["messages"][1]["id"] = d["messages"][0]["id"]

    def missing_leaf(d):
        d["active_leaf"] = 123456789

    def wrong_format(d):
        d["format"] = "other-app"

    def bad_version(d):
        d["version"] = 99

    def bad_sampling(d):
        d["conversation"]["sampling"]["temperature"] = "hot"

    def nan_stats(d):
        d["messages"][1]["stats"] = {"decode_tok_s": float("nan")}

    def content_not_str(d):
        d["messages"][0]["content"] = {"html": "<script>"}

    return [
        extra_top,
        bad_role,
        forward_parent,
        dup_id,
        missing_leaf,
        wrong_format,
        bad_version,
        bad_sampling,
        nan_stats,
        content_not_str,
    ]


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_malformed_export_is_rejected_and_nothing_written(store, conv, mutate):
    doc = json.loads(export_json(store, conv))
    mutate(doc)
    before = (len(store.list_conversations()), store.db.read("SELECT count(*) FROM messages")[0][0])
    with pytest.raises(ChatImportError) as err:
        import_json(store, json.dumps(doc))
    assert str(err.value)  # a message for the user
    after = (len(store.list_conversations()), store.db.read("SELECT count(*) FROM messages")[0][0])
    assert after == before


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2, 3]", b"\xff\xfe\x00garbage", b'{"format": 1}'])
def test_garbage_is_rejected(store, data):
    with pytest.raises(ChatImportError):
        import_json(store, data)
    assert store.list_conversations() == []


def test_size_caps(store, conv, monkeypatch):
    data = export_json(store, conv)
    monkeypatch.setattr(export, "MAX_IMPORT_BYTES", len(data) - 1)
    with pytest.raises(ChatImportError, match="too large"):
        import_json(store, data)
    monkeypatch.undo()
    doc = json.loads(data)
    doc["messages"][0]["content"] = "x" * (export.MAX_MESSAGE_CHARS + 1)
    with pytest.raises(ChatImportError, match=r"messages\.0\.content"):
        import_json(store, json.dumps(doc))
    assert len(store.list_conversations()) == 1


def test_an_export_is_offered_under_the_chats_title():
    from app.core.chat.export import MAX_NAME_CHARS, export_file_name

    assert export_file_name("Reverse a string in Python", "md") == "Reverse a string in Python.md"
    assert export_file_name('a/b\\c: "why?" <x>|*', "json") == "a b c why x.json"
    assert export_file_name("  ...  ", "md") == "chat.md"
    assert export_file_name("", "md") == "chat.md"
    assert export_file_name("line\nbreak\ttab", "md") == "line break tab.md"
    long = export_file_name("word " * 100, "md")
    assert len(long) <= MAX_NAME_CHARS + 3 and long.endswith(".md") and not long.endswith(" .md")


def test_tool_calls_results_and_the_tools_on_round_trip_and_show_in_markdown(store):
    from app.core.chat.export import export_json, export_markdown, import_json

    conv = store.create_conversation("with tools")
    store.set_tool_servers(conv.id, ["files"])
    user = store.add_user_message(conv.id, "Read it")
    turn = store.begin_assistant(conv.id, user)
    calls = [{"id": "c1", "server": "files", "tool": "read", "arguments": {"path": "a.txt"}}]
    store.finish_assistant(turn, "", "done", None, "tool_calls", tool_calls=calls)
    store.add_tool_result(conv.id, turn, "c1", "hello")
    copy = import_json(store, export_json(store, conv.id))
    again = store.active_path(copy)
    assert store.get_conversation(copy).tool_servers == ("files",)
    assert again[1].tool_calls == calls and (again[2].role, again[2].tool_call_id, again[2].content) == (
        "tool",
        "c1",
        "hello",
    )
    markdown = export_markdown(store, copy)
    assert "*Called files.read:*" in markdown and '"path": "a.txt"' in markdown and "## Tool" in markdown
