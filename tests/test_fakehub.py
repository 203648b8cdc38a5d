"""The fake Hub, exercised through the real huggingface_hub client and plain httpx."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time

import httpx
import pytest

from tests.fakehub import (
    GOOD_TOKEN,
    HOSTILE_NAMES,
    FakeHub,
    FakeRepo,
    Fault,
    exl2_repo,
    gated_repo,
    gguf_repo,
    git_blob_sha1,
    hostile_repo,
    mlx_repo,
    pickle_repo,
)
from tests.fakehub.fixtures import fake_hub, hf_api, hf_env  # noqa: F401 - fixtures, until listed in pytest_plugins

BODY = bytes(range(256)) * 64  # 16 KiB, every offset distinguishable mod 256


@pytest.fixture
def http(fake_hub):  # noqa: F811
    with httpx.Client(base_url=fake_hub.url, trust_env=False, timeout=10) as client:
        yield client


@pytest.fixture
def blob_repo(fake_hub):  # noqa: F811
    return fake_hub.add_repo(FakeRepo("org/blob", files={"w.gguf": BODY, "notes.txt": b"hello\n"}))


def _stream(client: httpx.Client, url: str, **kw) -> tuple[httpx.Response, bytes, Exception | None]:
    """GET that keeps what arrived before the connection broke."""
    got = bytearray()
    with client.stream("GET", url, **kw) as resp:
        try:
            for chunk in resp.iter_raw():
                got += chunk
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            return resp, bytes(got), exc
    return resp, bytes(got), None


# ---- search and metadata through HfApi ----


def _catalog(hub):
    jan, mar = "2024-01-01T00:00:00.000Z", "2024-03-01T00:00:00.000Z"
    hub.add_repo(gguf_repo("alice/Tiny-GGUF", downloads=50, likes=1, trending_score=7, created_at=jan))
    hub.add_repo(gguf_repo("bob/TinyChat-GGUF", downloads=900, likes=3, trending_score=1, created_at=mar))
    hub.add_repo(gguf_repo("bob/Huge-GGUF", downloads=10_000, likes=2, tags=["gguf", "qwen2"]))
    hub.add_repo(mlx_repo("mlx-community/Tiny-4bit", downloads=5000))
    hub.add_repo(pickle_repo("carol/tiny-pickle", downloads=100))


def test_list_models_search_filter_sort(fake_hub, hf_api):  # noqa: F811
    _catalog(fake_hub)
    ids = [m.id for m in hf_api.list_models(search="tiny", filter=["gguf"], sort="downloads", limit=10)]
    assert ids == ["bob/TinyChat-GGUF", "alice/Tiny-GGUF"]
    assert [m.id for m in hf_api.list_models(filter=["gguf", "qwen2"])] == ["bob/Huge-GGUF"]
    assert [m.id for m in hf_api.list_models(filter="mlx")] == ["mlx-community/Tiny-4bit"]
    assert [m.id for m in hf_api.list_models(author="bob", sort="likes")] == ["bob/TinyChat-GGUF", "bob/Huge-GGUF"]
    assert [m.id for m in hf_api.list_models(search="tiny-gguf", sort="trending_score")] == ["alice/Tiny-GGUF"]
    created = [m.id for m in hf_api.list_models(filter="gguf", search="tiny", sort="created_at")]
    assert created == ["bob/TinyChat-GGUF", "alice/Tiny-GGUF"]
    first = next(iter(hf_api.list_models(sort="downloads", limit=1)))
    assert (first.id, first.downloads, first.library_name) == ("bob/Huge-GGUF", 10_000, None)
    assert "gguf" in first.tags
    q = fake_hub.requests("GET", "/api/models")[0].query
    assert q == {"search": ["tiny"], "filter": ["gguf"], "sort": ["downloads"], "limit": ["10"]}


def test_list_models_expand_returns_only_asked_fields(fake_hub, hf_api):  # noqa: F811
    _catalog(fake_hub)
    models = list(hf_api.list_models(author="alice", expand=["downloads", "gguf", "siblings"]))
    assert len(models) == 1
    m = models[0]
    assert m.downloads == 50 and m.gguf["architecture"] == "llama"
    assert "Tiny-Q4_K_M.gguf" in [s.rfilename for s in m.siblings]
    assert m.likes is None  # not asked for


def test_list_models_follows_link_pages(fake_hub, hf_api):  # noqa: F811
    fake_hub.models_page_size = 3
    for i in range(10):
        fake_hub.add_repo(FakeRepo(f"org/m{i}", tags=["gguf"], downloads=i))
    ids = [m.id for m in hf_api.list_models(filter="gguf", sort="downloads", limit=8)]
    assert ids == [f"org/m{i}" for i in range(9, 1, -1)]
    pages = fake_hub.requests("GET", "/api/models")
    assert len(pages) == 3
    assert "cursor" not in pages[0].query and all("cursor" in p.query for p in pages[1:])
    assert all(p.query["filter"] == ["gguf"] for p in pages)
    assert len(list(hf_api.list_models(filter="gguf"))) == 10


def test_model_info_files_metadata(fake_hub, hf_api):  # noqa: F811
    repo = fake_hub.add_repo(gguf_repo("org/Tiny-GGUF", gated=False))
    info = hf_api.model_info("org/Tiny-GGUF", files_metadata=True)
    files = repo.files | {"README.md": repo.card.encode()}
    assert sorted(s.rfilename for s in info.siblings) == sorted(files)
    for sib in info.siblings:
        data = files[sib.rfilename]
        assert sib.size == len(data)
        if sib.rfilename.endswith(".gguf"):
            assert sib.lfs.sha256 == hashlib.sha256(data).hexdigest() and sib.lfs.size == len(data)
        else:
            assert sib.lfs is None and sib.blob_id == git_blob_sha1(data)
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` value
    refs = hf_api.list_repo_refs("org/Tiny-GGUF")
    assert info.sha == refs.branches[0].target_commit and len(info.sha) == 40
    assert info.gguf["context_length"] == 4096 and info.card_data.license == "apache-2.0"
    plain = hf_api.model_info("org/Tiny-GGUF")
    assert all(s.size is None for s in plain.siblings)


def test_list_repo_tree_recursive_and_paged(fake_hub, hf_api):  # noqa: F811
    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF"))
    fake_hub.tree_page_size = 2
    entries = list(hf_api.list_repo_tree("org/Tiny-GGUF", recursive=True))
    assert [(type(e).__name__, e.path) for e in entries] == [
        ("RepoFolder", "Q8_0"),
        ("RepoFile", "Q8_0/Tiny-Q8_0-00001-of-00003.gguf"),
        ("RepoFile", "Q8_0/Tiny-Q8_0-00002-of-00003.gguf"),
        ("RepoFile", "Q8_0/Tiny-Q8_0-00003-of-00003.gguf"),
        ("RepoFile", "README.md"),
        ("RepoFile", "Tiny-Q4_K_M.gguf"),
    ]
    assert len(fake_hub.requests("GET", "/tree/")) == 3
    top = [e.path for e in hf_api.list_repo_tree("org/Tiny-GGUF")]
    assert top == ["Q8_0", "README.md", "Tiny-Q4_K_M.gguf"]
    inner = [e.path for e in hf_api.list_repo_tree("org/Tiny-GGUF", path_in_repo="Q8_0")]
    assert len(inner) == 3 and all(p.startswith("Q8_0/") for p in inner)
    shard = entries[1]
    assert shard.lfs.sha256 == hashlib.sha256(fake_hub.repos["org/Tiny-GGUF"].files[shard.path]).hexdigest()


def test_exl2_branches_in_refs_and_per_revision_files(fake_hub, hf_api):  # noqa: F811
    fake_hub.add_repo(exl2_repo("org/Tiny-exl2"))
    refs = hf_api.list_repo_refs("org/Tiny-exl2")
    assert {b.name for b in refs.branches} == {"main", "4.0bpw", "6.5bpw"}
    assert len({b.target_commit for b in refs.branches}) == 3
    again = exl2_repo("org/Tiny-exl2").refs_json()  # same content, same commits
    assert {b["targetCommit"] for b in again["branches"]} == {b.target_commit for b in refs.branches}
    on_branch = hf_api.model_info("org/Tiny-exl2", revision="6.5bpw")
    assert sorted(s.rfilename for s in on_branch.siblings) == ["config.json", "output.safetensors"]
    main = hf_api.model_info("org/Tiny-exl2")
    assert sorted(s.rfilename for s in main.siblings) == ["README.md", "measurement.json"]
    tree = [e.path for e in hf_api.list_repo_tree("org/Tiny-exl2", revision="4.0bpw")]
    assert tree == ["config.json", "output.safetensors"]


def test_paths_info(fake_hub, hf_api):  # noqa: F811
    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF"))
    infos = hf_api.get_paths_info("org/Tiny-GGUF", ["Q8_0", "README.md", "missing.bin"])
    assert [(type(i).__name__, i.path) for i in infos] == [("RepoFolder", "Q8_0"), ("RepoFile", "README.md")]


# ---- downloads and errors through the client ----


def test_hf_hub_download_gets_exact_bytes(fake_hub, hf_api, hf_env):  # noqa: F811
    repo = fake_hub.add_repo(gguf_repo("org/Tiny-GGUF"))
    path = hf_api.hf_hub_download("org/Tiny-GGUF", "Q8_0/Tiny-Q8_0-00002-of-00003.gguf")
    with open(path, "rb") as fh:
        assert fh.read() == repo.files["Q8_0/Tiny-Q8_0-00002-of-00003.gguf"]
    assert str(path).startswith(str(hf_env))
    assert [r.method for r in fake_hub.requests(path_contains="/resolve/")] == ["HEAD", "GET"]
    exl2 = fake_hub.add_repo(exl2_repo("org/Tiny-exl2"))
    cfg = hf_api.hf_hub_download("org/Tiny-exl2", "config.json", revision="4.0bpw")
    with open(cfg, "rb") as fh:
        assert fh.read() == exl2.branches["4.0bpw"]["config.json"]


def test_gated_repo_info_works_download_refused(fake_hub, hf_api):  # noqa: F811
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError

    fake_hub.add_repo(gated_repo("org/Gated-GGUF"))
    assert hf_api.model_info("org/Gated-GGUF").gated == "auto"
    with pytest.raises(GatedRepoError):
        hf_api.hf_hub_download("org/Gated-GGUF", "Gated-Q4_K_M.gguf")
    with pytest.raises(GatedRepoError) as bad:
        hf_api.hf_hub_download("org/Gated-GGUF", "Gated-Q4_K_M.gguf", token="hf_not_granted")
    assert bad.value.response.status_code == 403
    granted = HfApi(endpoint=fake_hub.url, token=GOOD_TOKEN)
    with open(granted.hf_hub_download("org/Gated-GGUF", "Gated-Q4_K_M.gguf"), "rb") as fh:
        assert fh.read(4) == b"GGUF"
    assert fake_hub.requests("GET", "/resolve/")[-1].authorization == f"Bearer {GOOD_TOKEN}"


def test_missing_and_private_repos_missing_file_and_revision(fake_hub, hf_api):  # noqa: F811
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF"))
    fake_hub.add_repo(gguf_repo("org/Secret-GGUF", private=True))
    with pytest.raises(RepositoryNotFoundError):
        hf_api.model_info("org/nope")
    with pytest.raises(RepositoryNotFoundError):
        hf_api.hf_hub_download("org/nope", "x.gguf")
    with pytest.raises(RepositoryNotFoundError):
        hf_api.model_info("org/Secret-GGUF")
    with pytest.raises(RepositoryNotFoundError):
        hf_api.hf_hub_download("org/Secret-GGUF", "Secret-Q4_K_M.gguf")
    assert "org/Secret-GGUF" not in [m.id for m in hf_api.list_models()]
    owner = HfApi(endpoint=fake_hub.url, token=GOOD_TOKEN)
    assert owner.model_info("org/Secret-GGUF").private is True
    assert "org/Secret-GGUF" in [m.id for m in owner.list_models()]
    with pytest.raises(RemoteEntryNotFoundError):
        hf_api.hf_hub_download("org/Tiny-GGUF", "missing.gguf")
    miss = fake_hub.requests("HEAD", "missing.gguf")[-1]
    assert miss.status == 404
    with pytest.raises(RevisionNotFoundError):
        hf_api.model_info("org/Tiny-GGUF", revision="9.9bpw")
    with pytest.raises(RevisionNotFoundError):
        hf_api.hf_hub_download("org/Tiny-GGUF", "README.md", revision="9.9bpw")


def test_whoami_and_agent_harnesses(fake_hub, hf_api, http):  # noqa: F811
    from huggingface_hub.errors import HfHubHTTPError

    assert hf_api.whoami(token=GOOD_TOKEN)["name"] == "fake-user"
    with pytest.raises(HfHubHTTPError) as exc:
        hf_api.whoami(token="hf_wrong")
    assert exc.value.response.status_code == 401
    assert http.get("/api/whoami-v2").status_code == 401
    resp = http.get("/api/agent-harnesses")
    assert resp.status_code == 404 and "error" in resp.json()


def test_client_cannot_leave_the_fake(fake_hub, hf_api):  # noqa: F811
    from huggingface_hub import HfApi

    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF"))
    calls = [
        lambda: list(hf_api.list_models(limit=5)),
        lambda: hf_api.model_info("org/Tiny-GGUF", files_metadata=True),
        lambda: list(hf_api.list_repo_tree("org/Tiny-GGUF", recursive=True)),
        lambda: hf_api.list_repo_refs("org/Tiny-GGUF"),
        lambda: hf_api.hf_hub_download("org/Tiny-GGUF", "README.md"),
    ]
    for n, call in enumerate(calls):
        before = len(fake_hub.log)
        call()
        assert len(fake_hub.log) > before, f"call {n} never reached the fake"
    # Every request the client made is one the fake answered: the log is the whole story.
    assert len(fake_hub.log) == 6 and all(r.status == 200 for r in fake_hub.log)
    with pytest.raises(RuntimeError, match="leave the fake Hub"):
        HfApi(endpoint="https://huggingface.co").model_info("org/Tiny-GGUF")


# ---- resolve endpoint over plain httpx ----


def test_head_headers_lfs_and_plain(fake_hub, blob_repo, http):  # noqa: F811
    commit = blob_repo.snapshot("main").commit
    lfs = http.head("/org/blob/resolve/main/w.gguf")
    sha = hashlib.sha256(BODY).hexdigest()
    assert lfs.status_code == 200 and lfs.headers["X-Repo-Commit"] == commit
    assert lfs.headers["ETag"] == f'"{sha}"' and lfs.headers["X-Linked-Etag"] == f'"{sha}"'
    assert lfs.headers["X-Linked-Size"] == lfs.headers["Content-Length"] == str(len(BODY))
    assert lfs.headers["Accept-Ranges"] == "bytes"
    plain = http.head("/org/blob/resolve/main/notes.txt")
    assert plain.headers["ETag"] == f'"{git_blob_sha1(b"hello" + bytes([10]))}"'
    assert "X-Linked-Etag" not in plain.headers
    by_commit = http.get(f"/org/blob/resolve/{commit}/notes.txt")
    assert by_commit.content == b"hello\n"


def test_range_requests(fake_hub, blob_repo, http):  # noqa: F811
    url = "/org/blob/resolve/main/w.gguf"
    etag = hashlib.sha256(BODY).hexdigest()
    r = http.get(url, headers={"Range": "bytes=1000-"})
    assert r.status_code == 206 and r.content == BODY[1000:]
    assert r.headers["Content-Range"] == f"bytes 1000-{len(BODY) - 1}/{len(BODY)}"
    r = http.get(url, headers={"Range": "bytes=10-19"})
    assert r.status_code == 206 and r.content == BODY[10:20]
    r = http.get(url, headers={"Range": "bytes=-5"})
    assert r.status_code == 206 and r.content == BODY[-5:]
    r = http.get(url, headers={"Range": f"bytes={len(BODY)}-"})
    assert r.status_code == 416 and r.headers["Content-Range"] == f"bytes */{len(BODY)}"
    r = http.get(url, headers={"Range": "bytes=100-", "If-Range": f'"{etag}"'})
    assert r.status_code == 206 and r.content == BODY[100:]
    r = http.get(url, headers={"Range": "bytes=100-", "If-Range": '"0000"'})
    assert r.status_code == 200 and r.content == BODY
    assert fake_hub.wait_idle()
    rec = fake_hub.requests("GET", "w.gguf")
    assert [x.range for x in rec] == [
        "bytes=1000-",
        "bytes=10-19",
        "bytes=-5",
        f"bytes={len(BODY)}-",
        "bytes=100-",
        "bytes=100-",
    ]
    assert rec[-1].if_range == '"0000"' and [x.status for x in rec] == [206, 206, 206, 416, 206, 200]
    assert rec[0].bytes_sent == len(BODY) - 1000


def test_fault_drop_and_reset(fake_hub, blob_repo, http):  # noqa: F811
    url = "/org/blob/resolve/main/w.gguf"
    fake_hub.faults.add("w.gguf", Fault.drop(after=5000), Fault.reset(after=3000))
    resp, got, exc = _stream(http, url)
    assert resp.status_code == 200 and got == BODY[:5000] and isinstance(exc, httpx.RemoteProtocolError)
    resp, got, exc = _stream(http, url)
    assert isinstance(exc, httpx.ReadError) and "reset" in str(exc).lower()
    assert len(got) <= 3000 and BODY.startswith(got)
    assert [r.fault for r in fake_hub.requests("GET", "w.gguf")] == ["drop", "reset"]
    assert fake_hub.requests("GET", "w.gguf")[0].bytes_sent == 5000
    assert http.get(url).content == BODY  # queue consumed: back to normal
    assert fake_hub.faults.pending() == 0


def test_fault_flip_ignore_range_status(fake_hub, blob_repo, http):  # noqa: F811
    url = "/org/blob/resolve/main/w.gguf"
    fake_hub.faults.add("w.gguf", Fault.flip(offset=777), Fault.ignore_range(), Fault.status_code(503, retry_after=7))
    r = http.get(url)
    assert len(r.content) == len(BODY) and r.headers["ETag"] == f'"{hashlib.sha256(BODY).hexdigest()}"'
    diff = [i for i, (a, b) in enumerate(zip(r.content, BODY)) if a != b]
    assert diff == [777] and r.content[777] == BODY[777] ^ 0xFF
    r = http.get(url, headers={"Range": "bytes=500-"})
    assert r.status_code == 200 and r.content == BODY
    r = http.get(url)
    assert r.status_code == 503 and r.headers["Retry-After"] == "7"
    assert http.get(url, headers={"Range": "bytes=500-"}).status_code == 206


def test_fault_flip_outside_range_leaves_body(fake_hub, blob_repo, http):  # noqa: F811
    fake_hub.faults.add("w.gguf", Fault.flip(offset=10))
    r = http.get("/org/blob/resolve/main/w.gguf", headers={"Range": "bytes=100-"})
    assert r.content == BODY[100:]


def test_fault_stall_is_releasable(fake_hub, blob_repo, http):  # noqa: F811
    stall = fake_hub.faults.add("w.gguf", Fault.stall(after=4096))
    got = bytearray()
    first = threading.Event()

    def reader():
        with http.stream("GET", "/org/blob/resolve/main/w.gguf") as resp:
            for chunk in resp.iter_raw():
                got.extend(chunk)
                if len(got) >= 4096:
                    first.set()

    t = threading.Thread(target=reader)
    t.start()
    assert first.wait(5)
    time.sleep(0.3)
    assert len(got) == 4096 and t.is_alive()  # stuck at the stall point
    stall.release()
    t.join(5)
    assert not t.is_alive() and bytes(got) == BODY


def test_fault_stall_timed(fake_hub, blob_repo, http):  # noqa: F811
    fake_hub.faults.add("notes.txt", Fault.stall(after=2, seconds=0.3))
    t0 = time.monotonic()
    assert http.get("/org/blob/resolve/main/notes.txt").content == b"hello\n"
    assert time.monotonic() - t0 >= 0.3


def test_fault_throttle_is_slow(fake_hub, blob_repo, http):  # noqa: F811
    fake_hub.faults.add("w.gguf", Fault.throttle(bytes_per_s=40_000))  # 16 KiB at 40 kB/s ~ 0.4 s
    t0 = time.monotonic()
    assert http.get("/org/blob/resolve/main/w.gguf").content == BODY
    slow = time.monotonic() - t0
    t0 = time.monotonic()
    http.get("/org/blob/resolve/main/w.gguf")
    assert slow >= 0.35 and slow > 5 * (time.monotonic() - t0)


def test_fault_change_etag_serves_new_version(fake_hub, blob_repo, http):  # noqa: F811
    url = "/org/blob/resolve/main/w.gguf"
    old = http.head(url).headers
    fake_hub.faults.add("w.gguf", Fault.change_etag())
    r = http.get(
        f"/org/blob/resolve/{old['X-Repo-Commit']}/w.gguf", headers={"Range": "bytes=100-", "If-Range": old["ETag"]}
    )
    new_body = BODY[:-1] + bytes([BODY[-1] ^ 0xFF])
    assert r.status_code == 200 and r.content == new_body
    assert r.headers["ETag"] == f'"{hashlib.sha256(new_body).hexdigest()}"' != old["ETag"]
    assert r.headers["X-Repo-Commit"] != old["X-Repo-Commit"]
    assert http.head(url).headers["ETag"] == r.headers["ETag"]


def test_fault_status_on_head_and_per_repo(fake_hub, blob_repo, http):  # noqa: F811
    fake_hub.add_repo(FakeRepo("org/other", files={"w.gguf": b"GGUF-other"}))
    fake_hub.faults.add("w.gguf", Fault.status_code(429, retry_after=1.5), repo_id="org/other", method="HEAD")
    assert http.head("/org/blob/resolve/main/w.gguf").status_code == 200
    r = http.head("/org/other/resolve/main/w.gguf")
    assert r.status_code == 429 and r.headers["Retry-After"] == "1.5"


def test_global_latency(fake_hub, blob_repo, http):  # noqa: F811
    fake_hub.latency = 0.2
    t0 = time.monotonic()
    http.head("/org/blob/resolve/main/notes.txt")
    assert time.monotonic() - t0 >= 0.2


def test_large_file_streams_from_disk_fast(fake_hub, tmp_path):  # noqa: F811
    big = tmp_path / "big.gguf"
    size = 64 * 1024 * 1024
    with open(big, "wb") as fh:
        fh.truncate(size)  # sparse: fast to make, read from page cache
    fake_hub.add_repo(FakeRepo("org/big", files={"big.gguf": big}))
    assert fake_hub.repos["org/big"].snapshot("main").files["big.gguf"].etag  # hash once, outside the timing
    with socket.create_connection(("127.0.0.1", fake_hub.port)) as sock:
        sock.sendall(b"GET /org/big/resolve/main/big.gguf HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        buf = bytearray(4 * 1024 * 1024)
        total, t0 = 0, time.monotonic()
        while n := sock.recv_into(buf):
            total += n
        elapsed = time.monotonic() - t0
    assert total > size  # body plus headers
    assert size / elapsed > 500e6, f"{size / elapsed / 1e6:.0f} MB/s"


def test_faults_on_disk_backed_file(fake_hub, http, tmp_path):  # noqa: F811
    src = tmp_path / "w.gguf"
    src.write_bytes(BODY)
    fake_hub.add_repo(FakeRepo("org/disk", files={"w.gguf": src}))
    url = "/org/disk/resolve/main/w.gguf"
    fake_hub.faults.add("w.gguf", Fault.drop(after=1234), Fault.flip(offset=5), Fault.change_etag())
    assert _stream(http, url)[1] == BODY[:1234]
    flipped = http.get(url, headers={"Range": "bytes=2-9"}).content
    assert flipped == BODY[2:5] + bytes([BODY[5] ^ 0xFF]) + BODY[6:10]
    swapped = http.get(url).content
    assert swapped == BODY[:-1] + bytes([BODY[-1] ^ 0xFF]) and src.read_bytes() == BODY  # original untouched


def test_close_releases_a_stalled_request():
    hub = FakeHub()
    hub.add_repo(FakeRepo("org/blob", files={"w.gguf": BODY}))
    stall = hub.faults.add("w.gguf", Fault.stall(after=10))  # no timeout: would hang forever
    outcome = []

    def reader():
        try:
            with httpx.Client(trust_env=False, timeout=10) as client:
                outcome.append(client.get(hub.resolve_url("org/blob", "w.gguf")).status_code)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    assert stall.triggered.wait(5)
    t0 = time.monotonic()
    hub.close()
    t.join(5)
    assert not t.is_alive() and outcome and time.monotonic() - t0 < 5


# ---- builders ----


def test_builders_shapes():
    mlx = mlx_repo()
    cfg = json.loads(mlx.files["config.json"])
    assert cfg["quantization"] == {"bits": 4, "group_size": 64}
    st = mlx.files["model.safetensors"]
    (hlen,) = struct.unpack("<Q", st[:8])
    header = json.loads(st[8 : 8 + hlen])
    data_len = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert hlen % 8 == 0 and len(st) == 8 + hlen + data_len
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(mlx.files)
    assert set(pickle_repo().files) == {"pytorch_model.bin", "config.json"}
    g = gguf_repo("o/X-GGUF", quants=["Q4_K_M"], split=None, make_gguf=lambda q: b"GGUF" + q.encode())
    assert g.files == {"X-Q4_K_M.gguf": b"GGUFQ4_K_M"}


def test_default_gguf_parses_with_gguf_library(tmp_path):
    gguf = pytest.importorskip("gguf")
    repo = gguf_repo("o/X-GGUF")
    path = tmp_path / "shard.gguf"
    path.write_bytes(repo.files["Q8_0/X-Q8_0-00002-of-00003.gguf"])
    reader = gguf.GGUFReader(path)
    assert reader.fields["split.no"].parts[-1][0] == 1 and reader.fields["split.count"].parts[-1][0] == 3
    assert bytes(reader.fields["general.architecture"].parts[-1]) == b"llama"


def test_hostile_names_listed_verbatim(fake_hub, hf_api):  # noqa: F811
    fake_hub.add_repo(hostile_repo("org/Hostile-GGUF"))
    listed = {e.path for e in hf_api.list_repo_tree("org/Hostile-GGUF", recursive=True)}
    assert listed == set(HOSTILE_NAMES) | {"README.md"}
    siblings = {s.rfilename for s in hf_api.model_info("org/Hostile-GGUF").siblings}
    assert siblings == listed
    with httpx.Client(trust_env=False) as client:
        r = client.get(f"{fake_hub.url}/org/Hostile-GGUF/resolve/main/C%3A%5Cx.gguf")
    assert r.status_code == 200 and r.content.startswith(b"GGUF")
