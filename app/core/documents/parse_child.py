"""Reading a document in a child process, both ends: the parent's `parse_in_child` (one file: the command, the
wait with its timeout, the answer's size cap) and `ChildReader` (many files, one after another, in one child
that lives for an indexing run), and the child's `main`, which reads one file, or with --serve one path per
line of stdin, and writes each result as JSON on stdout.

Run as `python -m app.core.documents.parse_child PATH|--serve` (a bundle: `Hearth --hearth-parse-document
PATH|--serve`, which app/cli routes to `main`). The child limits its own address space to the megabytes in
HEARTH_PARSE_MEMORY_MB where the OS allows it, so a file that would need more ends that process, not the app;
the parent holds the timeout. Exit 0 with {"sections", "pages", "note"} or {"error", "message"} on stdout
(served: each answer framed by its length in 8 bytes, big-endian); EXIT_OUT_OF_MEMORY when the memory ran out;
any other failure exits non-zero with its traceback on stderr.

A child's start (an interpreter and pypdf's import) is 0.13 s and a 10-page PDF read 0.04 s: one child per
file made reading a folder of PDFs five times the work, on the cores the embedding engine needs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from app.core.documents.parsing import ParsedDocument, ParseError, Section, Unsupported, parse_file, short_reason
from app.core.units import MiB, fmt_bytes

logger = logging.getLogger(__name__)

MAX_CHILD_OUTPUT_BYTES = 128 * MiB  # the child's JSON: 4 bytes a character at most, for MAX_TEXT_CHARS
CHILD_MEMORY_ENV = "HEARTH_PARSE_MEMORY_MB"  # parse_in_child's memory limit, applied by the child
CHILD_MODULE = "app.core.documents.parse_child"
EXIT_OUT_OF_MEMORY = 3  # the child's exit status when it hit its memory limit
# The reader's niceness: on a machine of two cores it parsed PDFs on the cores the embedding engine (and a chat
# reply) decode on; at a lower priority it reads in their gaps.
READER_NICE = 10
_ROOT = Path(__file__).resolve().parents[3]  # where `app` imports from, for the child


def to_payload(doc: ParsedDocument) -> dict[str, Any]:
    """The JSON the child writes for a parsed document."""
    return {"pages": doc.pages, "note": doc.note, "sections": [[s.text, s.page, s.heading] for s in doc.sections]}


def error_payload(exc: ParseError) -> dict[str, Any]:
    return {"error": "unsupported" if isinstance(exc, Unsupported) else "parse", "message": str(exc)}


def from_payload(payload: Any) -> ParsedDocument:
    """The parsed document (or the error it reports) from the child's JSON."""
    if not isinstance(payload, dict):
        raise ParseError("the reader's answer could not be read")
    if "error" in payload:
        message = str(payload.get("message") or "the file could not be read")
        raise Unsupported(message) if payload["error"] == "unsupported" else ParseError(message)
    try:
        sections = [Section(str(t), None if p is None else int(p), str(h)) for t, p, h in payload["sections"]]
        pages = payload.get("pages")
        note = payload.get("note")
        return ParsedDocument(sections, None if pages is None else int(pages), None if note is None else str(note))
    except (KeyError, TypeError, ValueError):
        raise ParseError("the reader's answer could not be read") from None


def child_command(path: Path | None) -> list[str]:
    """The child's command line for reading `path` (None: for serving paths from stdin)."""
    arg = "--serve" if path is None else os.path.abspath(path)
    if getattr(sys, "frozen", False):
        # A bundle has no `-m`: app/cli/__init__.py's main() routes this flag to parse_child.main.
        return [sys.executable, "--hearth-parse-document", arg]
    return [sys.executable, "-m", CHILD_MODULE, arg]


def _spawn(command: list[str], memory_mb: int, stdin: int | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[CHILD_MEMORY_ENV] = str(int(memory_mb))
    if not getattr(sys, "frozen", False):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    try:
        return subprocess.Popen(
            command,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(_ROOT) if _ROOT.is_dir() else None,  # -m puts the cwd first on sys.path
            env=env,
            creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0),  # no console flashing up on Windows
        )
    except OSError as exc:
        raise ParseError(f"the reader could not start ({exc.strerror or exc})") from None


class _Drain(threading.Thread):
    """Reads a child's pipe to its end, keeping the first `cap` bytes (stdout) or the last (stderr)."""

    def __init__(self, pipe: IO[bytes], cap: int, keep_tail: bool, on_overflow: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self._pipe, self._cap, self._tail, self._on_overflow = pipe, cap, keep_tail, on_overflow
        self._parts: list[bytes] = []
        self._size = 0
        self.overflowed = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(self._pipe.fileno(), 1 << 16):
                if self._tail:
                    self._parts.append(chunk)
                    self._size += len(chunk)
                    while self._size - len(self._parts[0]) >= self._cap:
                        self._size -= len(self._parts.pop(0))
                elif not self.overflowed:
                    self._size += len(chunk)
                    if self._size > self._cap:
                        self.overflowed = True
                        self._parts.clear()
                        self._on_overflow()
                    else:
                        self._parts.append(chunk)
        with contextlib.suppress(OSError):
            self._pipe.close()

    @property
    def data(self) -> bytes:
        return b"".join(self._parts)


def parse_in_child(path: Path, *, timeout_s: float = 120.0, memory_mb: int = 1536) -> ParsedDocument:
    """`parse_file(path)` in a child process under a memory limit (RLIMIT_AS where the OS has it) and a
    timeout: a file that would hang or exhaust the reader costs a ParseError, not the app."""
    proc = _spawn(child_command(Path(path)), memory_mb, subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stderr is not None
    out = _Drain(proc.stdout, MAX_CHILD_OUTPUT_BYTES, False, proc.kill)
    err = _Drain(proc.stderr, 64 * 1024, True, proc.kill)
    out.start()
    err.start()
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        out.join()
        err.join()
        raise ParseError(f"took over {timeout_s:g} s to read") from None
    out.join()
    err.join()
    if out.overflowed:
        raise ParseError(f"the reader's answer was over {fmt_bytes(MAX_CHILD_OUTPUT_BYTES, 0)}")
    if code != 0:
        stderr = err.data.decode("utf-8", errors="replace")
        logger.debug("document reader exited %s for %s: %s", code, path, stderr[-2000:])
        raise ParseError(_crash_reason(code, stderr, memory_mb))
    try:
        payload = json.loads(out.data)
    except ValueError:
        raise ParseError("the reader's answer could not be read") from None
    return from_payload(payload)


class ChildReader:
    """`parse_file` for many files in one child process (an indexing run's), under the same memory limit and
    per-file timeout as parse_in_child: a file that hangs, crashes the reader or floods its answer costs that
    file a ParseError and the child, and the next file starts a new one. Used from one thread at a time;
    `close` may come from another (a stop)."""

    def __init__(self, *, timeout_s: float = 120.0, memory_mb: int = 1536, files_per_child: int = 500) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        # A child is replaced after this many files: what a reader's allocator keeps after a large file is
        # not carried on for ever under the memory limit.
        self.files_per_child = files_per_child
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        self._err: _Drain | None = None
        self._served = 0
        self.started = 0  # children started (the tests count them)

    def parse(self, path: Path) -> ParsedDocument:
        proc = self._child()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(os.path.abspath(path)).encode("utf-8") + b"\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            return self._failed(proc)
        try:
            answer = self._answers.get(timeout=self.timeout_s)
        except queue.Empty:
            self._stop(proc, kill=True)
            raise ParseError(f"took over {self.timeout_s:g} s to read") from None
        if answer is None:
            return self._failed(proc)
        self._served += 1
        try:
            payload = json.loads(answer)
        except ValueError:
            raise ParseError("the reader's answer could not be read") from None
        return from_payload(payload)

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            self._end(proc)

    def _child(self) -> subprocess.Popen[bytes]:
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None and self._served < self.files_per_child:
            return proc
        self.close()
        proc = _spawn(child_command(None), self.memory_mb, subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        self._answers = queue.Queue()
        threading.Thread(
            target=_read_frames, args=(proc, self._answers), name="hearth-documents-reader", daemon=True
        ).start()
        self._err = _Drain(proc.stderr, 64 * 1024, True, proc.kill)
        self._err.start()
        self._served = 0
        self.started += 1
        with self._lock:
            self._proc = proc
        return proc

    def _failed(self, proc: subprocess.Popen[bytes]) -> ParsedDocument:
        """The child ended (or its answer was too large) before answering: why, as a ParseError."""
        code = self._stop(proc)
        if code == _OVERFLOWED:
            raise ParseError(f"the reader's answer was over {fmt_bytes(MAX_CHILD_OUTPUT_BYTES, 0)}")
        stderr = self._err.data.decode("utf-8", errors="replace") if self._err is not None else ""
        logger.debug("document reader exited %s: %s", code, stderr[-2000:])
        raise ParseError(_crash_reason(code, stderr, self.memory_mb))

    def _stop(self, proc: subprocess.Popen[bytes], *, kill: bool = False) -> int:
        with self._lock:
            if self._proc is proc:
                self._proc = None
        return self._end(proc, kill=kill)

    def _end(self, proc: subprocess.Popen[bytes], *, kill: bool = False) -> int:
        overflowed = getattr(proc, "hearth_overflowed", False)
        if kill:
            proc.kill()
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()  # a served child ends at the end of its input
        try:
            code = proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if self._err is not None:
            self._err.join(5)
        return _OVERFLOWED if overflowed else code


_OVERFLOWED = -(10**6)  # ChildReader._end's code for a child killed for the size of its answer


def _read_frames(proc: subprocess.Popen[bytes], answers: queue.Queue[bytes | None]) -> None:
    """The reader thread of a served child: each framed answer onto `answers`, then None at its end."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    try:
        while True:
            head = _read_exactly(fd, 8)
            if head is None:
                break
            size = int.from_bytes(head, "big")
            if size > MAX_CHILD_OUTPUT_BYTES:
                proc.hearth_overflowed = True  # type: ignore[attr-defined]
                proc.kill()
                break
            body = _read_exactly(fd, size)
            if body is None:
                break
            answers.put(body)
    finally:
        answers.put(None)
        with contextlib.suppress(OSError):
            proc.stdout.close()


def _read_exactly(fd: int, size: int) -> bytes | None:
    parts, left = [], size
    with contextlib.suppress(OSError):
        while left:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                return None
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)
    return None


def _crash_reason(code: int, stderr: str, memory_mb: int) -> str:
    if code == EXIT_OUT_OF_MEMORY:
        detail = f"it needed more than {memory_mb:,} MB"
    elif code < 0:
        try:
            detail = f"stopped by {signal.Signals(-code).name}"
        except ValueError:
            detail = f"stopped by signal {-code}"
    else:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        detail = short_reason(Exception(lines[-1])) if lines else f"exit status {code}"
    return f"the reader ran out of memory or crashed ({detail})"


def limit_memory(megabytes: int) -> bool:
    """Cap this process's address space; False where the OS has no such limit (Windows) or refuses it
    (macOS does not enforce RLIMIT_AS). The parent's timeout still holds there."""
    try:
        import resource
    except ImportError:
        return False
    want = megabytes * MiB
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (ValueError, OSError) as exc:
        logger.debug("no memory limit for the document reader: %s", exc)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m app.core.documents.parse_child PATH|--serve\n")
        return 2
    # stdout carries only the answers: anything a library prints goes to stderr instead. A windowed bundle
    # may have no sys.stdout, though the parent's pipe is there as descriptor 1.
    out = sys.stdout.buffer if sys.stdout is not None else os.fdopen(1, "wb", closefd=False)
    sys.stdout = sys.stderr
    megabytes = int(os.environ.get(CHILD_MEMORY_ENV, "0") or 0)
    if megabytes > 0:
        limit_memory(megabytes)
    with contextlib.suppress(AttributeError, OSError):
        os.nice(READER_NICE)  # (no os.nice on Windows) reading yields the CPU to the engine and the window
    if args[0] == "--serve":
        # One path (a JSON string) per line; each answer framed by its length. Ends with its input.
        for line in sys.stdin.buffer:
            data = _answer(Path(json.loads(line)))
            out.write(len(data).to_bytes(8, "big") + data)
            out.flush()
        return 0
    out.write(_answer(Path(args[0])))
    out.flush()
    return 0


def _answer(path: Path) -> bytes:
    try:
        try:
            payload = to_payload(parse_file(path))
        except ParseError as exc:
            payload = error_payload(exc)
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)  # no traceback: printing one may need the memory that ran out


if __name__ == "__main__":
    sys.exit(main())
