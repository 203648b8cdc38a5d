"""One writer per file across threads and processes: an exclusive lock on a sibling lock file (T14)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from app.core.downloads.paths import open_nofollow

logger = logging.getLogger(__name__)
_POLL_S = 0.05


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # per open file: also excludes other threads
        return True
    except BlockingIOError:
        return False


class FileLock:
    """Exclusive lock on `path`, polled so a waiting caller can still be cancelled.

    The holder deletes the lock file on release; a waiter that then wins a lock on the unlinked inode notices
    (inode differs from the path's) and reopens, so two writers never hold "the" lock at once.
    """

    def __init__(self, path: Path, should_stop: Callable[[], bool] = lambda: False) -> None:
        self.path = Path(path)
        self._should_stop = should_stop
        self._fd: int | None = None

    def acquire(self) -> bool:
        """True once held; False if `should_stop()` turned true while waiting."""
        waited = False
        while True:
            fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
            while not _try_lock(fd):
                if not waited:
                    logger.info("waiting for another download of %s", self.path.name)
                    waited = True
                if self._should_stop():
                    os.close(fd)
                    return False
                time.sleep(_POLL_S)
            if sys.platform == "win32" or self._same_file(fd):
                self._fd = fd
                return True
            os.close(fd)  # we locked a lock file that its holder had already removed: take the new one

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        fst = os.fstat(fd)
        return (st.st_ino, st.st_dev) == (fst.st_ino, fst.st_dev)

    def release(self) -> None:
        if self._fd is None:
            return
        if sys.platform == "win32":
            import msvcrt

            try:
                os.lseek(self._fd, 0, os.SEEK_SET)
                msvcrt.locking(self._fd, msvcrt.LK_UNLCK, 1)
            except OSError:
                pass
        else:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FileLock:
        if not self.acquire():
            raise TimeoutError(f"stopped waiting for the lock on {self.path}")
        return self

    def __exit__(self, *exc) -> None:
        self.release()
