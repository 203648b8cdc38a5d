"""A fake Hugging Face Hub on 127.0.0.1: the endpoints huggingface_hub 2.4 uses, a request log, fault injection."""

from __future__ import annotations

import base64
import json
import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from tests.fakehub import faults
from tests.fakehub.repos import DEFAULT_DATE, FakeFile, FakeRepo, Snapshot

log = logging.getLogger(__name__)

GOOD_TOKEN = "hf_fakehub_good_token"
_SORT_KEYS = {
    "downloads": lambda r: r.downloads,
    "likes": lambda r: r.likes,
    "lastModified": lambda r: r.last_modified,
    "createdAt": lambda r: r.created_at,
    "trendingScore": lambda r: r.trending_score,
}
_WRITE_CHUNK = 4 * 1024 * 1024


@dataclass
class RequestRecord:
    """One request as the fake saw it. Logged on arrival; `status` and `bytes_sent` fill in as the response
    goes out and are final once `done` is set (see `FakeHub.wait_idle`)."""

    method: str
    raw_path: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    status: int = 0
    bytes_sent: int = 0
    fault: str | None = None
    body: bytes = b""
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def range(self) -> str | None:
        return self.header("Range")

    @property
    def if_range(self) -> str | None:
        return self.header("If-Range")

    @property
    def authorization(self) -> str | None:
        return self.header("Authorization")


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def _decode_cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        return int(base64.urlsafe_b64decode(cursor.encode()).decode().removeprefix("o:"))
    except ValueError:
        return 0


def _parse_range(value: str | None, size: int) -> tuple[int, int] | str | None:
    """(start, end exclusive), "unsatisfiable", or None when absent/invalid/multi-range (serve everything)."""
    if not value or not value.strip().startswith("bytes=") or "," in value:
        return None
    spec = value.strip()[len("bytes=") :].strip()
    first, sep, last = spec.partition("-")
    if not sep:
        return None
    try:
        if first == "":
            suffix = int(last)
            return "unsatisfiable" if suffix <= 0 or size == 0 else (max(0, size - suffix), size)
        start = int(first)
        end = int(last) + 1 if last else max(size, start + 1)
    except ValueError:
        return None
    if start < 0 or end <= start:
        return None  # syntactically invalid: ignored, like any server does
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request, client_address):
        with self.sockets_lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.sockets_lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"
    server: _Server

    def log_message(self, format, *args):
        log.debug("fakehub: " + format, *args)

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    # ---- plumbing ----

    def _dispatch(self, method: str) -> None:
        hub = self.server.hub
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        self.rec = RequestRecord(
            method=method,
            raw_path=self.path,
            path=unquote(split.path),
            query=parse_qs(split.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        hub.log.append(self.rec)
        self.method = method
        try:
            if hub.latency:
                time.sleep(hub.latency)
            self._route(method, [unquote(s) for s in split.path.split("/")[1:]])
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the fake: keep it visible to the test, never hang the client
            log.exception("fakehub: error handling %s %s", method, self.path)
            hub.errors.append(exc)
            self.close_connection = True
        finally:
            self.rec.done.set()

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _authorized(self) -> bool:
        return self._token() in self.server.hub.accepted_tokens

    def _send_json(self, status: int, obj, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self.rec.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.method != "HEAD":
            self.wfile.write(body)
            self.rec.bytes_sent = len(body)

    def _error(self, status: int, message: str, code: str | None = None, headers: dict | None = None) -> None:
        extra = dict(headers or {})
        if code:
            extra["X-Error-Code"] = code
        extra["X-Error-Message"] = message
        self._send_json(status, {"error": message}, extra)

    def _next_link(self, path: str, offset: int) -> dict[str, str]:
        params = [(k, v) for k, vs in self.rec.query.items() if k != "cursor" for v in vs]
        params.append(("cursor", _encode_cursor(offset)))
        url = f"{self.server.hub.url}{quote(path)}?{urlencode(params)}"
        return {"Link": f'<{url}>; rel="next"'}

    # ---- routing ----

    def _route(self, method: str, segs: list[str]) -> None:
        if segs[:1] == ["api"]:
            return self._route_api(method, segs[1:])
        if len(segs) >= 5 and segs[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve(f"{segs[0]}/{segs[1]}", segs[3], "/".join(segs[4:]))
        self._error(404, "Not Found")

    def _route_api(self, method: str, segs: list[str]) -> None:
        if segs == ["whoami-v2"] and method == "GET":
            return self._whoami()
        if segs == ["models"] and method == "GET":
            return self._list_models()
        if len(segs) >= 3 and segs[0] == "models":
            repo_id, rest = f"{segs[1]}/{segs[2]}", segs[3:]
            if not rest and method == "GET":
                return self._model_info(repo_id, "main")
            if rest[:1] == ["revision"] and len(rest) >= 2 and method == "GET":
                return self._model_info(repo_id, "/".join(rest[1:]))
            if rest[:1] == ["tree"] and len(rest) >= 2 and method == "GET":
                return self._tree(repo_id, rest[1], "/".join(rest[2:]))
            if rest == ["refs"] and method == "GET":
                return self._refs(repo_id)
            if rest[:1] == ["paths-info"] and len(rest) >= 2 and method == "POST":
                return self._paths_info(repo_id, "/".join(rest[1:]))
        self._error(404, "Not Found")

    def _repo(self, repo_id: str) -> FakeRepo | None:
        """The repo if this caller may see it; otherwise sends RepoNotFound (401 without a token, like the Hub)."""
        repo = self.server.hub.repos.get(repo_id)
        if repo is None or (repo.private and not self._authorized()):
            status = 404 if self._authorized() else 401
            self._error(status, "Repository not found", "RepoNotFound")
            return None
        return repo

    def _snapshot(self, repo: FakeRepo, revision: str) -> Snapshot | None:
        snap = repo.snapshot(revision)
        if snap is None:
            self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return snap

    # ---- API endpoints ----

    def _whoami(self) -> None:
        token = self._token()
        if token is None:
            return self._error(401, "Unauthorized")
        if token not in self.server.hub.accepted_tokens:
            return self._error(401, "Invalid credentials in Authorization header")
        user = self.server.hub.user
        self._send_json(
            200,
            {
                "type": "user",
                "id": "0" * 24,
                "name": user,
                "fullname": user.title(),
                "orgs": [],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": "fakehub", "role": "read", "createdAt": DEFAULT_DATE},
                },
            },
        )

    def _list_models(self) -> None:
        hub, q = self.server.hub, self.rec.query
        repos = [r for r in hub.repos.values() if not r.private or self._authorized()]
        if search := (q.get("search") or [""])[0].lower():
            repos = [r for r in repos if search in r.repo_id.lower()]
        if author := (q.get("author") or [""])[0]:
            repos = [r for r in repos if r.author.lower() == author.lower()]
        for wanted in q.get("filter", []):
            repos = [r for r in repos if wanted in r.tags or wanted in (r.library_name, r.pipeline_tag)]
        if pipeline := (q.get("pipeline_tag") or [""])[0]:
            repos = [r for r in repos if r.pipeline_tag == pipeline]
        if gated := (q.get("gated") or [""])[0]:
            repos = [r for r in repos if bool(r.gated) == (gated.lower() == "true")]
        if (sort := (q.get("sort") or [""])[0]) in _SORT_KEYS:
            repos.sort(key=lambda r: r.repo_id)
            repos.sort(key=_SORT_KEYS[sort], reverse=True)
        limit = int((q.get("limit") or [1000])[0])
        page_size = max(1, min(limit, hub.models_page_size, 1000))
        offset = _decode_cursor((q.get("cursor") or [None])[0])
        page = repos[offset : offset + page_size]
        expand = q.get("expand", []) + q.get("expand[]", [])
        full = (q.get("full") or [""])[0].lower() == "true"
        items = []
        for r in page:
            item = r.listing_json()
            if expand or full:
                info = r.info_json(r.snapshot("main"), blobs=False)
                item = {"_id": item["_id"], "id": r.repo_id} | (
                    info if full else {k: info[k] for k in expand if k in info}
                )
            items.append(item)
        more = offset + page_size < len(repos)
        self._send_json(200, items, self._next_link("/api/models", offset + page_size) if more else None)

    def _model_info(self, repo_id: str, revision: str) -> None:
        if (repo := self._repo(repo_id)) is None or (snap := self._snapshot(repo, revision)) is None:
            return
        blobs = (self.rec.query.get("blobs") or [""])[0].lower() == "true"
        info = repo.info_json(snap, blobs=blobs)
        expand = self.rec.query.get("expand", []) + self.rec.query.get("expand[]", [])
        if expand:
            info = {"_id": info["_id"], "id": info["id"]} | {k: info[k] for k in expand if k in info}
        self._send_json(200, info)

    def _tree(self, repo_id: str, revision: str, path: str) -> None:
        if (repo := self._repo(repo_id)) is None or (snap := self._snapshot(repo, revision)) is None:
            return
        recursive = (self.rec.query.get("recursive") or [""])[0].lower() in ("true", "1")
        entries = snap.tree(path.strip("/"), recursive)
        if entries is None:
            return self._error(
                404, f"{path} does not exist on {revision}", "EntryNotFound", {"X-Repo-Commit": snap.commit}
            )
        page_size = self.server.hub.tree_page_size
        offset = _decode_cursor((self.rec.query.get("cursor") or [None])[0])
        more = offset + page_size < len(entries)
        link = self._next_link(self.rec.path, offset + page_size) if more else None
        self._send_json(200, entries[offset : offset + page_size], link)

    def _refs(self, repo_id: str) -> None:
        if (repo := self._repo(repo_id)) is not None:
            self._send_json(200, repo.refs_json())

    def _paths_info(self, repo_id: str, revision: str) -> None:
        if (repo := self._repo(repo_id)) is None or (snap := self._snapshot(repo, revision)) is None:
            return
        ctype = self.headers.get("Content-Type") or ""
        if "json" in ctype:
            paths = json.loads(self.rec.body or b"{}").get("paths", [])
        else:
            paths = parse_qs(self.rec.body.decode(), keep_blank_values=True).get("paths", [])
        infos = [info for p in paths if (info := snap.path_info(p)) is not None]
        self._send_json(200, infos)

    # ---- file downloads ----

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        hub = self.server.hub
        if (repo := self._repo(repo_id)) is None:
            return
        if repo.gated and not self._authorized():
            status = 401 if self._token() is None else 403
            return self._error(status, "Access to this gated repo is restricted", "GatedRepo")
        if (snap := self._snapshot(repo, revision)) is None:
            return
        fault = hub.faults.take(repo_id, path, self.method)
        self.rec.fault = fault.kind if fault else None
        if fault and fault.kind == faults.CHANGE_ETAG and path in snap.files:
            repo.bump(path, fault.new_content, snap.branch)
            snap = repo.snapshot(snap.branch)
        if fault and fault.kind == faults.DELAY:
            time.sleep(fault.seconds or 0)
        if fault and fault.kind == faults.STATUS:
            extra = {"Retry-After": _fmt_seconds(fault.retry_after)} if fault.retry_after is not None else {}
            return self._error(fault.status, f"Injected status {fault.status}", None, extra)
        f = snap.files.get(path)
        if f is None:
            return self._error(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": snap.commit})
        self._serve_file(f, snap.commit, fault)

    def _serve_file(self, f: FakeFile, commit: str, fault: faults.Fault | None) -> None:
        size, etag = f.size, f.etag
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if f.is_lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(size)})
        rng = _parse_range(self.headers.get("Range"), size)
        if_range = self.headers.get("If-Range")
        if if_range is not None and if_range.strip().strip('"') != etag:
            rng = None  # the client's partial copy is of another version: send it all
        if fault and fault.kind == faults.IGNORE_RANGE:
            rng = None
        if rng == "unsatisfiable":
            return self._error(
                416, "Requested range not satisfiable", None, headers | {"Content-Range": f"bytes */{size}"}
            )
        start, end = rng if isinstance(rng, tuple) else (0, size)
        status = 206 if isinstance(rng, tuple) else 200
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        self.rec.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.method == "HEAD":
            return
        self._send_body(f, start, end, fault)

    def _write(self, f: FakeFile, start: int, end: int) -> None:
        """Bytes [start, end) of the file to the socket: one write from memory, or sendfile from disk."""
        if start >= end:
            return
        if isinstance(f.source, (bytes, bytearray)):
            self.wfile.write(memoryview(f.source)[start:end])
        else:
            with open(f.source, "rb") as fh:
                self.connection.sendfile(fh, offset=start, count=end - start)
        self.rec.bytes_sent += end - start

    def _send_body(self, f: FakeFile, start: int, end: int, fault: faults.Fault | None) -> None:
        kind = fault.kind if fault else None
        if kind in (faults.DROP, faults.RESET, faults.STALL):
            cut = min(end, start + fault.after)
            self._write(f, start, cut)
            if kind == faults.STALL:
                fault.wait_stall()
                return self._write(f, cut, end)
            self.close_connection = True
            if kind == faults.RESET:
                # Linger 0 turns close() into an RST; rfile holds a socket ref, so close it first.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.rfile.close()
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        elif kind == faults.THROTTLE:
            chunk = max(1, fault.rate // 20)
            t0 = time.monotonic()
            for pos in range(start, end, chunk):
                self._write(f, pos, min(end, pos + chunk))
                ahead = (self.rec.bytes_sent / fault.rate) - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        elif kind == faults.FLIP and start <= fault.offset < end:
            self._write(f, start, fault.offset)
            self.wfile.write(bytes([f.read(fault.offset, fault.offset + 1)[0] ^ 0xFF]))
            self.rec.bytes_sent += 1
            self._write(f, fault.offset + 1, end)
        else:
            self._write(f, start, end)


def _fmt_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class FakeHub:
    """The server. `with FakeHub() as hub: hub.add_repo(...); HfApi(endpoint=hub.url)`."""

    def __init__(
        self,
        repos: tuple[FakeRepo, ...] | list[FakeRepo] = (),
        *,
        accepted_tokens: tuple[str, ...] | set[str] = (GOOD_TOKEN,),
        latency: float = 0.0,
        models_page_size: int = 1000,
        tree_page_size: int = 1000,
        user: str = "fake-user",
    ) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.log: list[RequestRecord] = []
        self.errors: list[Exception] = []  # exceptions raised inside the fake's handlers
        self.faults = faults.FaultQueue()
        self.accepted_tokens = set(accepted_tokens)
        self.latency = latency
        self.models_page_size = models_page_size
        self.tree_page_size = tree_page_size
        self.user = user
        self._server = _Server(self)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakehub", daemon=True
        )
        self._thread.start()
        for repo in repos:
            self.add_repo(repo)

    def add_repo(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def remove_repo(self, repo_id: str) -> None:
        self.repos.pop(repo_id, None)

    def resolve_url(self, repo_id: str, path: str, revision: str = "main") -> str:
        """The URL `hf_hub_url` builds for this file."""
        return f"{self.url}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(path)}"

    def requests(self, method: str | None = None, path_contains: str = "") -> list[RequestRecord]:
        return [r for r in self.log if (method is None or r.method == method) and path_contains in r.path]

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until every logged request has finished (so `status`/`bytes_sent` are final)."""
        deadline = time.monotonic() + timeout
        return all(r.done.wait(max(0.0, deadline - time.monotonic())) for r in list(self.log))

    def clear_log(self) -> None:
        self.log.clear()

    def close(self) -> None:
        self.faults.release_all()
        self._server.shutdown()
        with self._server.sockets_lock:
            for sock in list(self._server.open_sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeHub:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
