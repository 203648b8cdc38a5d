"""Remote file names checked before anything touches the disk (T6–T8): traversal, drives, symlinks, file types."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from app.core.downloads.errors import RefusedFileTypeError, UnsafePathError
from app.core.hub.names import ALLOWED_NAMES, ALLOWED_SUFFIXES, is_allowed_file
from app.core.hub.names import validate_remote_name as _validate


def validate_remote_name(name: str) -> str:
    """The repo path as given, if it is a safe relative POSIX path; otherwise `UnsafePathError`."""
    return _validate(name, UnsafePathError)


def check_file_type(name: str) -> None:
    """Only weights and metadata Hearth can use safely; never code or pickles (T6/T7)."""
    if is_allowed_file(name):
        return
    kinds = ", ".join(ALLOWED_SUFFIXES) + " and " + ", ".join(ALLOWED_NAMES)
    raise RefusedFileTypeError(
        f"Refused remote file {name!r}: Hearth only downloads {kinds} files (never code or pickle weights)."
    )


def repo_folder(repo_id: str, revision: str = "main") -> str:
    """Where a repo's files live under the models folder: `owner/name`, or `owner/name@branch` off main."""
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise UnsafePathError(f"Refused repository id {repo_id!r}: expected 'owner/name'.")
    for p in parts:
        validate_remote_name(p)
    if revision and revision != "main":
        validate_remote_name(f"{parts[1]}@{revision}")
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
