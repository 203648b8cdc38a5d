"""One settings model, saved atomically as JSON under the config dir."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.core.atomic import atomic_write_text
from app.core.events import Event
from app.core.paths import AppPaths

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class WindowState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    geometry: str = ""  # the window's "rect:x,y,w,h[,max]" (an older base64 Qt blob is still read); opaque to core
    # First start opens where a new user begins: finding a model. A page saved by an earlier run wins.
    page: str = "discover"


# Collides with none of LM Studio (1234), Ollama (11434), llama-server (8080), vLLM (8000), Jan (1337).
DEFAULT_SERVER_PORT = 8487
# Ollama's own port: tools with its address hard-coded find Hearth there when ServerSettings.ollama_port is on.
OLLAMA_PORT = 11434
# Generations the engine runs at once (chat and API together); the planner gives fewer where memory is short.
# Auto (0, the default) lets memory decide, up to AUTO_PARALLEL_MAX: eight clients are batched, not queued,
# where their KV cache fits (llama-server's auto gives four that share one context).
AUTO_PARALLEL = 0
AUTO_PARALLEL_MAX = 8
DEFAULT_PARALLEL_REQUESTS = AUTO_PARALLEL
MAX_PARALLEL_REQUESTS = 16
# Speculative decoding: "auto" as planned (prompt lookup, each draft sized by what it measures to earn on
# this machine, none where nothing pays), "off" never. "on" was a third choice once; it now means "auto".
SpeculativeSetting = Literal["auto", "on", "off"]
# What a command's --speculative may ask for (a LoadSpec mode; "draft" comes with a draft model instead).
SPECULATIVE_FLAGS = ("auto", "ngram", "off")
# The longest chat template a user may paste for a model (Settings.chat_templates): real ones are 1-20 KB.
MAX_CHAT_TEMPLATE_CHARS = 100_000


def load_speculative(setting: str, flag: str | None = None) -> str | None:
    """The LoadSpec mode asked for: a command's --speculative `flag`, else the setting; None: as planned
    (preflight.speculation_for says what a load then runs with)."""
    return flag or {"on": "auto", "off": "off"}.get(setting)


class ServerSettings(BaseModel):
    """The local API server. Loopback by default; LAN is an explicit choice and always needs the key."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    port: int = Field(default=DEFAULT_SERVER_PORT, ge=1, le=65535)
    bind: Literal["loopback", "lan"] = "loopback"
    api_key: str = ""  # generated on first use; empty means none yet
    require_api_key: bool = False  # on loopback; LAN mode requires it whatever this says
    cors_origins: list[str] = Field(default_factory=list)  # exact origins, e.g. "http://localhost:3000"
    start_with_app: bool = False
    keep_serving_in_tray: bool = True  # closing the window while serving leaves a tray icon, not a quit
    jit_load: bool = True  # a request for a model that is not loaded loads it
    idle_ttl_minutes: int = Field(default=0, ge=0, le=24 * 60)  # 0: never unload an idle model
    max_loaded_models: int = Field(default=0, ge=0, le=64)  # 0: as many as fit in memory
    queue_size: int = Field(default=8, ge=1, le=256)
    # The context a JIT load asks the planner for; it lowers it to what fits. 0: the model's trained
    # length (agents send 10-30k-token system prompts; the chat's default of 8k is too short for them).
    jit_context: int = Field(default=0, ge=0, le=1 << 20)
    keep_responses: bool = False  # stored Responses (previous_response_id) survive a restart, on disk
    # Also listen on OLLAMA_PORT (same app, same front door), for tools that only know Ollama's address.
    ollama_port: bool = False
    # Images a request names by http(s) URL are fetched (10 s, 20 MiB at most); off: only data is taken.
    fetch_image_urls: bool = False

    @property
    def key_required(self) -> bool:
        return self.bind == "lan" or self.require_api_key

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, value: list[str]) -> list[str]:
        out = []
        for origin in value:
            origin = origin.strip().rstrip("/")
            if origin == "*" or not origin.lower().startswith(("http://", "https://")) or " " in origin:
                raise ValueError(f"{origin!r} is not an exact origin (scheme://host[:port])")
            out.append(origin)
        return out

    @field_validator("api_key")
    @classmethod
    def _check_key(cls, value: str) -> str:
        value = value.strip()
        if any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("the API key must not contain spaces or control characters")
        return value


class DocumentsSettings(BaseModel):
    """Settings → Documents: which models index and rerank the user's documents."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    # The library name of the embedding model new collections use (the API's vector stores too); empty: the
    # library's most recently used embedding model.
    embedding_model: str = Field(default="", max_length=500)
    # A reranker searches use when one is named here (loaded on demand); empty: only one already loaded.
    reranker: str = Field(default="", max_length=500)
    # Folders added to a collection are looked at again on start and every few seconds while Hearth runs.
    watch_folders: bool = True


class Settings(BaseModel):
    # Unknown keys from a newer Hearth are dropped, not fatal: a downgrade must still start.
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    schema_version: int = SCHEMA_VERSION
    models_dir: str = ""  # empty: the default models folder under the data dir
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    theme: Literal["system", "light", "dark"] = "system"  # system: follow the OS's light or dark scheme
    measure_bandwidth_on_start: bool = True
    window: WindowState = Field(default_factory=WindowState)
    hf_endpoint: str = ""  # empty: HF_ENDPOINT, else the public Hub
    hf_token: str = ""  # empty: HF_TOKEN, else anonymous
    parallel_downloads: int = Field(default=2, ge=1, le=8)
    # Parallel slots a model loads with (each with its own KV cache for one conversation's context).
    parallel_requests: int = Field(default=DEFAULT_PARALLEL_REQUESTS, ge=AUTO_PARALLEL, le=MAX_PARALLEL_REQUESTS)
    speculative: SpeculativeSetting = "auto"
    # GGUF models load with LoadSpec.deterministic: a reply at temperature 0 (or with a seed) is the same alone,
    # beside other requests and from the prompt cache, at the speed batching and drafting would add.
    deterministic: bool = False
    # A model's library id -> the library model that drafts for it (same tokenizer, smaller), picked in
    # the chat's Advanced load options; the API server's loads of that model use it too.
    draft_models: dict[str, str] = Field(default_factory=dict)
    # A model's library id -> the chat template it runs with: a built-in format's name ("gemma") or a pasted
    # template (checked in the sandbox when picked: runtime.chat_templates), in My Models or the chat's
    # Advanced options; the API server's loads of that model use it too.
    chat_templates: dict[str, str] = Field(default_factory=dict)
    server: ServerSettings = Field(default_factory=ServerSettings)
    # Model turns in one reply that uses MCP tools: a model that keeps calling stops here and answers.
    tool_steps: int = Field(default=10, ge=1, le=100)
    documents: DocumentsSettings = Field(default_factory=DocumentsSettings)

    @field_validator("chat_templates")
    @classmethod
    def _cap_templates(cls, value: dict[str, str]) -> dict[str, str]:
        # A hand-edited file's oversized template is dropped (that model goes back to Auto), not fatal.
        kept = {k: v for k, v in value.items() if len(v) <= MAX_CHAT_TEMPLATE_CHARS}
        if len(kept) < len(value):
            logger.warning("dropped %d chat template(s) over the size cap", len(value) - len(kept))
        return kept

    @field_validator("hf_endpoint")
    @classmethod
    def _check_endpoint(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not value.lower().startswith(("http://", "https://")):
            raise ValueError("the Hub endpoint must be an http:// or https:// URL")
        if any(c.isspace() for c in value):
            raise ValueError("the Hub endpoint must not contain spaces")
        return value

    @field_validator("hf_token")
    @classmethod
    def _check_token(cls, value: str) -> str:
        value = value.strip()
        if any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("the Hub token must not contain spaces or control characters")
        return value

    def models_path(self, paths: AppPaths) -> Path:
        return Path(self.models_dir).expanduser() if self.models_dir else paths.models


class SettingsStore:
    """Loads and saves `Settings`; `changed` fires on the thread that calls `save`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.changed: Event[Settings] = Event("settings.changed")

    def load(self) -> Settings:
        if not self.path.exists():
            return Settings()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return Settings.model_validate(raw)
        except (OSError, ValueError, ValidationError) as exc:
            # Keep the unreadable file for the user rather than overwrite it silently.
            backup = self.path.with_suffix(".json.bad")
            try:
                self.path.replace(backup)
            except OSError:
                pass
            logger.warning(
                "settings file %s unreadable (%s); using defaults, kept it as %s", self.path, exc, backup.name
            )
            return Settings()

    def save(self, settings: Settings) -> None:
        atomic_write_text(self.path, settings.model_dump_json(indent=2) + "\n")
        self.changed.emit(settings)
