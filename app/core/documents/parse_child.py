"""The child process of `parsing.parse_in_child`: reads one file and writes the result as JSON on stdout.

Run as `python -m app.core.documents.parse_child PATH` (a bundle: `Hearth --hearth-parse-document PATH`,
which app/cli routes to `main`). It limits its own address space to the megabytes in HEARTH_PARSE_MEMORY_MB
where the OS allows it, so a file that would need more ends this process, not the app; the parent holds
the timeout. Exit 0 with {"sections", "pages", "note"} or {"error", "message"} on stdout; EXIT_OUT_OF_MEMORY
when the memory ran out; any other failure exits non-zero with its traceback on stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from app.core.documents.parsing import (
    CHILD_MEMORY_ENV,
    EXIT_OUT_OF_MEMORY,
    ParseError,
    error_payload,
    parse_file,
    to_payload,
)
from app.core.units import MiB

logger = logging.getLogger(__name__)


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
        sys.stderr.write("usage: python -m app.core.documents.parse_child PATH\n")
        return 2
    # stdout carries only the answer: anything a library prints goes to stderr instead. A windowed bundle
    # may have no sys.stdout, though the parent's pipe is there as descriptor 1.
    out = sys.stdout.buffer if sys.stdout is not None else os.fdopen(1, "wb", closefd=False)
    sys.stdout = sys.stderr
    megabytes = int(os.environ.get(CHILD_MEMORY_ENV, "0") or 0)
    if megabytes > 0:
        limit_memory(megabytes)
    try:
        try:
            payload = to_payload(parse_file(Path(args[0])))
        except ParseError as exc:
            payload = error_payload(exc)
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)  # no traceback: printing one may need the memory that ran out
    out.write(data)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
