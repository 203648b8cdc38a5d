"""The user's remotes: name, URL, whether the local endpoint exposes them, what the last probe found,
and the API key. The list is `remotes.json` in the data folder, owner-only (0600); keys go to the OS
keyring when the optional `keyring` package has a usable backend, else into that same file.
Keys never reach a log, a repr or an error message."""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.atomic import atomic_write_text
from app.core.engines.base import LoadSpec
from app.core.engines.remote.errors import RemoteError
from app.core.engines.remote.ids import NAME_RE, remote_id, remote_load_spec, split_remote_id
from app.core.engines.remote.probe import KINDS, ProbeResult, RemoteModel, normalize_url, probe
from app.core.paths import AppPaths

logger = logging.getLogger(__name__)

KEYRING_SERVICE = "Hearth remote"
FILE_MODE = 0o600
Prober = Callable[..., ProbeResult]


class RemoteModelRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    context_length: int | None = None
    owned_by: str = ""


class Remote(BaseModel):
    """One remote server as stored (never its key; `has_key` says whether one is set)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    url: str
    expose_locally: bool = False  # the local endpoint forwards requests for its models
    kind: str = "openai-compatible"
    version: str = ""
    models: list[RemoteModelRecord] = Field(default_factory=list)
    probed_at: float = 0.0
    error: str = ""  # why the last probe failed ("" when it worked): the UI shows the remote as unreachable
    has_key: bool = False
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0)  # a remote silent this long mid-reply fails the reply

    @property
    def kind_name(self) -> str:
        return KINDS.get(self.kind, self.kind)

    @property
    def reachable(self) -> bool:
        return not self.error

    def model(self, model_id: str) -> RemoteModelRecord | None:
        return next((m for m in self.models if m.id == model_id), None)


@dataclass(frozen=True)
class RemoteEntry:
    """A remote model as My Models and /v1/models list it."""

    remote: Remote
    model: RemoteModelRecord

    @property
    def id(self) -> str:
        return remote_id(self.remote.name, self.model.id)


class KeyStore(Protocol):
    where: Literal["keyring", "file"]

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, key: str) -> None: ...

    def delete(self, name: str) -> None: ...


class KeyringKeys:
    """Keys in the OS keyring (a `keyring`-like module or backend object)."""

    where: Literal["keyring", "file"] = "keyring"

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def get(self, name: str) -> str | None:
        return self.backend.get_password(KEYRING_SERVICE, name)

    def set(self, name: str, key: str) -> None:
        self.backend.set_password(KEYRING_SERVICE, name, key)

    def delete(self, name: str) -> None:
        try:
            self.backend.delete_password(KEYRING_SERVICE, name)
        except Exception:  # keyring raises PasswordDeleteError for a missing entry
            logger.debug("no keyring entry to delete for remote %s", name)


def system_keyring() -> KeyringKeys | None:
    """The OS keyring when `keyring` is installed and has a real backend (not the fail/null one)."""
    try:
        import keyring  # optional dependency
        from keyring.backends import fail
    except Exception:
        return None
    try:
        backend = keyring.get_keyring()
        if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 1) <= 0:
            return None
    except Exception:
        return None
    return KeyringKeys(keyring)


class RemoteStore:
    """Thread-safe: the UI, the server and the host thread all read it. Every read goes to the file, so a
    `hearth remote add` in a terminal shows up in a running app."""

    def __init__(
        self,
        path: Path,
        *,
        keyring: KeyringKeys | Literal["auto"] | None = "auto",
        prober: Prober = probe,
    ) -> None:
        self.path = Path(path)
        self._keyring = system_keyring() if keyring == "auto" else keyring
        self.prober = prober
        self._lock = threading.RLock()
        # The parsed file by (mtime, size): routes look names up per request, and the file rarely changes.
        self._cache: tuple[tuple[int, int], dict[str, Remote], dict[str, str]] | None = None

    @property
    def key_storage(self) -> Literal["keyring", "file"]:
        return "keyring" if self._keyring is not None else "file"

    # -- reading ---------------------------------------------------------------------------------
    def list(self) -> list[Remote]:
        with self._lock:
            return list(self._read()[0].values())

    def get(self, name: str) -> Remote | None:
        with self._lock:
            return self._read()[0].get(name)

    def api_key(self, name: str) -> str | None:
        with self._lock:
            remotes, keys = self._read()
            if name not in remotes:
                return None
            if self._keyring is not None:
                try:
                    return self._keyring.get(name) or keys.get(name)
                except Exception as exc:  # a locked or broken keyring: say so, never the key
                    raise RemoteError(f"could not read the key of remote {name} from the keyring: {exc}") from exc
            return keys.get(name)

    def entries(self, *, exposed_only: bool = False) -> builtins.list[RemoteEntry]:
        """Every remote model the last probes found (no network)."""
        return [RemoteEntry(r, m) for r in self.list() if r.expose_locally or not exposed_only for m in r.models]

    def find_model(self, model_id: str) -> RemoteEntry | None:
        """The remote model `remote/model` names, if that remote has it (as last probed)."""
        parts = split_remote_id(model_id)
        if parts is None:
            return None
        remote = self.get(parts[0])
        model = remote.model(parts[1]) if remote is not None else None
        return RemoteEntry(remote, model) if remote is not None and model is not None else None

    def load_spec(self, model_id: str) -> LoadSpec | None:
        """What the engine host loads for a remote model id; None when no remote has that model."""
        entry = self.find_model(model_id)
        if entry is None:
            return None
        return remote_load_spec(entry.remote.name, entry.model.id, entry.model.context_length)

    # -- changing --------------------------------------------------------------------------------
    def add(
        self,
        url: str,
        *,
        name: str | None = None,
        api_key: str | None = None,
        expose_locally: bool = False,
        check: bool = True,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 120.0,
    ) -> Remote:
        """Probe `url` (unless `check` is off) and save it; raises RemoteError when the probe fails, so a
        remote that was never reachable is never saved by mistake. An existing name is replaced."""
        base = normalize_url(url)
        name = name or default_name(base, {r.name for r in self.list()})
        if not NAME_RE.match(name):
            raise RemoteError(f"{name!r} is not a remote name: use letters, digits, '.', '_' and '-' (no '/')")
        remote = Remote(
            name=name,
            url=base,
            expose_locally=expose_locally,
            has_key=bool(api_key),
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )
        if check:
            remote = _with_probe(remote, self.prober(base, api_key, connect_timeout_s=connect_timeout_s))
        with self._lock:
            remotes, keys = self._read()
            remotes[name] = remote
            keys.pop(name, None)
            if api_key and not self._keyring_set(name, api_key):
                keys[name] = api_key
            elif not api_key and self._keyring is not None:
                self._keyring.delete(name)
            self._write(remotes, keys)
        logger.info("remote %s added: %s at %s, %d models", name, remote.kind, base, len(remote.models))
        return remote

    def _keyring_set(self, name: str, key: str) -> bool:
        """True when the keyring took the key; a locked or broken one leaves it to the owner-only file."""
        if self._keyring is None:
            return False
        try:
            self._keyring.set(name, key)
        except Exception as exc:
            logger.warning(
                "the keyring refused the key of remote %s (%s); keeping it in %s", name, type(exc).__name__, self.path
            )
            return False
        return True

    def refresh(self, name: str) -> Remote:
        """Probe again; an unreachable remote is saved with its error (its models stay as last seen)."""
        remote = self._require(name)
        try:
            result = self.prober(remote.url, self.api_key(name), connect_timeout_s=remote.connect_timeout_s)
        except RemoteError as exc:
            remote = remote.model_copy(update={"error": str(exc), "probed_at": time.time()})
            logger.warning("remote %s: %s", name, exc)
        else:
            remote = _with_probe(remote, result)
        return self._update(remote)

    def set_expose(self, name: str, expose: bool) -> Remote:
        return self._update(self._require(name).model_copy(update={"expose_locally": expose}))

    def remove(self, name: str) -> bool:
        with self._lock:
            remotes, keys = self._read()
            if name not in remotes:
                return False
            del remotes[name]
            keys.pop(name, None)
            if self._keyring is not None:
                self._keyring.delete(name)
            self._write(remotes, keys)
        logger.info("remote %s removed", name)
        return True

    # -- file ------------------------------------------------------------------------------------
    def _require(self, name: str) -> Remote:
        remote = self.get(name)
        if remote is None:
            raise RemoteError(f"there is no remote named {name!r} (see `hearth remote ls`)")
        return remote

    def _update(self, remote: Remote) -> Remote:
        with self._lock:
            remotes, keys = self._read()
            remotes[remote.name] = remote
            self._write(remotes, keys)
        return remote

    def _read(self) -> tuple[dict[str, Remote], dict[str, str]]:
        """Copies the caller may change: (remotes by name, keys kept in the file)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {}, {}
        except OSError as exc:
            logger.warning("cannot read %s (%s); starting with no remotes", self.path, type(exc).__name__)
            return {}, {}
        version = (st.st_mtime_ns, st.st_size)
        if self._cache is None or self._cache[0] != version:
            remotes, keys = self._parse()
            self._cache = (version, remotes, keys)
        return dict(self._cache[1]), dict(self._cache[2])

    def _parse(self) -> tuple[dict[str, Remote], dict[str, str]]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.warning("cannot read %s (%s); starting with no remotes", self.path, type(exc).__name__)
            return {}, {}
        remotes: dict[str, Remote] = {}
        for item in raw.get("remotes", []) if isinstance(raw, dict) else []:
            try:
                remote = Remote.model_validate(item)
            except ValidationError:
                logger.warning("skipping a malformed remote in %s", self.path)
                continue
            remotes[remote.name] = remote
        keys = raw.get("keys") if isinstance(raw, dict) else None
        return remotes, {k: v for k, v in (keys or {}).items() if isinstance(v, str)}

    def _write(self, remotes: dict[str, Remote], keys: dict[str, str]) -> None:
        data: dict[str, Any] = {"version": 1, "remotes": [r.model_dump() for r in remotes.values()]}
        if keys:
            data["keys"] = keys
        atomic_write_text(self.path, json.dumps(data, indent=2))
        self._cache = None  # two writes within the clock's resolution would look the same by mtime
        if os.name == "posix":
            os.chmod(self.path, FILE_MODE)  # mkstemp made it 0600 already; this says it is meant


def _with_probe(remote: Remote, result: ProbeResult) -> Remote:
    models = [RemoteModelRecord(id=m.id, context_length=m.context_length, owned_by=m.owned_by) for m in result.models]
    return remote.model_copy(
        update={"kind": result.kind, "version": result.version, "models": models, "probed_at": time.time(), "error": ""}
    )


def default_name(url: str, taken: set[str]) -> str:
    """The URL's host ("gpu-box" for http://gpu-box:8000/v1), made unique with -2, -3, …"""
    host = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]).strip("-.")
    base = host or "remote"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def open_remotes(paths: AppPaths) -> RemoteStore:
    return RemoteStore(paths.data / "remotes.json")


__all__ = ["Remote", "RemoteEntry", "RemoteModel", "RemoteStore", "open_remotes"]
