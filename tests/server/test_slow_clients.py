"""security.md T41: slow and exhausting clients against the real server, over raw sockets. Headers that do
not arrive in time close the connection, a body that does not arrive in time is a 408 in the route's shape,
connections past the caps are refused, accept() failing for want of descriptors is one line on stderr, and
after each the server answers as before. Streams are never cut by these deadlines."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.server.security import Policy
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
KEY = "hearth-test-key-0123456789"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _is_closed(sock: socket.socket, wait_s: float) -> bool:
    """Whether the server closed `sock` (EOF or reset) within `wait_s`, reading and dropping any data."""
    sock.settimeout(wait_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def _read_reply(sock: socket.socket, wait_s: float) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response."""
    sock.settimeout(wait_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def test_t41_headers_not_complete_within_the_timeout_close_the_connection_before_the_key_check(make_server):
    live = make_server(policy=Policy.of(api_key=KEY), limits={"header_timeout_s": 1.0})
    silent = _connect(live.url)
    trickle = _connect(live.url)
    kept_alive = _connect(live.url)
    kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert _read_reply(kept_alive, 5)[0] == 200
    t0 = time.monotonic()
    trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    closed: dict[str, float] = {}
    while time.monotonic() - t0 < 6 and len(closed) < 3:
        for name, sock in (("silent", silent), ("trickle", trickle), ("kept_alive", kept_alive)):
            if name in closed:
                continue
            try:
                if name != "silent":
                    sock.sendall(b"x")  # a header byte every 0.1 s: never a complete request
            except OSError:
                closed[name] = time.monotonic() - t0
                continue
            if _is_closed(sock, 0.03):
                closed[name] = time.monotonic() - t0
        time.sleep(0.1)
    assert set(closed) == {"silent", "trickle", "kept_alive"}, closed
    assert all(0.8 <= s <= 4 for s in closed.values()), closed  # not before the timeout, soon after it
    assert live.client.get("/v1/models").status_code == 200


def test_t41_a_kept_alive_connection_gets_the_header_deadline_again_after_each_response(make_server):
    live = make_server(limits={"header_timeout_s": 1.0})
    sock = _connect(live.url)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, headers, _ = _read_reply(sock, 5)
    assert status == 200 and headers.get("connection") != "close" and not _is_closed(sock, 0.5)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    for _ in range(20):
        try:
            sock.sendall(b"y")
        except OSError:
            break
        if _is_closed(sock, 0.1):
            break
    else:
        pytest.fail("a kept-alive connection trickling its second request's headers stayed open for 2 s")


@pytest.mark.parametrize(
    ("path", "framing"),
    [("/v1/chat/completions", "length"), ("/v1/chat/completions", "chunked"), ("/v1/messages", "length")],
)
def test_t41_a_body_slower_than_its_deadline_is_408_in_the_routes_shape_and_closes(make_server, path, framing):
    live = make_server(body_timeout_s=1.0)
    sock = _connect(live.url)
    frame = "Content-Length: 1000" if framing == "length" else "Transfer-Encoding: chunked"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{frame}\r\n\r\n"
    pieces = [b'{"model": "alpha", ', b'"messages": [', b" "]
    if framing == "chunked":
        pieces = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces]
    t0 = time.monotonic()
    sock.sendall(head.encode())
    for piece in pieces:  # a third of a second apart, then nothing: the body never completes
        sock.sendall(piece)
        time.sleep(0.3)
    status, headers, body = _read_reply(sock, 5)
    elapsed = time.monotonic() - t0
    assert status == 408 and headers["connection"] == "close" and _is_closed(sock, 2)
    assert 0.9 <= elapsed <= 4, elapsed
    error = json.loads(body)
    if path == "/v1/messages":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
    else:
        assert error["error"]["code"] == "request_timeout" and error["error"]["type"] == "invalid_request_error"
    assert "1 s" in (error["error"]["message"])
    assert live.client.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert wait_until(lambda: any(e.status == 408 for e in live.context.log.items()), 2)  # in the request log


def test_t41_a_request_refused_before_its_body_is_read_closes_the_connection(make_server):
    # LAN mode: without the key, nobody may hold a connection by trickling a body after the 401.
    live = make_server(policy=Policy.of(api_key=KEY), limits={"header_timeout_s": 30})
    sock = _connect(live.url)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{")
    status, headers, _ = _read_reply(sock, 5)
    assert status == 401 and headers["connection"] == "close" and _is_closed(sock, 1)
    kept = _connect(live.url)  # one without a body keeps its connection
    kept.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, headers, _ = _read_reply(kept, 5)
    assert status == 401 and "connection" not in headers and not _is_closed(kept, 0.3)


def test_t41_a_body_in_pieces_within_the_deadline_and_a_stream_past_both_deadlines_are_served(make_server):
    live = make_server(tok_s=20, body_timeout_s=1.0, limits={"header_timeout_s": 1.0})
    body = json.dumps({**CHAT, "max_tokens": 40, "stream": True}).encode()
    sock = _connect(live.url)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n")
    sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body))
    for i in range(0, len(body), len(body) // 3 + 1):  # three pieces within 0.4 s
        sock.sendall(body[i : i + len(body) // 3 + 1])
        time.sleep(0.15)
    t0 = time.monotonic()
    sock.settimeout(10)
    data = b""
    while b"data: [DONE]" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the stream was cut after {time.monotonic() - t0:.1f} s: {data[-200:]!r}"
        data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert time.monotonic() - t0 > 1.5  # 40 tokens at 20/s: past both 1 s deadlines
    assert data.count(b'"content":"') >= 40


def test_t41_connections_past_the_cap_are_closed_at_once_and_requests_past_the_limit_get_503(make_server):
    live = make_server(limits={"max_connections": 4, "limit_concurrency": 3, "header_timeout_s": 30})
    idle = [_connect(live.url) for _ in range(3)]
    fourth = _connect(live.url)  # past limit_concurrency: uvicorn answers its request 503
    fourth.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert _read_reply(fourth, 5)[0] == 503
    idle.append(_connect(live.url))
    time.sleep(0.2)  # the server has accepted all four before the fifth comes
    fifth = _connect(live.url)
    t0 = time.monotonic()
    assert _is_closed(fifth, 2) and time.monotonic() - t0 < 1
    for sock in idle:
        sock.close()
    time.sleep(0.3)
    assert httpx.get(live.url + "/health", timeout=5).status_code == 200


def test_t41_seventy_connections_at_once_are_all_served_under_the_default_limits(make_server):
    live = make_server()
    socks = [_connect(live.url) for _ in range(70)]  # all open before any asks: 70 connections counted
    time.sleep(0.2)
    for sock in socks:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    statuses = [_read_reply(sock, 10)[0] for sock in socks]
    assert statuses == [200] * 70
    for sock in socks:
        sock.close()


def test_t41_garbage_requests_in_a_loop_are_one_warning_a_minute(make_server):
    live = make_server()
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        for _ in range(50):
            with _connect(live.url) as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                assert _read_reply(sock, 5)[0] == 400
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert seen == ["Invalid HTTP request received."]
    assert live.client.get("/health").status_code == 200


SERVE = """
import logging, resource, sys
from app.server.runner import ServerThread

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
runner = ServerThread(app, "127.0.0.1", 0, header_timeout_s=60, max_connections=100_000)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(runner.start(), flush=True)
sys.stdin.read()
runner.stop()
"""


def test_t41_out_of_descriptors_is_one_line_on_stderr_and_the_server_recovers(tmp_path):
    pytest.importorskip("resource")
    stderr = (tmp_path / "stderr.txt").open("wb")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        held = []
        for _ in range(150):  # 64 descriptors for the server: it runs out after about 55
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=0.5))
            except OSError:
                break
        assert len(held) > 70
        time.sleep(4)  # asyncio retries accept() every second, each time failing for every queued connection
        stderr.flush()
        written = (tmp_path / "stderr.txt").read_text()
        assert written.count("cannot accept connections") == 1, written[:2000]
        assert len(written) < 10_000, len(written)
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while True:  # its descriptors freed, it accepts again
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).text == "ok":
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not answer again within 10 s"
            time.sleep(0.2)
    finally:
        server.communicate(timeout=15)
        stderr.close()
    assert server.returncode == 0
