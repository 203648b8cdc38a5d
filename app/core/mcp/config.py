"""The MCP servers the user added, in `mcp.json` in Hearth's config folder.

The file is the `{"mcpServers": {...}}` that LM Studio, Cursor and Claude Desktop write, so a user can copy
theirs: a stdio server is a `command` with `args`, `env` and a working folder (`cwd`); a Streamable HTTP
server a `url` with `headers`. Fields other programs add (`disabled`, `autoApprove`, ...) are read where
they mean the same here and otherwise left alone. Secrets (an `Authorization` header, an env value whose
name says it is a key, token or password) are not kept in the file: they go to the secret store
(secrets.py) and the file holds a reference to them. No server starts unless it is in this file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.core.atomic import atomic_write_text
from app.core.errors import HearthError

CONFIG_NAME = "mcp.json"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")  # what a tool's prefix and a CLI argument can carry
SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})
SECRET_REF = re.compile(r"^\$\{secret:([A-Za-z0-9._/-]{1,200})\}$")


class McpConfigError(HearthError):
    """The file cannot be read as MCP servers; the message says where and why."""


class ServerEntry(BaseModel):
    """One server, as the common format spells it (unknown keys kept aside, not refused: other programs'
    files carry their own)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    type: str | None = None  # "stdio", "http" / "streamable-http"; "sse" is refused
    disabled: bool = False

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.lower().startswith(("http://", "https://")):
            raise ValueError("a server's url must be http:// or https://")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ServerEntry:
        if (self.command is None) == (self.url is None):
            raise ValueError("a server needs either a command (stdio) or a url (Streamable HTTP), not both")
        if (self.type or "").lower() == "sse":
            raise ValueError("SSE servers are not supported: use the server's Streamable HTTP endpoint")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def command_line(self) -> str:
        """What starts it, as the user is shown before its first start."""
        if self.command is None:
            return f"connect to {self.url}"
        return " ".join([self.command, *self.args])


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    servers: dict[str, ServerEntry] = Field(default_factory=dict, alias="mcpServers")

    @field_validator("servers")
    @classmethod
    def _check_names(cls, value: dict[str, ServerEntry]) -> dict[str, ServerEntry]:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"{name[:80]!r} is not a server name (letters, digits, space . _ -; 64 at most)")
        return value

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, exclude_defaults=True), indent=2) + "\n"


def parse_config(text: str, where: str) -> McpConfig:
    """`text` as MCP servers; McpConfigError naming `where` and the server at fault."""
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{where} is not JSON: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers", {}), dict):
        raise McpConfigError(f'{where} has no "mcpServers" object')
    try:
        return McpConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"][:2])
        raise McpConfigError(f"{where}: {at}: {first['msg']}") from exc


def load_config(path: Path) -> McpConfig:
    """The servers in `path`; none when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return McpConfig()
    except OSError as exc:
        raise McpConfigError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    return parse_config(text, str(path))


def save_config(path: Path, config: McpConfig) -> None:
    """Written whole (a reader sees the old file or the new one), readable by its owner only."""
    atomic_write_text(path, config.to_json())


def is_secret(kind: Literal["env", "headers"], key: str) -> bool:
    return key.lower() in SECRET_HEADERS if kind == "headers" else bool(SECRET_ENV.search(key))


def known_config_files(home: Path | None = None) -> list[tuple[str, Path]]:
    """Other programs' MCP files on this machine, to offer for import: (program, path), existing ones."""
    home = home or Path.home()
    appdata = Path(os.environ.get("APPDATA", home / "AppData" / "Roaming"))
    candidates = [
        ("LM Studio", home / ".lmstudio" / "mcp.json"),
        ("Claude Desktop", home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"),
        ("Claude Desktop", home / ".config" / "Claude" / "claude_desktop_config.json"),
        ("Claude Desktop", appdata / "Claude" / "claude_desktop_config.json"),
        ("Cursor", home / ".cursor" / "mcp.json"),
    ]
    return [(program, path) for program, path in candidates if path.is_file()]


def merge_servers(ours: McpConfig, incoming: McpConfig, *, replace: bool = False) -> tuple[McpConfig, list[str]]:
    """`ours` with `incoming`'s servers added (replacing those of the same name only with `replace`), and the
    names kept as they were."""
    kept = [name for name in incoming.servers if name in ours.servers and not replace]
    added = {n: e for n, e in incoming.servers.items() if n not in kept}
    return ours.model_copy(update={"servers": {**ours.servers, **added}}), kept
