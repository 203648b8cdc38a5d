"""Chat history and the library are the user's alone (T36): their SQLite files (and -wal/-shm, and the
migration backup) are 0600 and Hearth's folders 0700 whatever the umask, and an older install's 0644 files
and 0755 folders are tightened when opened."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.chat.db import ChatDB
from app.core.chat.migrations import MIGRATIONS, Migration
from app.core.library.store import Library
from app.core.paths import app_paths, private_database

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The common 022 umask, under which SQLite alone would make 0644 files."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def sqlite_files(db: Path) -> list[Path]:
    return [p for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")) if p.exists()]


def test_a_new_chat_history_is_0600_with_its_wal_and_shm_in_a_0700_folder(tmp_path):
    path = tmp_path / "new" / "chats.sqlite3"
    db = ChatDB(path)
    try:
        files = sqlite_files(path)
        assert len(files) == 3  # open in WAL mode: both siblings exist now
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
        assert mode(path.parent) == 0o700
    finally:
        db.close()


def test_an_old_0644_chat_history_is_tightened_on_open(tmp_path):
    path = tmp_path / "chats.sqlite3"
    ChatDB(path).close()
    for p in (path, path.with_name(path.name + "-wal")):
        p.touch()
        os.chmod(p, 0o644)
    os.chmod(tmp_path, 0o755)
    db = ChatDB(path)
    try:
        assert all(mode(p) == 0o600 for p in sqlite_files(path))
        assert mode(tmp_path) == 0o755  # a folder it did not make is left as it is (the user may have chosen it)
    finally:
        db.close()


def test_the_backup_before_a_migration_is_0600(tmp_path):
    path = tmp_path / "chats.sqlite3"
    ChatDB(path).close()
    later = [*MIGRATIONS, Migration(MIGRATIONS[-1].version + 1, "a test step", lambda conn: None)]
    ChatDB(path, migrations=later).close()
    (backup,) = tmp_path.glob("chats.sqlite3.bak-v*")
    assert mode(backup) == 0o600


def test_the_library_database_is_0600_and_an_old_one_is_tightened(tmp_path):
    path = tmp_path / "data" / "library.db"
    library = Library(tmp_path / "models", path)
    library.close()
    assert all(mode(p) == 0o600 for p in sqlite_files(path)) and mode(path.parent) == 0o700
    os.chmod(path, 0o644)
    Library(tmp_path / "models", path).close()
    assert mode(path) == 0o600


def test_hearths_folders_are_0700_and_old_ones_tightened_but_not_the_models_folder(tmp_path):
    paths = app_paths({"HEARTH_HOME": str(tmp_path / "home")})
    paths.config.mkdir(parents=True)
    os.chmod(paths.config, 0o755)  # an older install's
    paths.ensure()
    for folder in (paths.config, paths.data, paths.logs, paths.cache):
        assert mode(folder) == 0o700, folder
    assert mode(paths.models) == 0o755  # weights, and possibly a folder the user chose


def test_private_database_keeps_what_an_existing_file_holds(tmp_path):
    path = tmp_path / "x.db"
    path.write_bytes(b"kept")
    os.chmod(path, 0o664)
    private_database(path)
    assert path.read_bytes() == b"kept" and mode(path) == 0o600


def test_the_log_file_is_0600_after_rollovers_and_an_old_0644_one_is_tightened(tmp_path):
    import logging

    from app.core.logs import PrivateRotatingFileHandler

    old = tmp_path / "hearth.log"
    old.write_text("from an older install\n")
    old.chmod(0o644)
    handler = PrivateRotatingFileHandler(old, maxBytes=200, backupCount=2, encoding="utf-8")
    try:
        assert mode(old) == 0o600
        record = logging.LogRecord("t", logging.INFO, __file__, 1, "x" * 150, None, None)
        for _ in range(5):  # past maxBytes a few times: new files made by the rollover
            handler.emit(record)
    finally:
        handler.close()
    files = sorted(tmp_path.glob("hearth.log*"))
    assert len(files) == 3, files
    assert all(mode(f) == 0o600 for f in files), [(f.name, oct(mode(f))) for f in files]


def test_an_mcp_servers_log_is_0600_in_a_0700_folder_and_an_old_0644_one_is_tightened(tmp_path):
    import json
    import sys

    from app.core.mcp.config import parse_config, save_config
    from app.core.mcp.secrets import SecretStore
    from app.core.mcp.servers import McpServers

    server = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")
    servers = {
        "tools": {"command": sys.executable, "args": [server]},
        "old": {"command": sys.executable, "args": [server]},
    }
    save_config(tmp_path / "mcp.json", parse_config(json.dumps({"mcpServers": servers}), "t"))
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    old = logs / "mcp-old.log"
    old.write_text("from an older install\n")
    old.chmod(0o644)
    hub = McpServers(tmp_path, SecretStore(tmp_path / "s.json"), log_dir=logs / "mcp")
    try:
        hub.start("tools").result(60)
        assert mode(logs / "mcp" / "mcp-tools.log") == 0o600 and mode(logs / "mcp") == 0o700
    finally:
        hub.close()
    hub = McpServers(tmp_path, SecretStore(tmp_path / "s.json"), log_dir=logs)
    try:
        hub.start("old").result(60)
        assert mode(old) == 0o600 and old.read_text().startswith("from an older install")  # appended to, not emptied
    finally:
        hub.close()


def test_the_in_flight_markers_are_0600_in_a_0700_folder_and_an_old_0755_folder_is_tightened(tmp_path):
    from app.core.engines.canary.inflight import InflightMarkers

    folder = tmp_path / "data" / "inflight"
    markers = InflightMarkers(folder)
    markers.mark("llama", "decoding", Path("/m/model.gguf"), "Q4_0", {"extra_bufts": True})
    (marker,) = folder.glob("*.json")
    assert mode(marker) == 0o600 and mode(folder) == 0o700
    markers.clear("llama")
    os.chmod(folder, 0o755)  # an older install's
    markers.mark("llama", "loading", Path("/m/model.gguf"), "Q4_0", {})
    assert mode(folder) == 0o700 and all(mode(p) == 0o600 for p in folder.glob("*.json"))
