"""GGUF headers over HTTP Range, against the fake Hub on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from app.core.hub.client import HubClient
from app.core.hub.errors import HubRefused
from app.core.hub.ranged import HttpRangeSource, read_remote_gguf, read_remote_gguf_split
from app.core.hub.urls import resolve_url
from app.core.models.errors import ModelFileError
from app.core.models.gguf import read_gguf_header
from app.core.models.spec import spec_from_gguf
from tests.fakehub import GOOD_TOKEN, FakeRepo, Fault, default_gguf, gated_repo, gguf_repo

KiB, MiB = 1024, 1024 * 1024
REPO = "org/Remote-GGUF"


@pytest.fixture(scope="module")
def big_tiny_gguf(tmp_path_factory) -> Path:
    """A real llama GGUF: ~8.7 KB of header in front of ~5 MB of tensors."""
    pytest.importorskip("gguf")
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    return write_tiny_llama_gguf(tmp_path_factory.mktemp("remote") / "tiny4.gguf", n_layer=4)


@pytest.fixture(scope="module")
def sparse_64mib(tmp_path_factory, big_tiny_gguf) -> Path:
    """64 MiB on disk (sparse) starting with a GGUF header: more than loopback socket buffers hold."""
    path = tmp_path_factory.mktemp("sparse") / "big.gguf"
    path.write_bytes(big_tiny_gguf.read_bytes()[: 64 * KiB])
    os.truncate(path, 64 * MiB)
    return path


def _serve(fake_hub, files: dict) -> str:
    fake_hub.add_repo(FakeRepo(REPO, files=files))
    return fake_hub.url


def _gets(fake_hub, path: str):
    return [r for r in fake_hub.requests("GET", "/resolve/") if r.path.endswith(path)]


def test_remote_header_equals_local_and_uses_ranges_only(fake_hub, big_tiny_gguf):
    _serve(fake_hub, {"tiny.gguf": big_tiny_gguf})
    url = resolve_url(fake_hub.url, REPO, "tiny.gguf")
    with HttpRangeSource(url, chunk_size=64 * KiB) as source:
        remote = read_gguf_header(source, chunk_size=64 * KiB)
        fetched, requests = source.bytes_fetched, source.requests
    local = read_gguf_header(big_tiny_gguf)
    size = big_tiny_gguf.stat().st_size
    assert remote == local and remote.file_size == size
    assert spec_from_gguf(remote) == spec_from_gguf(local)
    assert requests == 1 and fetched == 64 * KiB < size // 50
    gets = _gets(fake_hub, "tiny.gguf")
    assert len(gets) == 1 and gets[0].range == "bytes=0-65535" and gets[0].status == 206


def test_read_remote_gguf_default_chunks(fake_hub, big_tiny_gguf):
    _serve(fake_hub, {"tiny.gguf": big_tiny_gguf})
    header = read_remote_gguf(resolve_url(fake_hub.url, REPO, "tiny.gguf"))
    assert header == read_gguf_header(big_tiny_gguf)
    fake_hub.wait_idle()
    gets = _gets(fake_hub, "tiny.gguf")
    assert gets and all(r.range and r.range.startswith("bytes=") for r in gets)
    assert sum(r.bytes_sent for r in gets) <= 2 * MiB


def test_smollm2_header_in_few_requests(fake_hub, smollm2_gguf):
    """A 98 MB model: its ~1.8 MB header costs one or two 2 MiB requests."""
    _serve(fake_hub, {"smol.gguf": smollm2_gguf})
    url = resolve_url(fake_hub.url, REPO, "smol.gguf")
    with HttpRangeSource(url) as source:
        header = read_gguf_header(source, chunk_size=source.chunk_size)
        assert source.requests <= 2 and source.bytes_fetched <= 4 * MiB
    assert header == read_gguf_header(smollm2_gguf)
    assert spec_from_gguf(header) == spec_from_gguf(read_gguf_header(smollm2_gguf))
    fake_hub.wait_idle()
    gets = _gets(fake_hub, "smol.gguf")
    assert all(r.range for r in gets)
    assert sum(r.bytes_sent for r in gets) <= 4 * MiB < smollm2_gguf.stat().st_size // 20


def test_split_gguf_reads_every_shard(fake_hub):
    repo = fake_hub.add_repo(gguf_repo("org/Tiny-GGUF", quants=("Q8_0",), split=("Q8_0", 3)))
    names = sorted(p for p in repo.files if p.endswith(".gguf"))
    urls = [resolve_url(fake_hub.url, repo.repo_id, n) for n in names]
    headers = read_remote_gguf_split(urls)
    assert [h.metadata["split.no"] for h in headers] == [0, 1, 2]
    assert all(h.metadata["split.count"] == 3 and h.architecture == "llama" for h in headers)
    assert [h.file_size for h in headers] == [len(repo.files[n]) for n in names]
    assert spec_from_gguf(headers).file_bytes == sum(len(repo.files[n]) for n in names)
    assert len(fake_hub.requests("GET", "/resolve/")) == 3
    with pytest.raises(ModelFileError, match="out of order"):
        read_remote_gguf_split([urls[1], urls[0], urls[2]])
    with pytest.raises(ModelFileError, match="3 parts, not 2"):
        read_remote_gguf_split(urls[:2])


def test_server_ignoring_range_is_refused_without_downloading(fake_hub, sparse_64mib):
    _serve(fake_hub, {"big.gguf": sparse_64mib})
    fake_hub.faults.add("big.gguf", Fault.ignore_range())
    url = resolve_url(fake_hub.url, REPO, "big.gguf")
    source = HttpRangeSource(url, chunk_size=64 * KiB)
    with pytest.raises(ModelFileError, match="Range"):
        read_gguf_header(source, chunk_size=64 * KiB)
    assert source.bytes_fetched == 0
    source.close()
    assert fake_hub.wait_idle(10)
    (rec,) = _gets(fake_hub, "big.gguf")
    assert rec.fault == "ignore_range" and rec.status == 200 and rec.range
    assert rec.bytes_sent < 16 * MiB  # not the 64 MiB body


def test_whole_body_no_larger_than_the_range_is_accepted(fake_hub):
    """A tiny file answered with 200 costs no more than the range asked for: fine."""
    data = default_gguf("Q4_K_M")
    _serve(fake_hub, {"small.gguf": data})
    fake_hub.faults.add("small.gguf", Fault.ignore_range())
    header = read_remote_gguf(resolve_url(fake_hub.url, REPO, "small.gguf"))
    assert header == read_gguf_header(data)


def test_byte_cap_stops_the_reader(fake_hub, big_tiny_gguf):
    _serve(fake_hub, {"tiny.gguf": big_tiny_gguf})
    url = resolve_url(fake_hub.url, REPO, "tiny.gguf")
    source = HttpRangeSource(url, chunk_size=4096, max_bytes=8192)
    with pytest.raises(ModelFileError, match="read more than 8192 bytes of header"):
        read_gguf_header(source, chunk_size=4096)
    assert source.bytes_fetched <= 8192
    fake_hub.wait_idle()
    assert sum(r.bytes_sent for r in _gets(fake_hub, "tiny.gguf")) <= 8192
    # The default cap is spelled in MiB.
    small = HttpRangeSource(url, chunk_size=MiB, max_bytes=64 * MiB)
    small.bytes_fetched = 64 * MiB - 1
    with pytest.raises(ModelFileError, match="read more than 64 MiB of header"):
        small.read_at(0, 10)


@pytest.mark.parametrize("status", [404, 500, 503])
def test_http_errors_name_the_status(fake_hub, status):
    _serve(fake_hub, {"m.gguf": default_gguf("Q4_0")})
    path = "m.gguf" if status != 404 else "missing.gguf"
    if status != 404:
        fake_hub.faults.add(path, Fault.status_code(status))
    with pytest.raises(ModelFileError, match=f"HTTP {status}"):
        read_remote_gguf(resolve_url(fake_hub.url, REPO, path))


def test_gated_repo_needs_the_token_and_gets_it(fake_hub):
    repo = fake_hub.add_repo(gated_repo("org/Gated-GGUF"))
    url = resolve_url(fake_hub.url, repo.repo_id, "Gated-Q4_K_M.gguf")
    with pytest.raises(ModelFileError, match="HTTP 401"):
        read_remote_gguf(url)
    header = read_remote_gguf(url, headers={"Authorization": f"Bearer {GOOD_TOKEN}"})
    assert header.metadata["general.name"] == "fake-Q4_K_M"
    assert fake_hub.requests("GET", "/resolve/")[-1].authorization == f"Bearer {GOOD_TOKEN}"


def test_unreachable_server_is_a_model_file_error():
    with pytest.raises(ModelFileError, match="cannot read"):
        read_remote_gguf("http://127.0.0.1:9/nothing.gguf", timeout=2)


def test_range_source_caches_chunks_and_stops_at_eof(fake_hub):
    body = bytes(range(256)) * 40  # 10,240 bytes
    _serve(fake_hub, {"blob.bin": body})
    src = HttpRangeSource(resolve_url(fake_hub.url, REPO, "blob.bin"), chunk_size=4096)
    assert src.read_at(10, 20) == body[10:30]
    assert src.read_at(100, 3000) == body[100:3100]
    assert src.requests == 1
    assert src.read_at(4000, 5000) == body[4000:9000]  # spans chunks 0-2: one request for 1-2
    assert src.requests == 2 and src.size() == len(body)
    assert src.read_at(10_000, 1000) == body[10_000:]
    assert src.read_at(len(body), 10) == b"" and src.read_at(len(body) + 5000, 10) == b""
    assert src.requests == 2 and src.bytes_fetched == len(body)
    assert [r.range for r in _gets(fake_hub, "blob.bin")] == ["bytes=0-4095", "bytes=4096-10239"]


def test_range_source_size_past_end_and_empty_file(fake_hub):
    _serve(fake_hub, {"blob.bin": b"x" * 100, "empty.bin": b""})
    far = HttpRangeSource(resolve_url(fake_hub.url, REPO, "blob.bin"), chunk_size=4096)
    assert far.read_at(8192, 10) == b""  # 416: the total comes from Content-Range
    assert far.size() == 100
    empty = HttpRangeSource(resolve_url(fake_hub.url, REPO, "empty.bin"), chunk_size=4096)
    assert empty.size() == 0 and empty.read_at(0, 10) == b""
    with pytest.raises(ModelFileError, match="truncated"):
        read_gguf_header(HttpRangeSource(resolve_url(fake_hub.url, REPO, "empty.bin")))


def test_shared_client_is_not_closed(fake_hub, hf_env):
    _serve(fake_hub, {"m.gguf": default_gguf("Q4_0")})
    with httpx.Client() as client:
        read_remote_gguf(resolve_url(fake_hub.url, REPO, "m.gguf"), client=client)
        assert not client.is_closed
        hub = HubClient(fake_hub.url, None, timeout=5)
        assert len(hub.gguf_headers(REPO, ["m.gguf"], http=client)) == 1
        assert not client.is_closed
        fake_hub.add_repo(FakeRepo("org/cfg", files={"config.json": b'{"model_type": "llama"}'}))
        assert hub.json_file("org/cfg", "config.json") == {"model_type": "llama"}


def test_small_json_files_refuse_big_bodies_and_bad_json(fake_hub, hf_env):
    _serve(fake_hub, {"big.json": b"[" + b"1," * 5000 + b"1]", "bad.json": b"{nope"})
    hub = HubClient(fake_hub.url, None, timeout=5)
    with pytest.raises(HubRefused, match="larger than"):
        hub.json_file(REPO, "big.json", max_bytes=1000)
    with pytest.raises(HubRefused, match="not valid JSON"):
        hub.json_file(REPO, "bad.json")


def _mock_client(handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_unknown_total_falls_back_to_head_linked_size():
    body = bytes(range(256)) * 32  # 8 KiB
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.headers.get("range")))
        if request.method == "HEAD":
            return httpx.Response(200, headers={"X-Linked-Size": str(len(body)), "Content-Length": "0"})
        start, last = (int(x) for x in request.headers["range"][6:].split("-"))
        part = body[start : last + 1]
        return httpx.Response(206, content=part, headers={"Content-Range": f"bytes {start}-{last}/*"})

    with _mock_client(handler) as client:
        src = HttpRangeSource("http://mock/x.bin", client=client, chunk_size=4096)
        assert src.size() == len(body)
        assert seen == [("GET", "bytes=0-4095"), ("HEAD", None)]
        assert src.read_at(4000, 200) == body[4000:4200]


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (lambda: httpx.Response(206, content=b"x" * 10, headers={"Content-Range": "bytes 0-9/100"}), "fewer than"),
        (
            lambda: httpx.Response(206, content=b"x" * 10, headers={"Content-Range": "bytes 50-59/100"}),
            "from 50 when asked for 0",
        ),
        (lambda: httpx.Response(302, headers={"Location": "http://mock/loop"}), "HTTP 302|redirect"),
        (lambda: httpx.Response(403), "access denied.*HTTP 403"),
    ],
)
def test_misbehaving_servers(response, message):
    with _mock_client(lambda request: response()) as client:
        src = HttpRangeSource("http://mock/x.bin", client=client, chunk_size=64)
        with pytest.raises(ModelFileError, match=message):
            src.read_at(0, 64)


def test_oversized_206_body_is_cut_to_the_range():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(206, content=b"y" * 10_000, headers={"Content-Range": "bytes 0-63/10000"})

    with _mock_client(handler) as client:
        src = HttpRangeSource("http://mock/x.bin", client=client, chunk_size=64)
        assert src.read_at(0, 64) == b"y" * 64 and src.size() == 10_000
