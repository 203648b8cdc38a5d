"""Remote engines: OpenAI-compatible servers elsewhere (vLLM, SGLang, llama-server, Ollama, LM Studio,
TGI, another Hearth) as models Hearth can load, chat with and expose on its own endpoint.

    store = open_remotes(paths)                       # remotes.json (0600) + keys (keyring or file)
    store.add("http://gpu-box:8000", api_key=...)     # probes: kind, models, context lengths
    store.entries()                                   # RemoteEntry per model: .id "gpu-box/model-id"
    register_remote(registry, store)                  # the "remote" engine format, like any plug-in
    host.submit(LoadJob(spec=store.load_spec("gpu-box/model-id"), format=FORMAT))
"""

from __future__ import annotations

from app.core.engines.registry import EngineRegistry
from app.core.engines.remote.errors import RemoteError, RemoteRefused, RemoteUnreachable
from app.core.engines.remote.ids import FORMAT, parse_spec_path, remote_id, remote_load_spec, split_remote_id
from app.core.engines.remote.probe import KINDS, ProbeResult, RemoteModel, normalize_url, probe
from app.core.engines.remote.store import Remote, RemoteEntry, RemoteModelRecord, RemoteStore, open_remotes

__all__ = [
    "FORMAT",
    "KINDS",
    "ProbeResult",
    "Remote",
    "RemoteEntry",
    "RemoteError",
    "RemoteModel",
    "RemoteModelRecord",
    "RemoteRefused",
    "RemoteStore",
    "RemoteUnreachable",
    "normalize_url",
    "open_remotes",
    "parse_spec_path",
    "probe",
    "register_remote",
    "remote_id",
    "remote_load_spec",
    "split_remote_id",
]


def register_remote(registry: EngineRegistry, store: RemoteStore) -> EngineRegistry:
    """Add the "remote" format to `registry`: each load makes a RemoteEngine reading `store`."""

    def factory():
        from app.core.engines.remote.engine import RemoteEngine

        return RemoteEngine(store)

    registry.register(FORMAT, "remote server", factory)
    return registry
