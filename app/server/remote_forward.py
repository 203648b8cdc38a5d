"""Remote models on the local endpoint. A request for an exposed remote model (`remote-name/model-id`)
runs through the same route code as a local one, on an engine host of its own holding a RemoteEngine:
the reply is shaped by Hearth's response code whatever the remote's own dialect (vLLM's `reasoning`,
llama-server's `timings`), every route works (Chat Completions, Completions, Responses, Messages), and
the local model stays loaded. Each remote model gets up to `parallel` hosts (threads, one request each
at a time), so concurrent clients are served concurrently, as the remote server is built to do."""

from __future__ import annotations

import logging
import threading

from app.core.engines.registry import EngineRegistry
from app.core.engines.remote import FORMAT, RemoteEntry, RemoteStore, register_remote
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import LoadJob, ModelNotFound

logger = logging.getLogger(__name__)

PARALLEL = 4  # requests in flight per remote model; more wait in the hosts' queues
QUEUE_SIZE = 8


class RemotePool:
    """Engine hosts for exposed remote models, made on first use and shut down with the server."""

    def __init__(
        self,
        store: RemoteStore,
        registry: EngineRegistry | None = None,
        *,
        parallel: int = PARALLEL,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.store = store
        self.registry = registry or register_remote(EngineRegistry(), store)
        self.parallel = max(1, parallel)
        self.queue_size = queue_size
        self._hosts: dict[str, list[EngineHost]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def find(self, name: str) -> RemoteEntry | None:
        return self.store.find_model(name)

    def exposed(self) -> list[RemoteEntry]:
        return self.store.entries(exposed_only=True)

    def host_for(self, model_id: str) -> EngineHost:
        """The least busy host for `model_id` (a new one while fewer than `parallel` are busy)."""
        with self._lock:
            if self._closed:
                raise ModelNotFound("the server is stopping")
            hosts = self._hosts.setdefault(model_id, [])
            idle = [h for h in hosts if h.state.status in ("idle", "ready", "error") and h.queue_depth == 0]
            if idle:
                return idle[0]
            if len(hosts) < self.parallel:
                host = EngineHost(
                    self.registry,
                    resolver=self._resolve,
                    queue_size=self.queue_size,
                    name=f"hearth-remote-{len(self._hosts)}-{len(hosts)}",
                )
                hosts.append(host)
                return host
            return min(hosts, key=lambda h: h.queue_depth)

    def _resolve(self, name: str) -> LoadJob:
        spec = self.store.load_spec(name)
        if spec is None:
            raise ModelNotFound(f"no remote serves {name[:200]!r} any more (see GET /v1/models)")
        return LoadJob(spec=spec, format=FORMAT)

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._closed = True
            hosts = [h for group in self._hosts.values() for h in group]
            self._hosts.clear()
        for host in hosts:
            host.shutdown(timeout)
