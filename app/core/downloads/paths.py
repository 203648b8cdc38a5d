"""Remote file names checked before anything touches the disk (T6–T8): traversal, drives, symlinks, file types."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from app.core.downloads.errors import RefusedFileTypeError, UnsafePathError

ALLOWED_SUFFIXES = (".gguf", ".safetensors", ".json", ".jinja", ".md", ".txt")
ALLOWED_NAMES = ("tokenizer.model",)
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
_BAD_CHARS = re.compile(r'[\x00-\x1f\x7f<>:"|?*\\]')
_MAX_COMPONENT = 255


def validate_component(part: str, whole: str) -> None:
    """One path component: no traversal, no characters or names some OS would read specially."""
    if part in ("", ".", ".."):
        raise UnsafePathError(f"Refused remote file {whole!r}: empty, '.' or '..' path component.")
    if _BAD_CHARS.search(part):
        raise UnsafePathError(f"Refused remote file {whole!r}: backslash, drive colon or control character in name.")
    if part[-1] in ". " or part[0] == " ":
        raise UnsafePathError(f"Refused remote file {whole!r}: a name ending in a dot or space.")
    if part.split(".")[0].upper().rstrip() in _WINDOWS_RESERVED:
        raise UnsafePathError(f"Refused remote file {whole!r}: {part!r} is a reserved device name on Windows.")
    if len(part.encode("utf-8")) > _MAX_COMPONENT:
        raise UnsafePathError(f"Refused remote file {whole!r}: a name longer than {_MAX_COMPONENT} bytes.")


def validate_remote_name(name: str) -> str:
    """The repo path as given, if it is a safe relative POSIX path; otherwise `UnsafePathError`."""
    if not isinstance(name, str) or not name:
        raise UnsafePathError("Refused remote file: empty name.")
    if name.startswith("/"):
        raise UnsafePathError(f"Refused remote file {name!r}: absolute path.")
    for part in name.split("/"):
        validate_component(part, name)
    return name


def check_file_type(name: str) -> None:
    """Only weights and metadata Hearth can use safely; never code or pickles (T6/T7)."""
    base = name.rsplit("/", 1)[-1]
    if base in ALLOWED_NAMES or base.lower().endswith(ALLOWED_SUFFIXES):
        return
    raise RefusedFileTypeError(
        f"Refused remote file {name!r}: Hearth only downloads .gguf, .safetensors, .json, .jinja, .md, .txt "
        "and tokenizer.model files (never code or pickle weights)."
    )


def repo_folder(repo_id: str, revision: str = "main") -> str:
    """Where a repo's files live under the models folder: `owner/name`, or `owner/name@branch` off main."""
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise UnsafePathError(f"Refused repository id {repo_id!r}: expected 'owner/name'.")
    for p in parts:
        validate_component(p, repo_id)
    if revision and revision != "main":
        validate_component(f"{parts[1]}@{revision}", revision)
        return f"{parts[0]}/{parts[1]}@{revision}"
    return repo_id


def destination(root: Path, relative: str) -> Path:
    """`root/relative`, validated by name and again after `resolve()`; symlinks on the way are refused."""
    validate_remote_name(relative)
    root = Path(root).resolve()
    dest = root.joinpath(*relative.split("/"))
    check_no_symlinks(root, dest)
    resolved = dest.resolve()
    if resolved != dest or not resolved.is_relative_to(root):
        raise UnsafePathError(f"Refused remote file {relative!r}: it resolves outside the models folder.")
    return dest


def check_no_symlinks(root: Path, target: Path) -> None:
    """Every existing component from `root` down to `target` must be a real folder (or a plain file at the end)."""
    root = Path(root)
    rel = Path(target).relative_to(root)
    here = root
    for i, part in enumerate(rel.parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(f"Refused to write through the symbolic link {here}.")
        last = i == len(rel.parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"Refused to write under {here}: it is not a folder.")


def make_parents(root: Path, target: Path) -> None:
    """Create the folders between `root` and `target` one by one, refusing any symlink met on the way."""
    root = Path(root)
    here = root
    for part in Path(target).relative_to(root).parts[:-1]:
        here = here / part
        try:
            os.mkdir(here)
        except FileExistsError:
            pass
        if stat.S_ISLNK(os.lstat(here).st_mode) or not here.is_dir():
            raise UnsafePathError(f"Refused to write under {here}: not a real folder.")


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that refuses a symlink at the last component where the OS allows it."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0), mode)
