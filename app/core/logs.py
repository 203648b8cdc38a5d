"""Logging setup: a rotating file in the log dir; the app never prints."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
from pathlib import Path

LOG_FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"

# Secrets that libraries (httpx logs every request's URL) or error texts can carry into a log line: a URL's
# user:password@, secret-looking query parameters, a bearer token, a Hugging Face token.
_SECRETS = (
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]*@"), r"\1***:***@"),
    (
        re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|password|secret|sig|signature)=)[^&\s\"']+"),
        r"\1***",
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1***"),
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), "hf_***"),
)


def redact(text: str) -> str:
    """`text` with credentials replaced by ***."""
    for pattern, repl in _SECRETS:
        text = pattern.sub(repl, text)
    return text


class RedactSecrets(logging.Filter):
    """On Hearth's handlers: no record reaches the log file or console with a credential in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose args do not fit its format: leave it to the handler's own error
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """The log file the user's alone (0600, like the chat history: it names models, paths and requests),
    the fresh one after each rollover included; an older install's 0644 one is tightened when opened."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with contextlib.suppress(OSError):
            os.chmod(self.baseFilename, 0o600)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


def configure_logging(log_dir: Path, level: str = "INFO", console: bool = False) -> Path:
    """Install the rotating file handler once per process; returns the log file path."""
    log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # the user's alone, as paths.private_dir makes
    log_file = log_dir / "hearth.log"
    root = logging.getLogger()
    root.setLevel(level)
    for h in root.handlers:
        if getattr(h, "_hearth", False):
            return log_file
    fh = PrivateRotatingFileHandler(log_file, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    fh.setFormatter(logging.Formatter(LOG_FORMAT))
    fh.addFilter(RedactSecrets())
    fh._hearth = True  # type: ignore[attr-defined]
    root.addHandler(fh)
    if console:
        sh = logging.StreamHandler()
        sh.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        sh.setLevel(logging.WARNING)
        sh.addFilter(RedactSecrets())
        sh._hearth = True  # type: ignore[attr-defined]
        root.addHandler(sh)
    return log_file
