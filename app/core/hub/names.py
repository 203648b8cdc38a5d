"""What Hearth accepts from a remote repo, by name, before any file touches the disk (T6–T8):
names that cannot escape the models folder on any OS, and only file types that carry no code."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from app.core.errors import HearthError
from app.core.hub.errors import HubRefused, HubUnsafeName

MAX_NAME_CHARS = 1024
MAX_PART_BYTES = 255
# The only files Hearth ever downloads (T6): weights without code, configs, templates and docs.
ALLOWED_SUFFIXES = (".gguf", ".safetensors", ".json", ".jinja", ".md", ".txt")
ALLOWED_NAMES = ("tokenizer.model",)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt", ".pickle")
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
# Control characters, and what Windows reads specially: drive or stream colons, backslashes, wildcards.
_BAD_CHARS = re.compile(r'[\x00-\x1f\x7f<>:"|?*\\]')


def _why_unsafe(name: object) -> str | None:
    if not isinstance(name, str) or not name:
        return "an empty name"
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if name.startswith("/"):
        return "an absolute path"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return "an empty, '.' or '..' path component"
        if _BAD_CHARS.search(part):
            return "a backslash, colon, wildcard or control character"
        if part[-1] in ". " or part[0] == " ":
            return "a name ending in a dot or space"
        if part.split(".")[0].upper().rstrip() in _WINDOWS_RESERVED:
            return f"{part!r} is a reserved device name on Windows"
        if len(part.encode("utf-8")) > MAX_PART_BYTES:
            return f"a name longer than {MAX_PART_BYTES} bytes"
    return None


def validate_remote_name(name: str, error: type[HearthError] = HubUnsafeName) -> str:
    """`name` unchanged when it is a plain relative POSIX path that is safe on every OS; else raise `error`
    (the Hub client refuses the repo with HubUnsafeName, the downloader refuses the file with its own)."""
    why = _why_unsafe(name)
    if why is not None:
        raise error(f"the Hub listed an unsafe file name {str(name)[:80]!r} ({why}); Hearth refuses it")
    return name


def is_allowed_file(path: str) -> bool:
    """True for file types Hearth may download (`*.gguf`, `*.safetensors`, `*.json`, `tokenizer.model`, ...)."""
    name = PurePosixPath(path).name.lower()
    return name.endswith(ALLOWED_SUFFIXES) or name in ALLOWED_NAMES


def pickle_only(paths: Sequence[str]) -> bool:
    """True when a repo's only weights are pickle files (which Hearth never loads)."""
    names = [p.lower() for p in paths]
    has_safe = any(n.endswith((".gguf", ".safetensors")) for n in names)
    return not has_safe and any(n.endswith(PICKLE_SUFFIXES) for n in names)


def refuse_pickle_only(repo_id: str, paths: Sequence[str]) -> None:
    """Raise HubRefused for a repo that offers nothing but pickle weights."""
    if pickle_only(paths):
        raise HubRefused(f"{repo_id} offers only pickle weights (.bin/.pt), which Hearth never loads")
