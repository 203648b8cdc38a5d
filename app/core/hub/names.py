"""Validation of file names that come from the Hub, before they are ever joined to a local folder."""

from __future__ import annotations

import re

from app.core.hub.errors import HubUnsafeName

MAX_NAME_CHARS = 1024
MAX_PART_CHARS = 255
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_remote_name(name: str) -> str:
    """Return `name` unchanged when it is a plain relative POSIX path; raise HubUnsafeName otherwise.

    Rejected: empty, absolute, `..`/`.`/empty parts, backslashes (Windows separators, UNC), drive
    prefixes and any colon (`C:\\x`, `D:x`, NTFS streams), control characters, over-long names.
    """
    if not isinstance(name, str) or not name:
        raise HubUnsafeName("the Hub listed a file with an empty name; Hearth refuses this repo")
    shown = repr(name[:80])
    if len(name) > MAX_NAME_CHARS or _CONTROL.search(name):
        raise HubUnsafeName(f"the Hub listed an unsafe file name {shown}; Hearth refuses this repo")
    if "\\" in name or ":" in name or _DRIVE.match(name) or name.startswith("/"):
        raise HubUnsafeName(f"the Hub listed an unsafe file name {shown}; Hearth refuses this repo")
    parts = name.split("/")
    if any(p in ("", ".", "..") or len(p) > MAX_PART_CHARS for p in parts):
        raise HubUnsafeName(f"the Hub listed an unsafe file name {shown}; Hearth refuses this repo")
    _downloader_rules(name, shown)
    return name


def _downloader_rules(name: str, shown: str) -> None:
    """The downloader's stricter rules too (Windows device names, trailing dots), so a listed file can be fetched."""
    try:
        from app.core.downloads.errors import UnsafePathError
        from app.core.downloads.paths import validate_remote_name as strict
    except ImportError:
        return
    try:
        strict(name)
    except UnsafePathError as exc:
        raise HubUnsafeName(f"the Hub listed an unsafe file name {shown}; Hearth refuses this repo ({exc})") from exc
