"""The chat database connections: WAL + synchronous=FULL, one writer connection behind a lock, and a
read-only connection so the UI thread's reads never wait for a writer's fsync (WAL lets them overlap).

Opening checks integrity, migrates (backup first) and marks replies a crash left `streaming` as
`interrupted`. Every write is a short `BEGIN IMMEDIATE` … `COMMIT`; a failed write rolls back and
raises ChatStoreWriteError, so the file always holds the last committed state.

ChatDB is the one owner of the connections, their locks and the write-depth marker; ChatStore and its parts
(ImageRows, Presets) hold it and use only its public methods: `write`, `write_statement`, `read`, `locked`.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.core.chat import rows
from app.core.chat.migrations import MIGRATIONS, Migration, latest_backup, migrate
from app.core.chat.models import ChatStoreCorrupt, ChatStoreError, ChatStoreWriteError
from app.core.paths import private_database, private_dir

logger = logging.getLogger(__name__)


def default_connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, check_same_thread=False)


def _is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "full" in str(exc).lower()


class _WriteDepth(threading.local):
    """How many `write` blocks the current thread is inside (each thread sees its own count)."""

    depth = 0


class ChatDB:
    """The open chat database: connection lifecycle and transaction plumbing. Thread-safe.

    Threads: it is opened when the services start and closed at shutdown (`close` takes both locks, so it
    waits for a read or write in progress). Writes (`write`, `write_statement`) come from the chat writer
    thread (ChatOperations), one at a time under `_lock` with the writer connection; reads (`read`) come from
    any thread (the UI thread, its pool) and use the read-only connection under `_read_lock`, or the writer
    connection when they run inside a write on the same thread (`_writing`, a per-thread count).
    """

    def __init__(
        self,
        db_path: Path | str,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        connect: Callable[[Path], sqlite3.Connection] = default_connect,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.path = Path(db_path)
        self._lock = threading.RLock()
        self._read_lock = threading.Lock()
        self._writing = _WriteDepth()  # reads inside a write transaction must see its changes
        private_dir(self.path.parent)
        private_database(self.path)  # chat history: 0600, and so its -wal and -shm (an older 0644 one too)
        self._conn = self._open(connect, busy_timeout_ms)
        self._reader: sqlite3.Connection | None = None
        try:
            self._migrate(migrations)
            self.has_fts = rows.has_fts(self._conn)  # no search index where a SQLite without FTS5 made the file
            self.recovered_interrupted = self._recover_streaming()
            self._reader = self._open_reader(busy_timeout_ms)
        except BaseException:
            self._conn.close()
            raise

    # --- lifecycle -------------------------------------------------------------------------
    def _open(self, connect: Callable[[Path], sqlite3.Connection], busy_ms: int) -> sqlite3.Connection:
        try:
            conn = connect(self.path)
        except sqlite3.OperationalError as e:
            raise ChatStoreError(f"Could not open the chat history {self.path}: {e}.") from e
        conn.isolation_level = None  # transactions are explicit
        conn.row_factory = sqlite3.Row
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            problems = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        except sqlite3.OperationalError as e:
            conn.close()
            raise ChatStoreError(f"Could not open the chat history {self.path}: {e}.") from e
        except sqlite3.DatabaseError as e:
            conn.close()
            raise ChatStoreCorrupt(self._corrupt_message(str(e))) from e
        if problems != ["ok"]:
            conn.close()
            raise ChatStoreCorrupt(self._corrupt_message("; ".join(problems[:3])))
        return conn

    def _open_reader(self, busy_ms: int) -> sqlite3.Connection | None:
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False)
            conn.isolation_level = None
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
            conn.execute("PRAGMA query_only = 1")
            return conn
        except sqlite3.Error:  # reads then share the writer connection, as before
            logger.warning("no separate read connection for %s; reads share the writer's", self.path)
            return None

    def _corrupt_message(self, detail: str) -> str:
        bak = latest_backup(self.path)
        restore = (
            f" The latest backup is {bak}: copy it over {self.path.name} to restore it."
            if bak
            else " There is no backup; moving the file aside starts an empty history."
        )
        return (
            f"The chat history {self.path} is damaged ({detail}). Hearth left it untouched."
            f" Quit Hearth and move the file aside (keep it; `sqlite3 {self.path.name} .recover`"
            f" may rescue text).{restore}"
        )

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        with self._lock:
            try:
                migrate(self._conn, self.path, migrations)
            except (sqlite3.OperationalError, OSError) as e:
                raise ChatStoreWriteError(self._write_message("the schema upgrade", e)) from e

    def _recover_streaming(self) -> int:
        """Replies left `streaming` by a crash or kill: keep their text, mark them interrupted."""
        try:
            with self.write("recovered replies") as c:
                n = c.execute(
                    "UPDATE messages SET status = 'interrupted', updated_at = ? WHERE status = 'streaming'",
                    (time.time(),),
                ).rowcount
        except ChatStoreWriteError:
            # A full disk must not lock the user out of their history; the next open retries.
            logger.warning("could not mark unfinished replies as interrupted", exc_info=True)
            return 0
        if n:
            logger.warning("marked %d unfinished repl%s as interrupted", n, "y" if n == 1 else "ies")
        return n

    def close(self) -> None:
        with self._lock, self._read_lock:
            if self._reader is not None:
                self._reader.close()
            self._conn.close()

    def __enter__(self) -> ChatDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def integrity_ok(self) -> bool:
        """PRAGMA integrity_check, plus the search index's internal check when there is one.

        (Not FTS5's comparison with the content table: streaming rows are left out on purpose.)"""
        with self._lock:
            if [r[0] for r in self._conn.execute("PRAGMA integrity_check")] != ["ok"]:
                return False
            if rows.has_fts(self._conn):
                try:
                    self._conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
                except sqlite3.OperationalError:
                    logger.warning("search index check could not run", exc_info=True)
                except sqlite3.DatabaseError:  # SQLITE_CORRUPT: the index is damaged
                    return False
            return True

    # --- reads and writes ------------------------------------------------------------------
    def _write_message(self, what: str, exc: BaseException) -> str:
        if _is_disk_full(exc):
            return (
                f"Could not save {what}: the disk is full. Free some space and try again;"
                f" the chat history ({self.path}) still holds everything saved before."
            )
        return f"Could not save {what}: {exc}. The chat history ({self.path}) still holds everything saved before."

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            logger.exception("rollback failed")

    @contextmanager
    def write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One transaction on the writer connection: committed when the block ends, rolled back if it raises.
        A failed write is a ChatStoreWriteError naming `what` ("Could not save {what}: …")."""
        with self._lock:
            self._writing.depth += 1
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                self._conn.execute("COMMIT")
            except (sqlite3.OperationalError, OSError) as e:
                self._rollback()
                raise ChatStoreWriteError(self._write_message(what, e)) from e
            except BaseException:
                self._rollback()
                raise
            finally:
                self._writing.depth -= 1

    def write_statement(self, what: str, sql: str, params: Sequence[Any] = ()) -> int:
        """One statement in its own implicit transaction (no BEGIN: a streaming save is a single UPDATE);
        the rows it changed. Fails as `write` does."""
        with self._lock:
            try:
                return self._conn.execute(sql, params).rowcount
            except (sqlite3.OperationalError, OSError) as e:
                self._rollback()
                raise ChatStoreWriteError(self._write_message(what, e)) from e

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """All rows of one query, from the read-only connection (so a reader never waits for a writer's fsync);
        inside a `write` on this thread, from the writer connection, so it sees that write's changes."""
        if self._reader is None or self._writing.depth > 0:
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        with self._read_lock:
            return self._reader.execute(sql, params).fetchall()

    @contextmanager
    def locked(self) -> Iterator[sqlite3.Connection]:
        """The writer connection, held alone until the block ends: for reads of several statements that no
        write may land between. Not for writes: those go through `write`, which rolls back and reports."""
        with self._lock:
            yield self._conn
