"""Where MCP servers' secrets live: the OS keyring where one works (the one the remotes' keys use, under names
starting `mcp/`), else a file beside `mcp.json` that only its
owner can read. `mcp.json` holds `${secret:NAME}` in their place, so the file can be shown, shared or
logged without them; they are put back only when a server starts, and never logged."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from app.core.atomic import atomic_write_text
from app.core.engines.remote.store import KeyringKeys, system_keyring
from app.core.mcp.config import SECRET_REF, McpConfig, McpConfigError, ServerEntry, is_secret

logger = logging.getLogger(__name__)

SECRETS_NAME = "mcp-secrets.json"
HIDDEN = "••••"


class SecretStore:
    """`keyring`: the OS keyring (remote.store's, shared with the remotes' keys; None: the 0600 file). Any
    thread; one writer at a time."""

    def __init__(self, file: Path, keyring: KeyringKeys | None = None) -> None:
        self.file = file
        self.keyring = keyring

    @classmethod
    def for_config(cls, config_dir: Path, *, use_keyring: bool = True) -> SecretStore:
        return cls(config_dir / SECRETS_NAME, system_keyring() if use_keyring else None)

    @property
    def where(self) -> str:
        return "the system keyring" if self.keyring is not None else str(self.file)

    def _file(self) -> dict[str, str]:
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            raise McpConfigError(f"{self.file} cannot be read: {exc}") from exc
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def put(self, name: str, value: str) -> None:
        if self.keyring is not None:
            self.keyring.set(name, value)
            return
        data = self._file()
        data[name] = value
        atomic_write_text(self.file, json.dumps(data, indent=2) + "\n")  # a temp file made 0600, then renamed

    def get(self, name: str) -> str | None:
        if self.keyring is not None:
            return self.keyring.get(name)
        return self._file().get(name)

    def delete(self, name: str) -> None:
        """Forget a secret (its server was removed, or the value is no longer secret); none there: nothing."""
        if self.keyring is not None:
            self.keyring.delete(name)
            return
        data = self._file()
        if data.pop(name, None) is not None:
            atomic_write_text(self.file, json.dumps(data, indent=2) + "\n")


def _ref(server: str, kind: str, key: str) -> str:
    return f"mcp/{server}/{kind}/{key}"


def keep_secrets(config: McpConfig, store: SecretStore) -> McpConfig:
    """`config` with every secret value moved into `store` and a `${secret:…}` reference left in its place."""
    servers = {}
    for name, entry in config.servers.items():
        update: dict[str, dict[str, str]] = {}
        for kind in ("env", "headers"):
            values = dict(getattr(entry, kind))
            for key, value in values.items():
                if is_secret(kind, key) and not SECRET_REF.match(value):
                    store.put(_ref(name, kind, key), value)
                    values[key] = "${secret:" + _ref(name, kind, key) + "}"
            update[kind] = values
        servers[name] = entry.model_copy(update=update)
    return config.model_copy(update={"servers": servers})


def with_secrets(name: str, entry: ServerEntry, store: SecretStore) -> ServerEntry:
    """`entry` with its secret references filled in from `store` (only to start it)."""
    update: dict[str, dict[str, str]] = {}
    for kind in ("env", "headers"):
        values = dict(getattr(entry, kind))
        for key, value in values.items():
            if (match := SECRET_REF.match(value)) is not None:
                secret = store.get(match.group(1))
                if secret is None:
                    raise McpConfigError(
                        f"{name}: the secret for {kind} {key} is not in {store.where}; import the server's"
                        " configuration again"
                    )
                values[key] = secret
        update[kind] = values
    return entry.model_copy(update=update)


def shown(entry: ServerEntry) -> dict[str, object]:
    """`entry` as it may be printed or logged: secret values hidden, references left as they are."""

    def hide(kind: Literal["env", "headers"], values: dict[str, str]) -> dict[str, str]:
        return {k: v if SECRET_REF.match(v) or not is_secret(kind, k) else HIDDEN for k, v in values.items()}

    out = entry.model_dump(exclude_defaults=True)
    if entry.env:
        out["env"] = hide("env", entry.env)
    if entry.headers:
        out["headers"] = hide("headers", entry.headers)
    return out
