"""RemoteEngine: a model on a remote OpenAI-compatible server, behind the Engine interface, so the host
"loads" it and chat and API jobs reach it the same way they reach a local model.

The host owns it on its thread; each generation is one streamed HTTP request. Cancel is checked on every
line the server sends, and a watcher shuts the socket down at once when a Stop comes while the server is
silent (a long prompt): the server sees a client that left and frees its slot. A server silent for the
remote's read timeout fails the reply with that reason.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import httpx

from app.core.engines.base import Capabilities, Chunk, Embeddings, GenerateRequest, LoadSpec, ModelInfo, Rankings
from app.core.engines.errors import EngineError, Unsupported
from app.core.engines.remote.errors import RemoteError, RemoteUnreachable
from app.core.engines.remote.ids import FORMAT, parse_spec_path
from app.core.engines.remote.probe import auth_headers
from app.core.engines.remote.store import Remote, RemoteStore
from app.core.engines.remote.wire import ReplyDecoder, http_error, request_body, sse_data

logger = logging.getLogger(__name__)

CANCEL_POLL_S = 0.05  # how often a stream's watcher looks at the cancel flag (while the reply lasts)
CHARS_PER_TOKEN = 4  # a remote does not tokenize for us: counts are estimates, the server checks for real


class RemoteEngine:
    name = "remote"
    format = FORMAT

    def __init__(self, store: RemoteStore, transport: httpx.BaseTransport | None = None) -> None:
        self.store = store
        self.transport = transport
        # What a remote can do through the OpenAI API: tools yes (the server parses them), grammars and
        # logprobs not through Hearth's types; embeddings would be a second model, not this one.
        self.capabilities = Capabilities(chat=True, completion=True, embeddings=False, grammar=False, tools=True)
        self.info: ModelInfo | None = None
        # The server runs the batching and the native code: one request at a time from here, nothing to mark.
        self.sequences: None = None
        self.native_activity: None = None
        self._remote: Remote | None = None
        self._model = ""
        self._client: httpx.Client | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self, spec: LoadSpec) -> ModelInfo:
        """Check the remote answers and serves the model; the context is the server's own, when it says."""
        parts = parse_spec_path(spec.path)
        if parts is None:
            raise EngineError(f"{spec.path} does not name a remote model (remote-name/model-id)")
        name, model = parts
        remote = self.store.get(name)
        if remote is None:
            raise EngineError(f"there is no remote named {name!r} (add it with `hearth remote add URL`)")
        timeout = httpx.Timeout(remote.read_timeout_s, connect=remote.connect_timeout_s)
        client = httpx.Client(
            base_url=remote.url,
            headers=auth_headers(self.store.api_key(name)),
            timeout=timeout,
            transport=self.transport,
        )
        try:
            listed = self._listing(client, remote)
        except BaseException:
            client.close()
            raise
        entry = listed.get(model)
        if entry is None:
            client.close()
            served = ", ".join(sorted(listed)[:5]) or "nothing"
            raise EngineError(f"the remote {name} does not serve {model!r} (it serves: {served})")
        stored = remote.model(model)
        n_ctx = _int(entry.get("context_length")) or _int(entry.get("max_model_len"))
        n_ctx = n_ctx or (stored.context_length if stored else None) or spec.n_ctx
        self._client, self._remote, self._model = client, remote, model
        self.info = ModelInfo(
            path=spec.path,
            format=FORMAT,
            n_ctx=n_ctx,
            chat_template=None,
            extra={"remote": name, "model": model, "kind": remote.kind, "url": remote.url},
        )
        logger.info("remote model %s/%s ready (%s, context %d)", name, model, remote.kind_name, n_ctx)
        return self.info

    def _listing(self, client: httpx.Client, remote: Remote) -> dict[str, dict]:
        """One /v1/models call (no retry: a load is asked for now, and the probe already waited)."""
        try:
            response = client.get("/v1/models", timeout=httpx.Timeout(remote.connect_timeout_s * 2))
        except httpx.TimeoutException as exc:
            raise RemoteUnreachable(f"the remote {remote.name} ({remote.url}) did not answer in time") from exc
        except httpx.TransportError as exc:
            raise RemoteUnreachable(f"could not reach the remote {remote.name} ({remote.url}): {exc}") from exc
        if response.status_code >= 400:
            raise http_error(remote.name, response)
        try:
            data = response.json().get("data") or []
        except (ValueError, AttributeError) as exc:
            raise RemoteError(f"the remote {remote.name} did not list its models") from exc
        return {m["id"]: m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)}

    def unload(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
        self.info, self._remote = None, None

    # -- tokens ----------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        raise Unsupported("a remote model does not tokenize through Hearth")

    def count_tokens(self, request: GenerateRequest) -> int:
        """An estimate (characters / 4); the remote refuses a prompt over its context itself."""
        if request.messages is not None:
            chars = sum(len(m.content) + 8 for m in request.messages)
        else:
            chars = len(request.prompt or "")
        return max(1, chars // CHARS_PER_TOKEN)

    def embed(self, texts: list[str], cancel: threading.Event | None = None) -> Embeddings:
        raise Unsupported("embeddings from a remote model are not supported yet")

    def rerank(self, query: str, documents: list[str], cancel: threading.Event | None = None) -> Rankings:
        raise Unsupported("reranking with a remote model is not supported yet")

    # -- generation ------------------------------------------------------------------------------
    def generate(self, request: GenerateRequest, cancel: threading.Event) -> Iterator[Chunk]:
        """Sends the request and waits for the answer's headers, so a refusal (a prompt over the remote's
        context, an unknown model) raises here, before the host reports the generation started."""
        client, remote = self._client, self._remote
        if client is None or remote is None or self.info is None:
            raise EngineError("no model is loaded")
        path, body = request_body(request, self._model, remote.kind)
        t0 = time.perf_counter()
        try:
            response = client.send(client.build_request("POST", path, json=body), stream=True)
        except httpx.TimeoutException as exc:
            raise self._timeout(remote, exc) from exc
        except httpx.TransportError as exc:
            raise RemoteUnreachable(f"could not reach the remote {remote.name} ({remote.url}): {exc}") from exc
        if response.status_code >= 400:
            try:
                response.read()
            finally:
                response.close()
            raise http_error(remote.name, response)
        return self._stream(response, remote, cancel, t0, chat=request.messages is not None)

    def _stream(
        self, response: httpx.Response, remote: Remote, cancel: threading.Event, t0: float, *, chat: bool
    ) -> Iterator[Chunk]:
        decoder = ReplyDecoder(remote.name, chat=chat)
        t_first: float | None = None
        done = False
        finished = threading.Event()
        # A remote reading a long prompt sends nothing for a while: Stop must not wait for its next byte.
        watcher = threading.Thread(target=_abort_on_cancel, args=(response, cancel, finished), daemon=True)
        watcher.start()
        try:
            for line in response.iter_lines():
                if cancel.is_set():
                    break
                data = sse_data(line)
                if data is None:
                    continue
                if data == "[DONE]":
                    done = True
                    break
                try:
                    obj = json.loads(data)
                except ValueError:
                    logger.debug("remote %s sent a line that is not JSON", remote.name)
                    continue
                text = decoder.feed(obj)
                if text:
                    if t_first is None:
                        t_first = time.perf_counter()
                    yield Chunk(text=text)
        except httpx.TimeoutException as exc:
            if not cancel.is_set():
                raise self._timeout(remote, exc) from exc
        except httpx.TransportError as exc:
            if not cancel.is_set():
                reason = str(exc) or type(exc).__name__
                raise RemoteError(f"the connection to the remote {remote.name} broke mid-reply ({reason})") from exc
        finally:
            finished.set()
            response.close()  # the server sees the client leave and frees its slot
        t_end = time.perf_counter()
        if cancel.is_set():
            yield Chunk(text=decoder.close(), finish_reason="cancelled", stats=decoder.stats(t0, t_first, t_end))
            return
        if not done and decoder.finish is None:
            raise RemoteError(f"the remote {remote.name} ended the reply before finishing it (did the server stop?)")
        yield Chunk(
            text=decoder.close(), finish_reason=decoder.finish or "stop", stats=decoder.stats(t0, t_first, t_end)
        )

    @staticmethod
    def _timeout(remote: Remote, exc: httpx.TimeoutException) -> RemoteError:
        if isinstance(exc, httpx.ConnectTimeout):
            return RemoteUnreachable(
                f"the remote {remote.name} did not accept a connection within {remote.connect_timeout_s:g} s"
            )
        return RemoteError(
            f"the remote {remote.name} sent nothing for {remote.read_timeout_s:g} s (its read timeout); it may be "
            "overloaded or stuck",
            "unavailable",
        )


def _abort_on_cancel(response: httpx.Response, cancel: threading.Event, finished: threading.Event) -> None:
    """Watcher thread: on cancel, shut the connection's socket down, which wakes a read blocked in it
    (closing the socket alone does not, on Linux); the generator then ends as cancelled."""
    while not finished.is_set():
        if cancel.wait(CANCEL_POLL_S):
            if finished.is_set():
                return
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    logger.debug("the remote connection was already closed")
            return


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
