"""llama.cpp's log, through Hearth's logging and cut short.

llama.cpp's grammar parser writes the whole grammar after its error, straight to stderr (fprintf, not its
log callback): a rejected multi-megabyte JSON schema went to stderr whole. `stderr_excerpt` catches what
a native call writes to fd 2 and logs a bounded excerpt. And llama-cpp-python's own log callback prints each
error whole to stderr too: Hearth's logs errors (into the log file, beside Hearth's own) as a bounded
excerpt, warnings at debug level (which llama-cpp-python hid with verbose=False), and drops the rest unread.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 300  # a grammar error's first line and the start of the grammar; of the rest, its length
HEAD_BYTES = 200

# ggml_log_level: NONE 0, INFO 1, WARN 2, ERROR 3, DEBUG 4, CONT 5 (continues the previous message).
LEVELS = {0: logging.ERROR, 2: logging.DEBUG, 3: logging.ERROR}
CONT = 5

_lock = threading.Lock()
_installed: dict[str, Any] = {}  # the ctypes callback must outlive every call llama.cpp makes to it
_last_level: list[int | None] = [None]


def excerpt(text: bytes, total: int | None = None) -> str:
    """`text` whole when it is short; otherwise its start and its length (`total`: of the whole, when `text`
    is only its start). Only the start is decoded."""
    text = text.rstrip(b"\n") if total is None else text
    total = len(text) if total is None else total
    if total <= MAX_MESSAGE_BYTES:
        return text.rstrip(b"\n").decode("utf-8", "replace")
    head = text[:HEAD_BYTES].decode("utf-8", "replace")  # a character cut in two becomes one U+FFFD
    return f"{head}… [{total:,} bytes in all, the rest left out]"


def on_log(level: int, text: bytes | None) -> None:
    """One message from llama.cpp (or ggml): logged at its level, bounded; info and debug dropped."""
    py_level = _last_level[0] if level == CONT else LEVELS.get(level)
    if level != CONT:
        _last_level[0] = py_level
    if py_level is None or not text or not logger.isEnabledFor(py_level):
        return
    logger.log(py_level, "llama.cpp: %s", excerpt(text))


def route_llama_logs(llama_cpp: ModuleType) -> None:
    """Point llama.cpp's (and ggml's) log at `on_log`, once per process. Call after importing llama_cpp:
    importing it installs llama-cpp-python's own callback."""
    with _lock:
        if _installed.get("lib") is llama_cpp:
            return

        def callback(level: int, text: bytes | None, user_data: Any) -> None:
            try:
                on_log(level, text)
            except Exception:  # an exception must not cross back into C
                pass

        c_callback = llama_cpp.llama_log_callback(callback)
        llama_cpp.llama_log_set(c_callback, ctypes.c_void_p(0))
        _installed.update(lib=llama_cpp, callback=c_callback)


def route_mtmd_logs(mtmd: ModuleType) -> None:
    """libmtmd (and its helpers) log through the same callback: its per-image progress lines are info,
    dropped; its errors reach Hearth's log. Call after route_llama_logs."""
    with _lock:
        callback = _installed.get("callback")
        if callback is None or _installed.get("mtmd") is mtmd:
            return
        mtmd.mtmd_log_set(callback, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(callback, ctypes.c_void_p(0))
        _installed["mtmd"] = mtmd


class Caught:
    """Set `failed` inside a `stderr_excerpt` block when the native call failed."""

    failed = False


@contextlib.contextmanager
def stderr_excerpt(what: str) -> Iterator[Caught]:
    """Catch what native code writes to fd 2 inside the block (a short call on the engine thread). When the
    call failed, log it as one bounded excerpt about `what`; otherwise write it back to stderr as it was
    (a line another thread wrote meanwhile is not lost)."""
    caught = Caught()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no fd 2 (a windowed app): nothing to catch
        yield caught
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield caught
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        size = os.fstat(sink.fileno()).st_size
        if not size:
            return
        sink.seek(0)
        if caught.failed:
            logger.error("llama.cpp rejected the %s: %s", what, excerpt(sink.read(MAX_MESSAGE_BYTES), size))
        else:
            os.write(2, sink.read())
