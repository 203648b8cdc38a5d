"""Bringing another program's MCP servers in (LM Studio's, Claude Desktop's or Cursor's file, or any in the
same format): merged into Hearth's `mcp.json`, their secrets moved to the secret store on the way. One way in
for `hearth mcp import` and the chat's Tools menu."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.mcp.config import CONFIG_NAME, McpConfigError, ServerEntry, load_config, merge_servers, parse_config
from app.core.mcp.config import save_config as save
from app.core.mcp.secrets import SecretStore, keep_secrets

MAX_FILE_BYTES = 1 << 20  # a config file, not a data file


@dataclass(frozen=True)
class Imported:
    added: dict[str, ServerEntry]  # as written to mcp.json (secrets as references)
    kept: list[str]  # names already there, left as they were
    secrets_moved: bool
    secrets_where: str


def import_servers(config_dir: Path, source: Path, secrets: SecretStore, *, replace: bool = False) -> Imported:
    """Any thread: `source`'s servers into `config_dir/mcp.json`; McpConfigError says what is wrong with it."""
    try:
        if source.stat().st_size > MAX_FILE_BYTES:
            raise McpConfigError(f"{source} is too large to be an MCP configuration")
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"{source} cannot be read: {exc.strerror or exc}") from exc
    incoming = parse_config(text, str(source))
    path = config_dir / CONFIG_NAME
    merged, kept = merge_servers(load_config(path), incoming, replace=replace)
    taken = {n: e for n, e in incoming.servers.items() if n not in kept}
    with_refs = keep_secrets(incoming.model_copy(update={"servers": taken}), secrets)
    save(path, merged.model_copy(update={"servers": {**merged.servers, **with_refs.servers}}))
    moved = any(e.env != taken[n].env or e.headers != taken[n].headers for n, e in with_refs.servers.items())
    return Imported(dict(with_refs.servers), kept, moved, secrets.where)
