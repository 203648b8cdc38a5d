"""T30: disk full during a write → ChatStoreWriteError, the DB passes integrity_check and keeps
everything committed before."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import uuid

import pytest

from app.core.chat.models import ChatStoreWriteError
from app.core.chat.store import ChatStore


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs; skipped where mounting is not allowed (not root, containers without it)."""
    mnt = tmp_path / f"tiny-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _messages(store: ChatStore, conv_id: int) -> list[str]:
    return [m.content for m in store.all_messages(conv_id)]


def test_t30_real_disk_full_on_tmpfs(tiny_fs):
    db = tiny_fs / "chats.sqlite3"
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * 200_000)  # freed later so the store can recover
    store = ChatStore(db)
    try:
        conv = store.create_conversation("kept")
        store.add_user_message(conv.id, "committed before the disk filled")
        saved = []
        with pytest.raises(ChatStoreWriteError, match="disk is full") as err:
            for i in range(100):
                text = f"big {i} " + "x" * 60_000
                store.add_user_message(conv.id, text)
                saved.append(text)
        assert "chats.sqlite3" in str(err.value)
        assert saved, "the disk filled before any big write; the test proves less than it should"
        assert store.integrity_ok()
        assert _messages(store, conv.id) == ["committed before the disk filled", *saved]

        filler.unlink()
        store.add_user_message(conv.id, "after freeing space")
    finally:
        store.close()
    with ChatStore(db) as again:
        assert again.integrity_ok()
        assert _messages(again, conv.id) == ["committed before the disk filled", *saved, "after freeing space"]


class FullAfter(sqlite3.Connection):
    """A connection whose data writes fail with SQLITE_FULL once `budget` runs out (None: never)."""

    budget: int | None = None

    def execute(self, sql, params=()):
        if self.budget is not None and sql.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}:
            if self.budget <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self.budget -= 1
        return super().execute(sql, params)


@pytest.fixture
def flaky(db_path):
    conns: list[FullAfter] = []

    def connect(path):
        conn = sqlite3.connect(path, factory=FullAfter, check_same_thread=False)
        conns.append(conn)
        return conn

    store = ChatStore(db_path, connect=connect)
    yield store, conns[0]
    store.close()


def test_t30_simulated_full_mid_transaction_rolls_back(flaky, db_path):
    store, conn = flaky
    conv = store.create_conversation("c")
    u = store.add_user_message(conv.id, "kept")
    before = store.all_messages(conv.id)
    leaf_before = store.get_conversation(conv.id).active_leaf_id

    conn.budget = 1  # the message INSERT succeeds, the conversation UPDATE fails
    with pytest.raises(ChatStoreWriteError, match="disk is full"):
        store.add_user_message(conv.id, "lost")
    assert not conn.in_transaction
    assert store.all_messages(conv.id) == before  # the INSERT was rolled back
    assert store.get_conversation(conv.id).active_leaf_id == leaf_before
    assert store.integrity_ok()

    conn.budget = 0
    with pytest.raises(ChatStoreWriteError):
        store.begin_assistant(conv.id, u)
    with pytest.raises(ChatStoreWriteError):
        store.create_conversation("nope")
    with pytest.raises(ChatStoreWriteError):
        store.save_preset("nope")

    conn.budget = None  # space is back: writing works again
    a = store.begin_assistant(conv.id, u)
    store.update_streaming(a, "partial")
    conn.budget = 0
    with pytest.raises(ChatStoreWriteError):
        store.update_streaming(a, "partial and more")
    with pytest.raises(ChatStoreWriteError):
        store.finish_assistant(a, "partial and more", "done")
    conn.budget = None
    assert store.get_message(a).content == "partial"
    assert store.get_message(a).status == "streaming"
    store.close()

    with ChatStore(db_path) as again:
        assert again.integrity_ok()
        assert [c.title for c in again.list_conversations()] == ["c"]
        assert [(m.content, m.status) for m in again.all_messages(conv.id)] == [
            ("kept", "done"),
            ("partial", "interrupted"),
        ]
