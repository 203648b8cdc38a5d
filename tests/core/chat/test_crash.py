"""T28 (SIGKILL while streaming) and T29 (SIGKILL during a schema migration)."""

from __future__ import annotations

import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.chat.migrations import backup_path
from app.core.chat.store import ChatStore
from tests.core.chat.child import CURRENT, MIGRATIONS_NEXT, NEXT, SIGNAL_ENV, SLEEP_ENV, story

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

REPO = Path(__file__).resolve().parents[3]


def _spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.core.chat.child", *args],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


def _integrity(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def test_t28_kill_while_streaming_keeps_the_turn_and_the_partial_reply(db_path):
    rng = random.Random(28)
    expected = story(200_000)
    partial_lengths = []
    for _ in range(8):
        proc = _spawn("stream", str(db_path))
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"streaming child did not start: {err}")
        conv_id, user_id, reply_id = map(int, line.split())
        time.sleep(rng.uniform(0.05, 0.4))
        _kill(proc)

        assert _integrity(db_path) == ["ok"]
        with ChatStore(db_path) as store:
            assert store.integrity_ok()
            user = store.get_message(user_id)
            assert (user.content, user.status) == ("tell me a long story", "done")
            reply = store.get_message(reply_id)
            assert reply.status == "interrupted"
            assert reply.parent_id == user_id and reply.conversation_id == conv_id
            assert expected.startswith(reply.content)
            partial_lengths.append(len(reply.content))
            assert [m.id for m in store.active_path(conv_id)] == [user_id, reply_id]
    assert max(partial_lengths) > 0  # the kills did land mid-stream
    with ChatStore(db_path) as store:
        assert len(store.list_conversations()) == 8
        assert store.recovered_interrupted == 0  # each reopen already recovered its round


def _build_current(db: Path) -> None:
    with ChatStore(db) as s:
        for i in range(5):
            c = s.create_conversation(f"conv {i}")
            u = s.add_user_message(c.id, f"question {i}")
            a = s.begin_assistant(c.id, u)
            s.finish_assistant(a, f"answer {i}")


def _schema_state(db: Path) -> tuple[int, bool, bool, int]:
    """(user_version, has pinned column, has tags table, conversations)."""
    conn = sqlite3.connect(db)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        cols = {r[1] for r in conn.execute("PRAGMA table_info(conversations)")}
        tags = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tags'").fetchone() is not None
        count = conn.execute("SELECT count(*) FROM conversations").fetchone()[0]
        if tags:
            assert conn.execute("SELECT name FROM tags").fetchall() == [("migrated",)]
        return version, "pinned" in cols, tags, count
    finally:
        conn.close()


def test_t29_kill_mid_migration_leaves_old_schema_and_a_backup(tmp_path):
    db = tmp_path / "chats.sqlite3"
    _build_current(db)
    signal_file = tmp_path / "mid"
    proc = _spawn("migrate", str(db), env={SIGNAL_ENV: str(signal_file), SLEEP_ENV: "60"})
    deadline = time.monotonic() + 60
    while not signal_file.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "migration child never reached its slow step"
        time.sleep(0.01)
    _kill(proc)

    assert _integrity(db) == ["ok"]
    assert _schema_state(db) == (CURRENT, False, False, 5)  # the old schema, whole
    bak = backup_path(db, CURRENT)
    assert bak.exists()
    assert _integrity(bak) == ["ok"] and _schema_state(bak) == (CURRENT, False, False, 5)

    with ChatStore(db, migrations=MIGRATIONS_NEXT) as s:  # the next open completes it
        assert [c.title for c in s.list_conversations()][-1] == "conv 0"
    assert _schema_state(db) == (NEXT, True, True, 5)


def test_t29_kills_at_random_points_never_leave_half_a_schema(tmp_path):
    rng = random.Random(29)
    for i in range(5):
        db = tmp_path / f"round{i}.sqlite3"
        _build_current(db)
        proc = _spawn("migrate", str(db), env={SLEEP_ENV: "0.3"})
        time.sleep(rng.uniform(0.2, 2.0))
        _kill(proc)
        assert _integrity(db) == ["ok"]
        state = _schema_state(db)
        assert state in {(CURRENT, False, False, 5), (NEXT, True, True, 5)}
        if state[0] == NEXT:
            assert backup_path(db, CURRENT).exists()
        with ChatStore(db, migrations=MIGRATIONS_NEXT):
            pass
        assert _schema_state(db) == (NEXT, True, True, 5)
