"""Logging setup: a rotating file in the log dir; the app never prints."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

LOG_FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"


def configure_logging(log_dir: Path, level: str = "INFO", console: bool = False) -> Path:
    """Install the rotating file handler once per process; returns the log file path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / "hearth.log"
    root = logging.getLogger()
    root.setLevel(level)
    for h in root.handlers:
        if getattr(h, "_hearth", False):
            return log_file
    fh = logging.handlers.RotatingFileHandler(log_file, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    fh.setFormatter(logging.Formatter(LOG_FORMAT))
    fh._hearth = True  # type: ignore[attr-defined]
    root.addHandler(fh)
    if console:
        sh = logging.StreamHandler()
        sh.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        sh.setLevel(logging.WARNING)
        sh._hearth = True  # type: ignore[attr-defined]
        root.addHandler(sh)
    return log_file
