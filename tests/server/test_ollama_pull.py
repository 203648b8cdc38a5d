"""`POST /api/pull` for `hf.co/OWNER/REPO[:QUANT]`: through the official `ollama` client against the fake Hub
(no internet), into the download queue and the library, with Ollama's status lines."""

from __future__ import annotations

import json

import httpx
import pytest

from app.core.downloads.manager import DownloadManager
from app.core.hub.client import HubClient
from app.core.library import Library
from app.core.library.from_downloads import LibraryFeed
from app.server.errors import APIError
from app.server.ollama.pull import ONLY_HUB, OnDemandDownloads, parse_pull_name
from tests.core.downloads.conftest import FAST
from tests.fakehub import Fault, gguf_repo

ollama = pytest.importorskip("ollama")

REPO = "org/Tiny-GGUF"
Q8 = "Tiny-Q8_0.gguf"


@pytest.fixture
def live(make_server, fake_hub, hf_env, quant_files, tmp_path):
    """A server whose pulls go to the fake Hub, into a queue with a LibraryFeed, as the app wires it."""
    fake_hub.add_repo(
        gguf_repo(REPO, quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    live = make_server()
    library = live.context.library
    library.models_dir.mkdir(parents=True, exist_ok=True)  # the app makes it at start
    manager = DownloadManager(
        library.models_dir,
        tmp_path / "downloads.json",
        endpoint=fake_hub.url,
        client_factory=lambda: httpx.Client(trust_env=False, follow_redirects=True),
        download_options=FAST,
    )
    feed = LibraryFeed(manager, library)
    hub = HubClient(fake_hub.url, None, timeout=5)
    live.context.hub = lambda: hub
    live.context.downloads = lambda: manager
    live.manager = manager
    yield live
    feed.close()
    manager.close()


def tags(live) -> list[str]:
    return sorted(m.model for m in ollama.Client(host=live.url).list().models)


def test_a_streamed_pull_reports_progress_and_lands_in_the_library(live, fake_hub, quant_files):
    size = quant_files["Q8_0"].stat().st_size
    stall = fake_hub.faults.add(Q8, Fault.stall(size // 3))  # holds the body a third of the way in
    lines = []
    for part in ollama.Client(host=live.url).pull("hf.co/org/Tiny-GGUF:q8_0", stream=True):
        lines.append(part)
        if part.completed and part.completed < size:
            stall.release()  # a line mid-file was seen: let the rest come
    statuses = [p.status for p in lines]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    files = [p for p in lines if p.digest]
    assert files and all(p.status == f"pulling {p.digest[7:19]}" and p.total == size for p in files)
    done = [p.completed for p in files]
    assert done == sorted(done) and 0 < min(x for x in done if x) < size and done[-1] == size
    assert not fake_hub.requests("GET", "Tiny-F16.gguf")  # only the named quant
    assert "Tiny-GGUF:Q8_0" in tags(live)
    assert [i.state.value for i in live.manager.items()] == ["done"]  # it went through the Downloads queue
    # The name it was pulled by names it on every route afterwards (`ollama run hf.co/…` pulls, then chats).
    assert live.context.library.find(live.context.library_name("hf.co/org/Tiny-GGUF:Q8_0")).name == "Tiny-GGUF:Q8_0"


def test_not_streamed_is_one_success_and_a_second_pull_answers_at_once(live, fake_hub):
    r = live.client.post("/api/pull", json={"model": "huggingface.co/org/Tiny-GGUF:Q8_0", "stream": False})
    assert r.status_code == 200 and r.json() == {"status": "success"}
    assert "Tiny-GGUF:Q8_0" in tags(live)
    fake_hub.clear_log()
    again = list(ollama.Client(host=live.url).pull("hf.co/org/Tiny-GGUF:Q8_0", stream=True))
    assert [p.status for p in again] == ["success"]
    old = live.client.post("/api/pull", json={"name": "hf.co/org/Tiny-GGUF:Q8_0", "stream": False})  # old clients
    assert old.json() == {"status": "success"}
    assert not fake_hub.log  # the Hub was not asked again


def test_t45_a_missing_quant_or_repo_is_404_and_other_names_are_400_with_nothing_queued(live):
    c = ollama.Client(host=live.url)
    with pytest.raises(ollama.ResponseError) as err:
        list(c.pull("hf.co/org/Tiny-GGUF:Q2_K", stream=True))
    assert err.value.status_code == 404 and "Q2_K" in err.value.error and "Q8_0" in err.value.error
    r = live.client.post("/api/pull", json={"model": "hf.co/org/Nothing-Here"})
    assert r.status_code == 404 and set(r.json()) == {"error"}
    for name in ("llama3.2", "llama3.2:latest", "registry.ollama.ai/library/llama3", "hf.co/../etc:Q4"):
        r = live.client.post("/api/pull", json={"model": name})
        assert r.status_code == 400, name
        assert ONLY_HUB in r.json()["error"]
    r = live.client.post("/api/pull", json={"model": "hf.co/org/Tiny-GGUF:Q8_0/../../x"})
    assert r.status_code == 400 and "quant" in r.json()["error"]
    assert live.manager.items() == []  # nothing was queued


def test_t45_without_the_app_or_a_models_folder_pulling_is_501(make_server):
    live = make_server()
    r = live.client.post("/api/pull", json={"model": "hf.co/org/Tiny-GGUF:Q8_0"})
    assert r.status_code == 501 and "hearth serve" in r.json()["error"]


def test_names_parse_as_ollama_writes_them():
    assert parse_pull_name("hf.co/Org/Repo:Q4_K_M") == ("Org/Repo", "Q4_K_M")
    assert parse_pull_name(" HF.CO/org/repo ") == ("org/repo", None)
    assert parse_pull_name("huggingface.co/org/repo:latest") == ("org/repo", None)
    with pytest.raises(APIError):
        parse_pull_name("hf.co/repo-without-owner")


def test_the_stream_is_ndjson(live):
    r = live.client.post("/api/pull", json={"model": "hf.co/org/Tiny-GGUF:Q8_0"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}


def test_without_a_quant_the_one_recommended_here_is_pulled(live, fake_hub):
    r = live.client.post("/api/pull", json={"model": "hf.co/org/Tiny-GGUF:latest", "stream": False})
    assert r.status_code == 200 and r.json() == {"status": "success"}
    assert "Tiny-GGUF:Q8_0" in tags(live)  # F16 is no better than Q8_0 and twice the size
    assert not [x for x in fake_hub.requests("GET", "Tiny-F16.gguf") if not x.range]  # only its header was read


def test_a_client_that_leaves_mid_pull_leaves_the_download_running(live, fake_hub, quant_files):
    size = quant_files["Q8_0"].stat().st_size
    stall = fake_hub.faults.add(Q8, Fault.stall(size // 3))
    with live.client.stream("POST", "/api/pull", json={"model": "hf.co/org/Tiny-GGUF:Q8_0"}) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines)) == {"status": "pulling manifest"}
    stall.release()  # the client has gone; the download goes on
    (item,) = live.manager.items()
    assert live.manager.wait(item.id, 30).value == "done"
    again = live.client.post("/api/pull", json={"model": "hf.co/org/Tiny-GGUF:Q8_0", "stream": False})
    assert again.json() == {"status": "success"} and "Tiny-GGUF:Q8_0" in tags(live)
    fake_hub.wait_idle()
    assert len([x for x in fake_hub.requests("GET", Q8) if not x.range]) == 1  # fetched once


def test_serve_opens_its_download_queue_only_when_something_is_pulled(tmp_path):
    state = tmp_path / "downloads.json"
    library = Library(tmp_path / "models", tmp_path / "library.db")
    opened: list[DownloadManager] = []

    def open_manager() -> DownloadManager:
        opened.append(DownloadManager(library.models_dir, state))
        return opened[-1]

    idle = OnDemandDownloads(open_manager, library)
    idle.close()
    assert not opened and not state.exists()  # a serve that pulled nothing leaves the app's queue file alone
    used = OnDemandDownloads(open_manager, library)
    assert used() is used() and len(opened) == 1
    used.close()
    assert state.exists()
    library.close()
