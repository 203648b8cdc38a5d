"""Saved reports: one JSON file per run in the data folder's `bench/`, written atomically and only once a
run has finished (a cancelled run writes nothing). Every report is validated against the report model
(whose JSON schema is the published one) before it is written and when it is read."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from app.core.atomic import atomic_write_text
from app.core.bench.report import BenchReport
from app.core.errors import HearthError
from app.core.paths import AppPaths

logger = logging.getLogger(__name__)

SUFFIX = ".json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class BenchReportError(HearthError):
    """A report that does not validate, or a file that is not a report."""


@dataclass(frozen=True)
class SavedReport:
    path: Path
    id: str
    created_at: str
    model: str
    engine: str
    partial: bool = False  # cancelled before the end


def safe_id(text: str) -> str:
    """A file-name-safe form of `text` (no separators, no leading dots)."""
    return _UNSAFE.sub("-", text).strip(".-")[:120] or "report"


class BenchStore:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def for_paths(cls, paths: AppPaths) -> BenchStore:
        return cls(paths.data / "bench")

    def save(self, report: BenchReport, path: Path | None = None) -> Path:
        """Validate and write `report` (to `path`, else the store under its id); returns where."""
        text = validated_json(report)
        target = Path(path) if path is not None else self.folder / (safe_id(report.id) + SUFFIX)
        if path is None and target.exists():  # two runs in the same second: keep both
            target = self._free_name(safe_id(report.id))
        atomic_write_text(target, text)
        logger.info("saved benchmark report %s", target)
        return target

    def load(self, path_or_id: Path | str) -> BenchReport:
        path = Path(path_or_id)
        if not path.is_file():
            path = self.folder / (safe_id(str(path_or_id)) + SUFFIX)
        try:
            return BenchReport.from_json(path.read_bytes())
        except FileNotFoundError:
            raise BenchReportError(f"no benchmark report {path_or_id!s}") from None
        except OSError as exc:
            raise BenchReportError(f"cannot read {path}: {exc}") from exc
        except ValidationError as exc:
            raise BenchReportError(f"{path.name} is not a valid benchmark report: {_first_error(exc)}") from exc

    def list(self) -> list[SavedReport]:
        """Saved reports, newest first; files that do not parse are skipped (and logged)."""
        out = []
        for path in self.folder.glob("*" + SUFFIX) if self.folder.is_dir() else []:
            try:
                r = self.load(path)
            except BenchReportError as exc:
                logger.warning("skipping %s: %s", path.name, exc)
                continue
            out.append(SavedReport(path, r.id, r.created_at, r.model.name, r.engine.name, r.partial))
        return sorted(out, key=lambda s: (s.created_at, s.id), reverse=True)

    def delete(self, path: Path) -> None:
        path = Path(path)
        if path.parent.resolve() != self.folder.resolve():
            raise BenchReportError(f"{path} is not in {self.folder}")
        path.unlink(missing_ok=True)

    def _free_name(self, stem: str) -> Path:
        n = 2
        while (candidate := self.folder / f"{stem}-{n}{SUFFIX}").exists():
            n += 1
        return candidate


def validated_json(report: BenchReport) -> str:
    """The report as JSON, after checking that it round-trips through the model (and so the schema)."""
    text = report.to_json()
    try:
        BenchReport.from_json(text)
    except ValidationError as exc:
        raise BenchReportError(f"the report does not validate: {_first_error(exc)}") from exc
    return text


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "(top)"
    return f"{where}: {err.get('msg', 'invalid')}"
