"""The Downloads panel on the fake Hub: pause/resume, cancel, plain-words failure and retry, restart mid-download."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.downloads.items import Progress, State
from app.core.events import Event
from app.core.library.from_downloads import LibraryFeed
from app.core.models.recommend import Variant
from app.core.units import fmt_eta
from app.ui.bridge import EventBridge
from app.ui.downloads_panel import DownloadsPanel
from tests.fakehub import FakeRepo, Fault
from tests.fakehub.repos import gguf_with_data
from tests.ui.hub_gui_fixtures import blob, env, part_of, pool_tasks, sha  # noqa: F401

REPO = "org/dl"
SIZE = 1 << 20
DATA = gguf_with_data(SIZE, blob(SIZE, 7))  # a real GGUF: the library accepts only those as models


@pytest.fixture
def repo(fake_hub):
    return fake_hub.add_repo(FakeRepo(REPO, files={"big.gguf": DATA, "config.json": b'{"a": 1}'}))


@pytest.fixture
def wired(qtbot, env, repo):  # noqa: F811
    made = []

    def make():
        manager = env.manager()
        services = LibraryFeed(manager, env.library)
        panel = DownloadsPanel(manager, env.tasks, hub=env.hub)
        qtbot.addWidget(panel)
        made.append(services)
        return manager, panel, services

    yield make
    for s in made:
        s._unsubscribe()
        s.manager.close()


VARIANT = Variant(label="big", format="gguf", size_bytes=SIZE, repo_id=REPO, revision="main", files=["big.gguf"])


def start(qtbot, panel) -> str:
    with qtbot.waitSignal(panel.download_queued, timeout=10_000) as got:
        panel.request_download(VARIANT)
    return got.args[0]


def received(fake_hub) -> int:
    fake_hub.wait_idle()
    return sum(r.bytes_sent for r in fake_hub.requests("GET", "big.gguf"))


def test_pause_and_resume_from_the_panel(qtbot, fake_hub, env, wired):  # noqa: F811
    fake_hub.faults.add("big.gguf", Fault.throttle(SIZE // 4))
    manager, panel, _ = wired()
    item_id = start(qtbot, panel)
    row = panel.row(item_id)
    qtbot.waitUntil(lambda: row.item_state == State.ACTIVE and row.bar.value() > 0, timeout=10_000)
    assert row.buttons["pause"].isVisibleTo(panel) and not row.buttons["resume"].isVisibleTo(panel)
    row.buttons["pause"].click()
    qtbot.waitUntil(lambda: row.item_state == State.PAUSED, timeout=10_000)
    assert row.state.text() == "Paused" and row.rate.text() == "" and row.buttons["resume"].isVisibleTo(panel)
    assert part_of(env.models, REPO, "big.gguf").stat().st_size > 0
    kept = manager.get(item_id).bytes_done
    assert 0 < kept < SIZE
    qtbot.waitUntil(lambda: row.buttons["resume"].isEnabled(), timeout=5_000)
    row.buttons["resume"].click()
    qtbot.waitUntil(lambda: row.item_state == State.DONE, timeout=20_000)
    assert sha(env.models / REPO / "big.gguf") == sha_of(DATA)
    gets = fake_hub.requests("GET", "big.gguf")
    assert len(gets) == 2 and gets[1].range == f"bytes={gets[1].range.split('=')[1].split('-')[0]}-"
    assert received(fake_hub) < SIZE * 1.1  # the resume did not start again from zero
    qtbot.waitUntil(lambda: env.library.find(f"{REPO}:big") is not None, timeout=5_000)


def sha_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_cancel_removes_the_row_and_the_partial(qtbot, fake_hub, env, wired):  # noqa: F811
    fake_hub.faults.add("big.gguf", Fault.throttle(SIZE // 8))
    manager, panel, _ = wired()
    item_id = start(qtbot, panel)
    row = panel.row(item_id)
    qtbot.waitUntil(lambda: row.bar.value() > 0, timeout=10_000)
    row.buttons["cancel"].click()
    qtbot.waitUntil(lambda: item_id not in panel.rows, timeout=10_000)
    assert manager.get(item_id) is None and not panel.empty.isHidden()
    assert not part_of(env.models, REPO, "big.gguf").exists()
    assert not (env.models / REPO / "big.gguf").exists()


def test_failure_in_plain_words_then_retry_works(qtbot, fake_hub, env, wired):  # noqa: F811
    fake_hub.faults.add("big.gguf", *[Fault.status_code(503) for _ in range(3)])  # every try of the first run
    _manager, panel, _ = wired()
    item_id = start(qtbot, panel)
    row = panel.row(item_id)
    qtbot.waitUntil(lambda: row.item_state == State.FAILED, timeout=20_000)
    assert row.state.text() == "Failed" and not row.error.isHidden()
    assert row.error.text().startswith("Gave up downloading big.gguf after 3 failed attempts")
    assert "Traceback" not in row.error.text() and row.buttons["retry"].isVisibleTo(panel)
    assert fake_hub.faults.pending("big.gguf") == 0  # the fault is gone now
    qtbot.waitUntil(lambda: row.buttons["retry"].isEnabled(), timeout=5_000)
    row.buttons["retry"].click()
    qtbot.waitUntil(lambda: row.item_state == State.DONE, timeout=20_000)
    assert row.error.isHidden() and sha(env.models / REPO / "big.gguf") == sha_of(DATA)


def test_restart_mid_download_resumes_and_completes(qtbot, fake_hub, env, wired):  # noqa: F811
    fake_hub.faults.add("big.gguf", Fault.throttle(SIZE // 4))
    manager, panel, services = wired()
    item_id = start(qtbot, panel)
    qtbot.waitUntil(lambda: panel.row(item_id).bar.value() > 50, timeout=10_000)
    services.close()
    manager.close()  # what quitting the app does: the active download is paused, the state saved
    panel.close()
    panel.deleteLater()
    done_before = received(fake_hub)
    assert 0 < done_before < SIZE

    _manager2, panel2, services2 = wired()  # a new launch on the same state file
    row = panel2.row(item_id)
    assert row.item_state == State.PAUSED and row.bar.value() > 0
    threading.Thread(target=services2.start).start()  # what the app runs at start, off the UI thread
    qtbot.waitUntil(lambda: row.item_state == State.DONE, timeout=20_000)
    assert sha(env.models / REPO / "big.gguf") == sha_of(DATA)
    assert received(fake_hub) < SIZE * 1.1
    qtbot.waitUntil(lambda: env.library.find(f"{REPO}:big") is not None, timeout=5_000)
    assert env.library.find(f"{REPO}:big").ready


def test_request_for_a_vanished_file_is_explained(qtbot, fake_hub, env, wired):  # noqa: F811
    _, panel, _ = wired()
    gone = Variant(label="x", format="gguf", size_bytes=1, repo_id=REPO, revision="main", files=["gone.gguf"])
    with qtbot.waitSignal(panel.request_failed, timeout=10_000) as got:
        panel.request_download(gone)
    assert "no longer has gone.gguf" in got.args[0] and "gone.gguf" in panel.status.text()
    assert not panel.rows


def test_the_sidebar_counts_downloads_in_progress_as_they_start_and_finish(qtbot, fake_hub, hf_env):
    from app.core.paths import app_paths
    from app.core.settings import Settings, SettingsStore
    from app.main import build_shell

    fake_hub.add_repo(FakeRepo("org/two", files={"a.gguf": blob(SIZE, 1), "b.gguf": blob(SIZE, 2)}))
    stalls = {name: fake_hub.faults.add(name, Fault.stall(SIZE // 4)) for name in ("a.gguf", "b.gguf")}
    paths = app_paths().ensure()
    settings = Settings(hf_endpoint=fake_hub.url, measure_bandwidth_on_start=False)
    shell = build_shell(paths, SettingsStore(paths.settings_file), settings)
    try:
        w, panel = shell.window, shell.window.page("downloads")
        qtbot.addWidget(w)
        entry = w.sidebar.item(2)
        assert entry.text() == "Downloads"
        ids = {}
        for name in ("a", "b"):
            variant = Variant(label=name, format="gguf", size_bytes=SIZE, repo_id="org/two", files=[f"{name}.gguf"])
            with qtbot.waitSignal(panel.download_queued, timeout=10_000) as got:
                panel.request_download(variant)
            ids[name] = got.args[0]
        qtbot.waitUntil(lambda: entry.text() == "Downloads (2)", timeout=10_000)
        stalls["a.gguf"].release()
        qtbot.waitUntil(lambda: panel.row(ids["a"]).item_state == State.DONE, timeout=10_000)
        qtbot.waitUntil(lambda: entry.text() == "Downloads (1)", timeout=5_000)
        stalls["b.gguf"].release()
        qtbot.waitUntil(lambda: panel.row(ids["b"]).item_state == State.DONE, timeout=10_000)
        qtbot.waitUntil(lambda: entry.text() == "Downloads", timeout=5_000)
        assert w.current_page_key == "discover"  # counted while another page is shown
        # Both went into the library: let the pages take that in before the pool is shut down.
        qtbot.waitUntil(lambda: w.page("models").table.rowCount() == 2, timeout=10_000)
    finally:
        shell.shutdown()


def test_bridge_coalesces_progress_to_ten_per_second_per_item(qtbot):
    event: Event[Progress] = Event("p")
    bridge = EventBridge(event, coalesce_key=lambda p: p.item_id)
    seen: list[tuple[str, int, threading.Thread]] = []
    bridge.fired.connect(lambda p: seen.append((p.item_id, p.done, threading.current_thread())))

    def flood() -> None:
        for i in range(1, 3001):
            for item in ("a", "b"):
                event.emit(Progress(item, "f", i, 3000, 1.0, None, i, 3000, 1.0, None))
            if i % 300 == 0:
                time.sleep(0.05)

    t0 = time.monotonic()
    worker = threading.Thread(target=flood)
    worker.start()
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=10_000)
    qtbot.waitUntil(lambda: ("a", 3000) in [(i, d) for i, d, _ in seen], timeout=2_000)
    elapsed = time.monotonic() - t0
    for item in ("a", "b"):
        mine = [d for i, d, _ in seen if i == item]
        assert mine[-1] == 3000 and mine == sorted(mine)  # the latest value always arrives
        assert len(mine) <= elapsed * 10 + 2
    assert all(t is threading.main_thread() for _, _, t in seen)
    bridge.close()
    event.emit(Progress("a", "f", 1, 1, 1.0, None, 1, 1, 1.0, None))
    qtbot.wait(150)
    assert seen[-1][1] == 3000  # closed: nothing more delivered


def test_eta_in_words():
    assert (fmt_eta(None), fmt_eta(42), fmt_eta(125), fmt_eta(7300)) == (
        "",
        "42 s left",
        "2 min 05 s left",
        "2 h 01 min left",
    )


@pytest.mark.parametrize("coalesced", [False, True])
def test_a_closed_bridge_drops_what_was_already_queued_for_it(qtbot, coalesced):
    """At quit a service closes while its events still wait in Qt's queue: none may reach a widget."""
    event: Event[str] = Event("e")
    bridge = EventBridge(event, coalesce_key=(lambda v: v) if coalesced else None)
    seen: list[str] = []
    bridge.fired.connect(seen.append)
    worker = threading.Thread(target=lambda: event.emit("queued"))
    worker.start()
    worker.join()  # posted to the main thread's queue, which has not run yet
    bridge.close()
    qtbot.wait(250)  # past the coalescing interval too
    assert seen == []
    event.emit("after")
    qtbot.wait(50)
    assert seen == []
