"""Adding, changing and removing one server of `mcp.json` from the app (Settings → Tools), by the same rules
as an import: config.py validates the entry, secret values go to the secret store with a reference left in
the file (secrets.py), and fields other programs added to an entry are kept. What the editor writes is what
`hearth mcp` and the chat read.

The editor never sees a stored secret: it shows HIDDEN in its place, and HIDDEN saved back keeps the secret
as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from app.core.mcp.config import (
    CONFIG_NAME,
    NAME,
    SECRET_REF,
    McpConfig,
    McpConfigError,
    ServerEntry,
    is_secret,
    load_config,
    save_config,
)
from app.core.mcp.secrets import HIDDEN, SecretStore, keep_secrets

Transport = Literal["stdio", "http"]


@dataclass(frozen=True)
class ServerDraft:
    """A server as the editor shows it: plain strings, secret values as HIDDEN."""

    name: str = ""
    transport: Transport = "stdio"
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def draft_of(name: str, entry: ServerEntry) -> ServerDraft:
    """`entry` for the editor: every secret (stored, or typed into the file by hand) shown as HIDDEN."""

    def hide(kind: Literal["env", "headers"], values: dict[str, str]) -> dict[str, str]:
        return {k: HIDDEN if SECRET_REF.match(v) or is_secret(kind, k) else v for k, v in values.items()}

    return ServerDraft(
        name=name,
        transport=entry.transport,
        command=entry.command or "",
        args=list(entry.args),
        env=hide("env", entry.env),
        cwd=entry.cwd or "",
        url=entry.url or "",
        headers=hide("headers", entry.headers),
    )


def parse_pairs(text: str, sep: str, what: str) -> dict[str, str]:
    """One `KEY<sep>value` a line (blank lines skipped), as the editor's env ("=") and headers (":") boxes
    hold them; McpConfigError names the line that is not one."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, found, value = line.partition(sep)
        if not found or not key.strip():
            raise McpConfigError(f"{what}, line {number}: write it as NAME{sep}value")
        out[key.strip()] = value.strip()
    return out


def format_pairs(values: dict[str, str], sep: str) -> str:
    """The inverse of parse_pairs ("KEY=value", "Name: value")."""
    space = " " if sep == ":" else ""
    return "\n".join(f"{k}{sep}{space}{v}" for k, v in values.items())


def save_server(
    config_dir: Path, draft: ServerDraft, secrets: SecretStore, *, original: str | None = None
) -> ServerEntry:
    """Add `draft` to `config_dir/mcp.json`, or put it in place of the server `original` (which it may
    rename). Returns the entry as written (secrets as references); McpConfigError says what is wrong and
    changes nothing."""
    path = config_dir / CONFIG_NAME
    config = load_config(path)
    name = draft.name.strip()
    if not NAME.match(name):
        raise McpConfigError(
            "a server's name is 1 to 64 letters, digits, spaces, dots, dashes or underscores, starting with"
            " a letter or digit"
        )
    old = None
    if original is not None:
        old = config.servers.get(original)
        if old is None:
            raise McpConfigError(f"there is no server named {original!r} in {path} any more")
    if name != original and name in config.servers:
        raise McpConfigError(f"there is already a server named {name!r}")
    entry = _entry(name, draft, old)
    stored = keep_secrets(McpConfig(servers={name: entry}), secrets).servers[name]
    servers = {name if n == original else n: stored if n == original else e for n, e in config.servers.items()}
    servers.setdefault(name, stored)
    save_config(path, config.model_copy(update={"servers": servers}))
    _forget_unused(old, servers, secrets)
    return stored


def remove_server(config_dir: Path, name: str, secrets: SecretStore) -> None:
    """Take `name` out of mcp.json and forget the secrets only it used."""
    path = config_dir / CONFIG_NAME
    config = load_config(path)
    old = config.servers.get(name)
    if old is None:
        raise McpConfigError(f"there is no server named {name!r} in {path}")
    servers = {n: e for n, e in config.servers.items() if n != name}
    save_config(path, config.model_copy(update={"servers": servers}))
    _forget_unused(old, servers, secrets)


def _entry(name: str, draft: ServerDraft, old: ServerEntry | None) -> ServerEntry:
    """The draft as an entry: HIDDEN values back to what `old` held, `old`'s other fields kept."""
    kept: dict[str, object] = dict(old.model_extra or {}) if old is not None else {}
    if old is not None:
        kept["disabled"] = old.disabled
        if old.transport == draft.transport and old.type is not None:
            kept["type"] = old.type
    if draft.transport == "stdio":
        if not draft.command.strip():
            raise McpConfigError(f"{name}: a program on this computer needs its command (what starts it)")
        fields: dict[str, object] = {
            "command": draft.command.strip(),
            "args": [a for a in draft.args if a != ""],
            "env": _unhidden(name, "env", draft.env, old.env if old is not None else {}),
            "cwd": draft.cwd.strip() or None,
        }
    else:
        if not draft.url.strip():
            raise McpConfigError(f"{name}: an HTTP server needs its url")
        fields = {
            "url": draft.url.strip(),
            "headers": _unhidden(name, "headers", draft.headers, old.headers if old is not None else {}),
        }
    try:
        return ServerEntry.model_validate({**kept, **fields})
    except ValidationError as exc:
        raise McpConfigError(f"{name}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from exc


def _unhidden(name: str, kind: str, values: dict[str, str], old: dict[str, str]) -> dict[str, str]:
    out = {}
    for key, value in values.items():
        if value == HIDDEN:
            if key not in old:
                raise McpConfigError(f"{name}: {kind} {key}: type its value (•••• stands for one already kept)")
            value = old[key]
        out[key] = value
    return out


def _refs(entry: ServerEntry | None) -> set[str]:
    if entry is None:
        return set()
    values = [*entry.env.values(), *entry.headers.values()]
    return {m.group(1) for v in values if (m := SECRET_REF.match(v)) is not None}


def _forget_unused(old: ServerEntry | None, servers: dict[str, ServerEntry], secrets: SecretStore) -> None:
    """The secrets `old` referred to that no server in the file refers to any more."""
    in_use = set().union(*(_refs(e) for e in servers.values())) if servers else set()
    for ref in sorted(_refs(old) - in_use):
        secrets.delete(ref)
