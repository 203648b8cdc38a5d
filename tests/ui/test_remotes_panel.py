"""Remote servers on My Models, as a user meets them: add a second Hearth on loopback (probed first), see its
models with their context, chat with one in the Chat page exactly like a local model, serve it on the local
API, remove it; an unreachable URL says why and saves nothing."""

from __future__ import annotations

import pytest

from app.core.engines.remote.store import RemoteStore
from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.main import build_shell
from app.ui.remotes_panel import RemotesPanel
from tests.core.engines.remote.upstream import UPSTREAM_KEY, upstream_server
from tests.ui.hub_gui_fixtures import pool_tasks  # noqa: F401


@pytest.fixture
def shell(qtbot, monkeypatch):
    # Never the machine's keyring: the fail backend means "keep the key in the owner-only file".
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load().model_copy(update={"measure_bandwidth_on_start": False})
    shell = build_shell(paths, store, settings)
    qtbot.addWidget(shell.window)
    yield shell
    shell.shutdown()


def add(qtbot, panel, url: str, **kw) -> None:
    panel.add(url, **kw)
    qtbot.waitUntil(lambda: not panel.busy, timeout=20_000)


def test_add_a_server_then_chat_with_its_model_like_a_local_one(qtbot, shell, tmp_path):
    window = shell.window
    panel = window.page("models").remotes_panel
    assert panel is not None and panel.table.rowCount() == 0
    with upstream_server(tmp_path / "up", script="hello from the box") as up:
        add(qtbot, panel, up.url + "/v1", name="box", api_key=UPSTREAM_KEY)
        assert panel.status.text() == "Added box: Hearth, 2 models."
        qtbot.waitUntil(lambda: panel.table.rowCount() == 2, timeout=5_000)
        rows = {panel.table.item(r, 0).text(): panel.table.item(r, 2).text() for r in range(2)}
        assert rows == {"box/alpha": "256", "box/beta": "4,096"}
        # The Chat page lists it beside the library and loads it as it would a local model.
        panel.select("box/alpha")
        window.show()
        panel.chat_button.click()
        chat = window.page("chat")
        assert window.current_page_key == "chat"
        qtbot.waitUntil(lambda: chat.model_bar.state.status == "ready", timeout=20_000)
        assert chat.model_bar.picker.currentText().startswith("box/alpha")
        with qtbot.waitSignal(chat.reply_finished, timeout=20_000):
            assert chat.replies.send("hi")
        assert chat.thread_view.rows[-1].content == "hello from the box"
        assert up.engines[0].generations, "the upstream engine answered"
    logs = "".join(p.read_text(errors="replace") for p in app_paths().logs.glob("*") if p.is_file())
    assert UPSTREAM_KEY not in logs + panel.status.text()  # the key is never logged or shown


def test_serve_on_the_local_api_and_remove(qtbot, shell, tmp_path):
    panel = shell.window.page("models").remotes_panel
    with upstream_server(tmp_path / "up") as up:
        add(qtbot, panel, up.url, name="box", api_key=UPSTREAM_KEY)
        qtbot.waitUntil(lambda: panel.table.rowCount() == 2, timeout=5_000)
        panel.select("box/alpha")
        assert not panel.expose_box.isChecked()
        panel.expose_box.setChecked(True)
        qtbot.waitUntil(
            lambda: not panel.busy and panel.table.item(0, 3).text() == "served", timeout=10_000
        )  # both rows: one server
        assert shell.services.remotes.get("box").expose_locally
        assert sorted(e.id for e in shell.services.remotes.entries(exposed_only=True)) == ["box/alpha", "box/beta"]
        panel.select("box/alpha")
        panel.remove_button.click()
        qtbot.waitUntil(lambda: not panel.busy and panel.table.rowCount() == 0, timeout=10_000)
        assert shell.services.remotes.list() == [] and panel.status.text() == "Removed box."


def test_an_unreachable_server_says_why_and_is_not_saved(qtbot, shell):
    panel = shell.window.page("models").remotes_panel
    add(qtbot, panel, "http://127.0.0.1:9", name="nowhere")
    assert panel.status.property("status") == "error" and panel.status.text()
    assert shell.services.remotes.list() == [] and panel.table.rowCount() == 0
    panel.add("   ")
    assert "URL" in panel.status.text()


def test_add_from_a_plan_fills_in_the_url(qtbot, tmp_path, pool_tasks):  # noqa: F811
    asked: list[str] = []
    store = RemoteStore(tmp_path / "remotes.json", keyring=None)
    panel = RemotesPanel(store, pool_tasks, ask=lambda _parent, url: asked.append(url))
    qtbot.addWidget(panel)
    panel.add_clicked("http://gpu-server:8000")
    assert asked == ["http://gpu-server:8000"]  # the dialog opens with it; cancelling adds nothing
    assert store.list() == []


def test_with_no_server_the_section_is_one_line_until_one_is_added(qtbot, tmp_path, pool_tasks):  # noqa: F811
    store = RemoteStore(tmp_path / "remotes.json", keyring=None)
    panel = RemotesPanel(store, pool_tasks)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: not panel.busy)
    assert panel.collapsed and panel.add_button.isVisible() and panel.collapsed_hint.isVisible()
    assert not panel.table.isVisible() and not panel.remove_button.isVisible()
    short = panel.sizeHint().height()
    with upstream_server(tmp_path / "up") as up:
        add(qtbot, panel, up.url, name="gpu-box", api_key=UPSTREAM_KEY)
        qtbot.waitUntil(lambda: panel.table.rowCount() == 2, timeout=5_000)
    assert not panel.collapsed and panel.table.isVisible() and not panel.collapsed_hint.isVisible()
    assert short < panel.sizeHint().height()
