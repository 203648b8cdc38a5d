"""What every `hearth` command starts from: the user's paths and settings, the Hub client, the library,
the calibration store, and how a command reports an error. `main` builds one per command.

Everything past the paths is made on first use, so `hearth hw` never reads settings or imports the Hub
client; the heavy imports stay inside the properties.
"""

from __future__ import annotations

import os
import sys
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.hub.client import HubClient
    from app.core.library import Library
    from app.core.models.calibration import CalibrationStore
    from app.core.models.recommend import Variant
    from app.core.paths import AppPaths
    from app.core.settings import Settings


class CliContext:
    """One command's view of the user's Hearth: `paths` (ensured), `settings`, `hub`, `calibration`,
    `open_library()`, `hub_variants(repo)` and `fail(message)`."""

    def __init__(self, command: str, paths: AppPaths | None = None) -> None:
        from app.core.paths import app_paths

        self.command = command
        self.paths: AppPaths = (paths or app_paths()).ensure()

    @cached_property
    def settings(self) -> Settings:
        from app.core.settings import SettingsStore

        return SettingsStore(self.paths.settings_file).load()

    @cached_property
    def hub(self) -> HubClient:
        """The Hub (or mirror) client: the settings' endpoint and token, else HF_ENDPOINT / HF_TOKEN."""
        from app.core.hub.client import HubClient

        return HubClient.from_settings(self.settings, env=os.environ)

    @cached_property
    def calibration(self) -> CalibrationStore:
        from app.core.models.calibration import CalibrationStore

        return CalibrationStore(self.paths.calibration_file)

    def open_library(self) -> Library:
        """The user's library in the settings' models folder; the caller closes it."""
        from app.core.library import open_library

        return open_library(self.paths, self.settings)

    def hub_variants(self, repo: str) -> list[Variant]:
        """Every variant of a Hub repo with its real metadata, read through `hub` (fit and pull both)."""
        from app.core.hub.metadata import assessable_variants

        return assessable_variants(self.hub, repo)

    def fail(self, message: object, code: int = 1, *, new_line: bool = False) -> int:
        """Write `hearth <command>: <message>` to stderr and return `code` (the command's exit status).
        `new_line` first ends a line that streamed output left open."""
        sys.stderr.write(("\n" if new_line else "") + f"hearth {self.command}: {message}\n")
        sys.stderr.flush()
        return code


def slot_count(text: str) -> int:
    """argparse type of `hearth run|chat --parallel N`: slots loaded as asked, with no planner to say how
    many fit, so a number (1 to the settings' maximum), never auto."""
    import argparse

    n = parallel_count(text)
    if n < 1:
        raise argparse.ArgumentTypeError("give a number of slots here (auto is for `hearth serve`)")
    return n


def parallel_count(text: str) -> int:
    """argparse type of `--parallel N|auto`: generations at once, 1 (one at a time) to the settings' maximum,
    or auto (AUTO_PARALLEL: as many as memory allows)."""
    import argparse

    from app.core.settings import AUTO_PARALLEL, MAX_PARALLEL_REQUESTS

    if text.strip().lower() == "auto":
        return AUTO_PARALLEL
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or auto") from None
    if not 1 <= n <= MAX_PARALLEL_REQUESTS:
        raise argparse.ArgumentTypeError(
            f"{n} is out of range: give 1 (one request at a time) to {MAX_PARALLEL_REQUESTS} parallel requests, or auto"
        )
    return n
