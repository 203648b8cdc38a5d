"""How a remote model is named: `remote-name/model-id` for people and API clients, and a LoadSpec path
(`remote:<name>/<model>`, both parts URL-quoted) for the engine host, which compares loads by path."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote

from app.core.engines.base import LoadSpec
from app.core.formats import REMOTE

FORMAT = REMOTE  # the engine registry's format for remote models
SCHEME = "remote:"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def remote_id(remote: str, model: str) -> str:
    return f"{remote}/{model}"


def split_remote_id(text: str) -> tuple[str, str] | None:
    """("remote", "model id") for "remote/model id" (the model id may hold slashes itself); else None."""
    name, sep, model = text.partition("/")
    if not sep or not model or not NAME_RE.match(name):
        return None
    return name, model


def spec_path(remote: str, model: str) -> Path:
    return Path(SCHEME + quote(remote, safe="") + "/" + quote(model, safe=""))


def parse_spec_path(path: Path | str) -> tuple[str, str] | None:
    text = Path(path).as_posix()
    if not text.startswith(SCHEME):
        return None
    name, sep, model = text[len(SCHEME) :].partition("/")
    if not sep:
        return None
    return unquote(name), unquote(model)


def remote_load_spec(remote: str, model: str, n_ctx: int | None = None) -> LoadSpec:
    """What the host loads for a remote model; `n_ctx` is only a fallback (the server's own length wins)."""
    return LoadSpec(path=spec_path(remote, model), n_ctx=max(16, n_ctx or 4096))
