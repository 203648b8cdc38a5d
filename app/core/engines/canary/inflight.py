"""Markers for native work in flight: written before a llama.cpp load or decode run, cleared after, so a crash
nobody foresaw leaves behind which model and configuration it happened with. On the next start the markers
of processes that are gone are read, recorded as crashes (that configuration is never used again here), and
told to the user in one sentence.

One file per process and engine (`<pid>-<engine>.json`), so the app, `hearth serve` and `hearth run` can run
side by side; a marker whose process is still alive is someone else's work, not a crash.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.paths import open_private, private_dir

logger = logging.getLogger(__name__)

PHASES = {"loading": "loading", "decoding": "generating text", "embedding": "computing embeddings"}


@dataclass(frozen=True)
class Inflight:
    """What a process that died was doing in native code."""

    pid: int
    phase: str  # a key of PHASES
    model: str  # the file's path
    weights: str  # its tensor types (canary.guard.weights_of)
    config: dict[str, bool]  # native_checks.NativeConfig as a dict
    at: float

    @property
    def sentence(self) -> str:
        name = Path(self.model).name
        doing = PHASES.get(self.phase, self.phase)
        return (
            f"Hearth stopped unexpectedly while {name} was {doing}; it will load in a safer configuration, "
            "checked first in a separate process."
        )


def default_folder() -> Path:
    from app.core.paths import app_paths

    return app_paths().data / "inflight"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        import psutil

        return bool(psutil.pid_exists(pid))
    except Exception:  # without psutil, assume alive: a missed crash is better than a false one
        return True


class InflightMarkers:
    """The marker folder; called on the thread that runs the native work (the engine host's)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_folder()

    def _path(self, owner: str) -> Path:
        return self.folder / f"{os.getpid()}-{owner}.json"

    def mark(self, owner: str, phase: str, model: Path, weights: str, config: dict[str, bool]) -> None:
        record = {
            "pid": os.getpid(),
            "phase": phase,
            "model": str(model),
            "weights": weights,
            "config": config,
            "at": time.time(),
        }
        path = self._path(owner)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            # No fsync: the marker has to outlive a crashed process, not a power cut (the OS keeps written
            # pages), and a decode run should not wait on the disk. The rename keeps a reader from half a file.
            # The user's alone (0700 folder, 0600 file), as the rest of Hearth's data: it names their models.
            private_dir(path.parent, tighten=True)
            with open_private(tmp, "w") as f:
                f.write(json.dumps(record))
            os.replace(tmp, path)
        except OSError as exc:  # a read-only data dir costs crash attribution, never the work itself
            logger.debug("could not write the in-flight marker: %s", exc)

    def clear(self, owner: str) -> None:
        try:
            self._path(owner).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.debug("could not clear the in-flight marker: %s", exc)

    def pending(self) -> bool:
        """Whether any marker is there at all (a clean start checks this and imports nothing native)."""
        try:
            return any(True for _ in self.folder.glob("*.json"))
        except OSError:
            return False

    def orphans(self) -> list[Inflight]:
        """Markers left by processes that are gone (they died in native code), removed as they are read."""
        found: list[Inflight] = []
        try:
            paths = sorted(self.folder.glob("*.json"))
        except OSError:
            return found
        for path in paths:
            try:
                raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
                record = Inflight(
                    pid=int(raw["pid"]),
                    phase=str(raw["phase"]),
                    model=str(raw["model"]),
                    weights=str(raw.get("weights", "")),
                    config={str(k): bool(v) for k, v in dict(raw.get("config") or {}).items()},
                    at=float(raw.get("at", 0.0)),
                )
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.debug("dropping an unreadable in-flight marker %s: %s", path.name, exc)
                path.unlink(missing_ok=True)
                continue
            if _alive(record.pid):
                continue
            found.append(record)
            path.unlink(missing_ok=True)
        return found


class NativeActivity:
    """One loaded engine's marker: `begin(phase)` before native work, `end()` after (host thread)."""

    def __init__(
        self, markers: InflightMarkers | None, owner: str, model: Path, weights: str, config: dict[str, bool]
    ) -> None:
        """`markers` None: marks nothing (the canary's child, whose crash is expected)."""
        self._markers = markers
        self._owner = owner
        self._model = model
        self._weights = weights
        self._config = config
        self._phase: str | None = None

    def begin(self, phase: str) -> None:
        if phase != self._phase:
            self._phase = phase
            if self._markers is not None:
                self._markers.mark(self._owner, phase, self._model, self._weights, self._config)

    def end(self) -> None:
        if self._phase is not None:
            self._phase = None
            if self._markers is not None:
                self._markers.clear(self._owner)


@contextlib.contextmanager
def native_run(activity: NativeActivity | None, phase: str) -> Iterator[None]:
    """`activity` marked in `phase` for the length of the block (nothing when there is no activity)."""
    if activity is None:
        yield
        return
    activity.begin(phase)
    try:
        yield
    finally:
        activity.end()


def recover_crashes(markers: InflightMarkers, record_crash: Any) -> list[Inflight]:
    """Read the markers of processes that died in native code and record each as a crash of its
    configuration (`record_crash(config, weights, model, phase)`, NativeGuard.record_crash); returns them
    so the caller can tell the user."""
    found = markers.orphans()
    for crash in found:
        logger.warning("%s (marker of process %d)", crash.sentence, crash.pid)
        try:
            record_crash(crash.config, crash.weights, Path(crash.model).name, PHASES.get(crash.phase, crash.phase))
        except OSError as exc:
            logger.warning("could not record the crash: %s", exc)
    return found
