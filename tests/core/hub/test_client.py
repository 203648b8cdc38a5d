"""HubClient against the fake Hub over loopback: search, details, variants, refusals and typed errors."""

from __future__ import annotations

import json
import socket
import time

import pytest

from app.core.hub.client import HubClient
from app.core.hub.errors import (
    HubError,
    HubGated,
    HubNotFound,
    HubOffline,
    HubRateLimited,
    HubRefused,
    HubUnauthorized,
    HubUnsafeName,
)
from app.core.hub.names import validate_remote_name
from app.core.hub.variants import repo_variants
from app.core.settings import Settings
from tests.fakehub import (
    GOOD_TOKEN,
    HOSTILE_NAMES,
    FakeRepo,
    Fault,
    default_gguf,
    exl2_repo,
    gated_repo,
    gguf_repo,
    hostile_repo,
    mlx_repo,
    pickle_repo,
)


@pytest.fixture
def client(hf_env, fake_hub) -> HubClient:
    return HubClient(fake_hub.url, None, timeout=5)


def _popular(fake_hub) -> None:
    fake_hub.add_repo(
        gguf_repo(
            "alice/Llama-GGUF", downloads=500, likes=3, trending_score=9, last_modified="2024-01-01T00:00:00.000Z"
        )
    )
    fake_hub.add_repo(
        gguf_repo("bob/Qwen-GGUF", downloads=900, likes=1, trending_score=2, last_modified="2024-06-01T00:00:00.000Z")
    )
    fake_hub.add_repo(
        gguf_repo(
            "carol/Llama-small-GGUF",
            downloads=100,
            likes=50,
            trending_score=5,
            last_modified="2024-03-01T00:00:00.000Z",
        )
    )
    fake_hub.add_repo(mlx_repo("mlx-community/Llama-4bit", downloads=700, likes=7))
    fake_hub.add_repo(exl2_repo("dave/Llama-exl2", downloads=300, likes=4))


def test_search_filters_by_text_and_format(client, fake_hub):
    _popular(fake_hub)
    page = client.search("llama", formats=("gguf",))
    assert [r.id for r in page.results] == ["alice/Llama-GGUF", "carol/Llama-small-GGUF"]
    assert page.next is None
    first = page.results[0]
    assert (first.author, first.downloads, first.likes, first.trending_score) == ("alice", 500, 3, 9)
    assert first.last_modified is not None and first.last_modified.year == 2024
    assert "gguf" in first.tags
    assert [r.id for r in client.search("llama", formats=("mlx",)).results] == ["mlx-community/Llama-4bit"]
    assert [r.id for r in client.search("", formats=("exl2",)).results] == ["dave/Llama-exl2"]
    req = fake_hub.requests("GET", "/api/models")[0]
    assert req.query["filter"] == ["gguf"] and req.query["search"] == ["llama"]


@pytest.mark.parametrize(
    "sort, expected",
    [
        ("downloads", ["bob/Qwen-GGUF", "alice/Llama-GGUF", "carol/Llama-small-GGUF"]),
        ("likes", ["carol/Llama-small-GGUF", "alice/Llama-GGUF", "bob/Qwen-GGUF"]),
        ("trending", ["alice/Llama-GGUF", "carol/Llama-small-GGUF", "bob/Qwen-GGUF"]),
        ("updated", ["bob/Qwen-GGUF", "carol/Llama-small-GGUF", "alice/Llama-GGUF"]),
    ],
)
def test_search_sort(client, fake_hub, sort, expected):
    _popular(fake_hub)
    assert [r.id for r in client.search(sort=sort).results] == expected


def test_search_pages_follow_the_link(client, fake_hub):
    _popular(fake_hub)
    fake_hub.models_page_size = 2
    page1 = client.search(sort="downloads", limit=2)
    assert [r.id for r in page1.results] == ["bob/Qwen-GGUF", "alice/Llama-GGUF"]
    assert page1.next and page1.next.startswith(fake_hub.url)
    page2 = client.search(sort="downloads", limit=2, page_token=page1.next)
    assert [r.id for r in page2.results] == ["carol/Llama-small-GGUF"]
    assert page2.next is None
    assert "cursor" in fake_hub.requests("GET", "/api/models")[-1].query


def test_search_several_formats_merges_and_pages(client, fake_hub):
    _popular(fake_hub)
    fake_hub.models_page_size = 1
    seen, token = [], None
    for _ in range(10):
        page = client.search("llama", formats=("gguf", "mlx"), page_token=token, limit=1)
        seen += [r.id for r in page.results]
        token = page.next
        if token is None:
            break
    assert sorted(seen) == ["alice/Llama-GGUF", "carol/Llama-small-GGUF", "mlx-community/Llama-4bit"]


def test_search_rejects_unknown_sort_and_format(client):
    with pytest.raises(ValueError):
        client.search(sort="stars")
    with pytest.raises(ValueError):
        client.search(formats=("onnx",))


def test_endpoint_is_explicit_not_read_from_environment(hf_env, fake_hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    fake_hub.add_repo(gguf_repo())
    details = HubClient(fake_hub.url, None).model("fake-org/Tiny-GGUF")
    assert details.id == "fake-org/Tiny-GGUF"


def test_from_settings_prefers_settings_then_environment():
    env = {"HF_ENDPOINT": "http://mirror.example/", "HF_TOKEN": "hf_env"}
    c = HubClient.from_settings(Settings(), env=env)
    assert (c.endpoint, c.token) == ("http://mirror.example", "hf_env")
    c = HubClient.from_settings(Settings(hf_endpoint="http://other.example", hf_token="hf_set"), env=env)
    assert (c.endpoint, c.token) == ("http://other.example", "hf_set")
    c = HubClient.from_settings(Settings(), env={})
    assert (c.endpoint, c.token) == ("https://huggingface.co", None)


def test_model_details_sizes_and_lfs_sha256(client, fake_hub):
    repo = fake_hub.add_repo(gguf_repo())
    snap = repo.snapshot("main")
    details = client.model("fake-org/Tiny-GGUF")
    assert details.sha == snap.commit
    by_path = {f.path: f for f in details.files}
    assert set(by_path) == set(snap.files)
    for path, f in snap.files.items():
        assert by_path[path].size == f.size
        assert by_path[path].sha256 == (f.sha256 if f.is_lfs else None)
    assert by_path["Tiny-Q4_K_M.gguf"].sha256 == snap.files["Tiny-Q4_K_M.gguf"].sha256
    assert details.card_data.get("license") == "apache-2.0"
    assert "gguf" in details.tags and details.gated is False


def test_tree_and_branches(client, fake_hub):
    repo = fake_hub.add_repo(exl2_repo())
    fake_hub.tree_page_size = 1
    files = client.tree("fake-org/Tiny-exl2", "4.0bpw")
    assert sorted(f.path for f in files) == ["config.json", "output.safetensors"]
    weights = next(f for f in files if f.path == "output.safetensors")
    assert weights.sha256 == repo.snapshot("4.0bpw").files["output.safetensors"].sha256
    assert {r.name for r in client.branches("fake-org/Tiny-exl2")} == {"main", "4.0bpw", "6.5bpw"}


def test_model_card(client, fake_hub):
    fake_hub.add_repo(gguf_repo())
    assert client.model_card("fake-org/Tiny-GGUF").startswith("---\nlicense: apache-2.0")
    fake_hub.add_repo(FakeRepo("fake-org/No-Card", files={"a-Q4_0.gguf": default_gguf("Q4_0")}))
    assert client.model_card("fake-org/No-Card") == ""


def test_model_card_is_capped(client, fake_hub):
    from app.core.hub.client import MAX_CARD_BYTES

    fake_hub.add_repo(FakeRepo("fake-org/Big-Card", card="x" * (MAX_CARD_BYTES * 3)))
    assert len(client.model_card("fake-org/Big-Card")) == MAX_CARD_BYTES


def test_variants_of_a_gguf_repo(client, fake_hub):
    files = {
        "Tiny-Q4_K_M.gguf": default_gguf("Q4_K_M"),
        "mmproj-Tiny-F16.gguf": default_gguf("F16"),
        "pytorch_model.bin": b"\x80\x02}q\x00.",
        "convert.py": b"print('no')\n",
        **{f"Q8_0/Tiny-Q8_0-0000{i}-of-00003.gguf": default_gguf("Q8_0", i - 1, 3) for i in (1, 2, 3)},
    }
    repo = fake_hub.add_repo(FakeRepo("fake-org/Tiny-GGUF", files=files, tags=["gguf"]))
    choices = repo_variants(client, "fake-org/Tiny-GGUF")
    assert sorted(c.label for c in choices) == ["Q4_K_M", "Q8_0"]
    q8 = next(c for c in choices if c.label == "Q8_0")
    assert [f.path for f in q8.files if "mmproj" not in f.path] == [
        f"Q8_0/Tiny-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    for c in choices:
        assert c.format == "gguf" and c.revision == repo.snapshot("main").commit
        assert [f.path for f in c.mmproj] == ["mmproj-Tiny-F16.gguf"]
        assert "mmproj-Tiny-F16.gguf" in [f.path for f in c.files]
        assert all(f.sha256 and f.size > 0 for f in c.files)
        assert not any(f.path.endswith((".bin", ".py")) for f in c.files)
        assert c.size == sum(f.size for f in c.files)
    assert q8.to_variant().files == [f.path for f in q8.files]


def test_variants_of_an_mlx_repo(client, fake_hub):
    fake_hub.add_repo(mlx_repo())
    (choice,) = repo_variants(client, "mlx-community/Tiny-4bit")
    assert (choice.format, choice.bits, choice.label) == ("mlx", 4.0, "4-bit g64")
    names = {f.path for f in choice.files}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert choice.size == sum(f.size for f in choice.files)


def test_mlx_repo_with_remote_code_refused(client, fake_hub):
    repo = mlx_repo("mlx-community/Evil-4bit")
    config = {"model_type": "llama", "model_file": "evil.py", "quantization": {"bits": 4, "group_size": 64}}
    repo.set_file("config.json", json.dumps(config).encode())
    repo.set_file("evil.py", b"import os\n")
    fake_hub.add_repo(repo)
    with pytest.raises(HubRefused, match="own code"):
        repo_variants(client, "mlx-community/Evil-4bit")


def test_variants_of_an_exl2_repo(client, fake_hub):
    repo = fake_hub.add_repo(exl2_repo())
    choices = repo_variants(client, "fake-org/Tiny-exl2")
    assert [(c.label, c.bits, c.branch) for c in choices] == [("4.0bpw", 4.0, "4.0bpw"), ("6.5bpw", 6.5, "6.5bpw")]
    for c in choices:
        assert c.format == "exl2" and c.revision == repo.snapshot(c.branch).commit
        assert {f.path for f in c.files} == {"config.json", "output.safetensors"}


def test_gated_repo_details_work_but_download_intent_is_gated(hf_env, fake_hub):
    fake_hub.add_repo(gated_repo())
    anon = HubClient(fake_hub.url, None, timeout=5)
    details = anon.model("fake-org/Gated-GGUF")
    assert details.gated == "auto"
    (choice,) = repo_variants(anon, "fake-org/Gated-GGUF")
    assert choice.gated and choice.label == "Q4_K_M"
    with pytest.raises(HubGated, match="accept the licence on the model page, then add a token"):
        anon.file_metadata("fake-org/Gated-GGUF", "Gated-Q4_K_M.gguf")
    meta = HubClient(fake_hub.url, GOOD_TOKEN).file_metadata("fake-org/Gated-GGUF", "Gated-Q4_K_M.gguf")
    assert meta.commit == fake_hub.repos["fake-org/Gated-GGUF"].snapshot("main").commit
    assert meta.size == choice.size


def test_pickle_only_repo_refused_with_reason(client, fake_hub):
    fake_hub.add_repo(pickle_repo())
    with pytest.raises(HubRefused, match="only pickle weights"):
        repo_variants(client, "fake-org/Pickle-Only")


def test_repo_without_usable_model_refused(client, fake_hub):
    fake_hub.add_repo(FakeRepo("fake-org/Docs", files={"README.md": b"hi"}))
    with pytest.raises(HubRefused, match="no GGUF, MLX or EXL2"):
        repo_variants(client, "fake-org/Docs")


def test_hostile_names_rejected(client, fake_hub, tmp_path):
    fake_hub.add_repo(hostile_repo())
    for call in (client.model, lambda repo_id: repo_variants(client, repo_id)):
        with pytest.raises(HubUnsafeName, match="unsafe file name"):
            call("fake-org/Hostile-GGUF")
    for name in HOSTILE_NAMES:
        with pytest.raises(HubUnsafeName):
            client.resolve_url("fake-org/Hostile-GGUF", name)
    assert fake_hub.requests("GET", "/resolve/") == []


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, "", "a//b.gguf", "./a.gguf", "a/./b", "x\x00.gguf", "C:x", "a/.."])
def test_validate_remote_name_rejects(name):
    with pytest.raises(HubUnsafeName):
        validate_remote_name(name)


@pytest.mark.parametrize("name", ["a.gguf", "Q8_0/m-00001-of-00002.gguf", "sub/dir/tokenizer.model", "..a.gguf"])
def test_validate_remote_name_accepts(name):
    assert validate_remote_name(name) == name


def test_not_found_and_bad_revision(client, fake_hub):
    fake_hub.add_repo(gguf_repo())
    with pytest.raises(HubNotFound, match="no such model"):
        client.model("nobody/nothing")
    with pytest.raises(HubNotFound, match="revision"):
        client.model("fake-org/Tiny-GGUF", revision="no-such-branch")


def test_private_repo_needs_a_token(hf_env, fake_hub):
    fake_hub.add_repo(gguf_repo("fake-org/Private-GGUF", private=True))
    with pytest.raises(HubNotFound, match="add a token"):
        HubClient(fake_hub.url, None).model("fake-org/Private-GGUF")
    assert HubClient(fake_hub.url, GOOD_TOKEN).model("fake-org/Private-GGUF").private


def test_bad_token_on_gated_download_is_unauthorized_or_gated(hf_env, fake_hub):
    fake_hub.add_repo(gated_repo())
    with pytest.raises((HubGated, HubUnauthorized)):
        HubClient(fake_hub.url, "hf_wrong").file_metadata("fake-org/Gated-GGUF", "Gated-Q4_K_M.gguf")


def test_offline_closed_port_is_fast(hf_env):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = HubClient(f"http://127.0.0.1:{port}", None, timeout=5)
    for call in (
        lambda: client.search("x"),
        lambda: client.model("a/b"),
        lambda: client.model_card("a/b"),
        lambda: client.tree("a/b"),
        lambda: client.file_metadata("a/b", "x.gguf"),
    ):
        t0 = time.monotonic()
        with pytest.raises(HubOffline, match=f"can't reach the Hub at http://127.0.0.1:{port}"):
            call()
        assert time.monotonic() - t0 < 5


def test_silent_server_times_out_as_offline(hf_env):
    # Accepts connections (kernel backlog) but never answers: only the timeout can end the call.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    try:
        client = HubClient(f"http://127.0.0.1:{s.getsockname()[1]}", None, timeout=0.5)
        for call in (lambda: client.search("x"), lambda: client.model("a/b")):
            t0 = time.monotonic()
            with pytest.raises(HubOffline):
                call()
            assert time.monotonic() - t0 < 3
    finally:
        s.close()


def test_rate_limited_with_retry_after(client, fake_hub):
    fake_hub.add_repo(gguf_repo())
    fake_hub.faults.add("README.md", Fault.status_code(429, retry_after=7), repo_id="fake-org/Tiny-GGUF")
    with pytest.raises(HubRateLimited) as info:
        client.model_card("fake-org/Tiny-GGUF")
    assert info.value.retry_after == 7
    assert "7 s" in str(info.value)
    fake_hub.faults.add("Tiny-Q4_K_M.gguf", Fault.status_code(429, retry_after=3), method="HEAD")
    with pytest.raises(HubRateLimited) as info:
        client.file_metadata("fake-org/Tiny-GGUF", "Tiny-Q4_K_M.gguf")
    assert info.value.retry_after == 3


def test_server_error_is_a_plain_hub_error(client, fake_hub):
    fake_hub.add_repo(gguf_repo())
    fake_hub.faults.add("README.md", Fault.status_code(503))
    with pytest.raises(HubError, match="HTTP 503") as info:
        client.model_card("fake-org/Tiny-GGUF")
    assert type(info.value) is HubError


@pytest.mark.parametrize("name", ["CON.gguf", "a/b. ", "dir/aux.json"])
def test_validate_remote_name_applies_the_downloader_rules(name):
    pytest.importorskip("app.core.downloads.paths")
    with pytest.raises(HubUnsafeName):
        validate_remote_name(name)


@pytest.mark.parametrize("repo_id", ["a/../../x", "noslash", "a/b/c", "/etc/passwd", "a/..", ""])
def test_bad_repo_ids_never_reach_the_hub(client, fake_hub, repo_id):
    for call in (client.model, client.tree, client.branches, client.model_card):
        with pytest.raises(HubNotFound, match="not a Hub model id"):
            call(repo_id)
    assert fake_hub.log == []


def test_page_token_for_another_host_refused(client):
    with pytest.raises(ValueError, match="away from this Hub"):
        client.search(page_token="http://evil.example/api/models?cursor=x")
