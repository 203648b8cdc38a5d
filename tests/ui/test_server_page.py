"""The Server page over a real ApiService and a FakeEngine host: start and stop off the UI thread, the live
request log (coalesced), settings saved or refused, the key, the snippets, and the engine's state."""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.library import Library
from app.core.library.store import ModelFile
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import GenerateJob, UnloadJob
from app.core.runtime.resolve import ModelResolver
from app.core.settings import ServerSettings, Settings, SettingsStore
from app.server.keys import new_api_key
from app.server.request_log import LoggedRequest
from app.server.service import ApiService
from app.ui.server_log import (
    CACHED,
    DRAFTS,
    DURATION,
    IN_PROGRESS,
    MAX_UPDATES_HZ,
    STATUS,
    TOKENS,
    RequestLogModel,
)
from app.ui.server_model import base_url, curl_snippet, needs_restart, python_snippet
from app.ui.server_page import ServerPage
from app.ui.tasks import TaskRunner
from tests.fixtures.fake_engine import registry_with_fake
from tests.server.conftest import fake_library, no_preflight

WAIT_MS = 10_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def chat(url: str, key: str = "", model: str = "alpha") -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    return httpx.post(url + "/chat/completions", json=body, headers=headers, timeout=30)


@dataclass
class Env:
    page: ServerPage
    api: ApiService
    store: SettingsStore
    host: EngineHost
    library: Library
    current: dict
    answers: list[bool]
    threads: dict[str, list[threading.Thread]]

    @property
    def settings(self) -> Settings:
        return self.current["s"]

    def started(self, qtbot) -> None:
        self.page.start()
        qtbot.waitUntil(lambda: self.api.status.running and not self.page.busy, timeout=WAIT_MS)


@pytest.fixture
def make_env(tmp_path, qtbot):
    made: list[tuple[Env, ThreadPoolExecutor, TaskRunner]] = []

    def make(server: ServerSettings | None = None, *, log_rows: int = 200, **engine_kwargs) -> Env:
        folder = tmp_path / f"env{len(made)}"
        folder.mkdir()
        library = fake_library(folder)
        resolver = ModelResolver(library, machine=lambda: None)
        host = EngineHost(
            registry_with_fake(**engine_kwargs), preflight=no_preflight, resolver=resolver, name="test-server-page"
        )
        host.load_sync(LoadSpec(path=library.find("alpha").path, n_ctx=256), "fake")
        store = SettingsStore(folder / "settings.json")
        current = {"s": Settings(server=server or ServerSettings(port=free_port()))}
        store.changed.connect(lambda s: current.update(s=s))  # as Services.apply_settings does

        def save_key(key: str) -> None:
            s = current["s"]
            store.save(s.model_copy(update={"server": s.server.model_copy(update={"api_key": key})}))

        api = ApiService(host, library, resolver, lambda: current["s"].server, save_key)
        threads: dict[str, list[threading.Thread]] = {"start": [], "stop": [], "restart": []}
        for name in threads:  # record the thread each service call ran on
            real = getattr(api, name)

            def traced(*args, _real=real, _name=name, **kwargs):
                threads[_name].append(threading.current_thread())
                return _real(*args, **kwargs)

            setattr(api, name, traced)
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-server-bg")
        tasks = TaskRunner(pool)
        answers: list[bool] = []
        page = ServerPage(
            api,
            store,
            lambda: current["s"],
            library,
            host,
            tasks,
            new_key=new_api_key,
            confirm=lambda title, text: answers.pop(0),
            log_rows=log_rows,
        )
        qtbot.addWidget(page)
        env = Env(page, api, store, host, library, current, answers, threads)
        made.append((env, pool, tasks))
        return env

    yield make
    for env, pool, tasks in made:
        env.api.stop()
        tasks.close()
        pool.shutdown(wait=True)
        env.host.shutdown(5)
        env.library.close()


def off_ui_thread(threads: list[threading.Thread]) -> bool:
    return bool(threads) and all(t is not threading.main_thread() for t in threads)


# ---- start / stop -----------------------------------------------------------------------------------


def test_start_serves_logs_requests_and_stop_frees_the_port(make_env, qtbot):
    env = make_env()
    page, port = env.page, env.settings.server.port
    assert page.status_card.state_label.text() == "Stopped" and not page.status_card.stop_button.isEnabled()
    assert page.status_card.url.text() == f"http://127.0.0.1:{port}/v1"  # where it will listen, before it does

    page.status_card.start_button.click()
    assert page.busy and not page.status_card.start_button.isEnabled() and not page.status_card.stop_button.isEnabled()
    qtbot.waitUntil(lambda: env.api.status.running and not page.busy, timeout=WAIT_MS)
    assert page.status_card.state_label.text() == "● Running"
    assert page.status_card.url.text() == env.api.status.url == f"http://127.0.0.1:{port}/v1"
    assert page.status_card.stop_button.isEnabled() and not page.status_card.start_button.isEnabled()
    assert off_ui_thread(env.threads["start"])

    started: list = []
    env.api.log.started.connect(started.append)
    assert chat(page.status_card.url.text(), model="beta").status_code == 200  # JIT loads beta
    model = page.log_view.log_model
    # One row: shown when the request arrived (Running), filled in where it is once answered.
    qtbot.waitUntil(lambda: model.rowCount() == 1 and model.index(0, STATUS).data() != IN_PROGRESS, timeout=WAIT_MS)
    row = model.record(0)
    assert (row.method, row.path, row.model, row.status) == ("POST", "/v1/chat/completions", "beta", 200)
    assert [s.id for s in started] == [row.id] and row.id > 0  # the server announced it as it arrived
    shown = [model.index(0, c).data() for c in range(model.columnCount())]
    assert shown[1:3] == ["POST /v1/chat/completions", "beta"] and shown[STATUS] == "200"
    assert shown[TOKENS] == f"{row.prompt_tokens:,} → {row.completion_tokens:,}" and row.completion_tokens > 0

    page.status_card.copy_url_button.click()
    assert QGuiApplication.clipboard().text() == env.api.status.url

    page.status_card.stop_button.click()
    assert page.busy and not page.status_card.stop_button.isEnabled()
    qtbot.waitUntil(lambda: not env.api.status.running and not page.busy, timeout=WAIT_MS)
    assert page.status_card.state_label.text() == "Stopped" and page.status_card.start_button.isEnabled()
    assert off_ui_thread(env.threads["stop"])
    assert port_is_free(port)


def test_the_ui_thread_keeps_turning_while_the_server_starts(make_env, qtbot):
    env = make_env()
    release = threading.Event()
    real_start = env.api.start

    def slow_start():
        release.wait(10)
        return real_start()

    env.api.start = slow_start  # type: ignore[method-assign]
    env.page.start()
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=2_000)
    timer.stop()
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.5
    assert env.page.busy and env.page.status_card.state_label.text() == "Starting…"
    env.page.start()  # a second click while it works is ignored, not queued
    release.set()
    qtbot.waitUntil(lambda: env.api.status.running and not env.page.busy, timeout=WAIT_MS)
    assert len(env.threads["start"]) == 1 and off_ui_thread(env.threads["start"])


def test_a_port_in_use_shows_the_reason_and_start_stays_available(make_env, qtbot):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = make_env(ServerSettings(port=port))
        env.page.start()
        qtbot.waitUntil(lambda: not env.page.busy and env.page.status_card.error.isVisibleTo(env.page), timeout=WAIT_MS)
    text = env.page.status_card.error.text()
    assert text.startswith("Could not start:") and "cannot listen" in text and str(port) in text
    assert env.page.status_card.state_label.text() == "Stopped" and env.page.status_card.start_button.isEnabled()


def test_a_start_made_elsewhere_shows_on_the_page(make_env, qtbot):
    env = make_env()
    with qtbot.waitSignal(env.page.status_shown, timeout=WAIT_MS, check_params_cb=lambda s: s.running):
        threading.Thread(target=env.api.start).start()  # as main.py does for "start with Hearth"
    assert env.page.status_card.state_label.text() == "● Running" and env.page.status_card.stop_button.isEnabled()


# ---- the request log -----------------------------------------------------------------------------


def test_a_burst_of_200_requests_reaches_the_table_in_a_few_updates(make_env, qtbot):
    env = make_env(log_rows=300)
    env.started(qtbot)
    url = env.api.status.url.removesuffix("/v1")
    view = env.page.log_view

    def client_burst(n: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            for _ in range(n):
                assert client.get("/health").status_code == 200

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=10) as clients:
        futures = [clients.submit(client_burst, 20) for _ in range(10)]
        qtbot.waitUntil(lambda: view.log_model.rowCount() == 200 and not view.log_model.in_progress, timeout=30_000)
    elapsed = time.monotonic() - t0
    for f in futures:
        f.result()
    # The bridge posts at most MAX_UPDATES_HZ batches a second (starts and ends together), however fast
    # requests come.
    assert view.updates <= MAX_UPDATES_HZ * elapsed + 2, (view.updates, elapsed)
    assert view.updates < 50, (view.updates, elapsed)
    assert {view.log_model.record(r).path for r in range(200)} == {"/health"}
    shown = [view.log_model.record(r) for r in range(200)]
    assert {id(r) for r in shown} == {id(r) for r in env.api.log.items()}  # every one, none twice
    ids = [r.id for r in shown]
    assert ids == sorted(ids, reverse=True)  # newest (by arrival) first


def test_an_instant_burst_is_one_or_two_updates_and_the_table_keeps_the_last_rows(make_env, qtbot):
    env = make_env(log_rows=50)
    view = env.page.log_view

    def burst() -> None:
        for i in range(200):
            env.api.log.add(LoggedRequest(1000.0 + i, "GET", f"/r/{i}", 200, 0.001))

    threading.Thread(target=burst).start()
    qtbot.waitUntil(lambda: view.log_model.rowCount() == 50 and view.log_model.record(0).path == "/r/199")
    assert view.updates <= 3, view.updates
    assert [view.log_model.record(r).path for r in (0, 49)] == ["/r/199", "/r/150"]


def test_the_table_starts_with_what_the_log_already_holds(make_env, qtbot):
    env = make_env()
    env.started(qtbot)
    assert chat(env.api.status.url).status_code == 200
    qtbot.waitUntil(lambda: len(env.api.log.items()) == 1)
    later = ServerPage(
        env.api, env.store, lambda: env.settings, env.library, env.host, env.page._tasks, new_key=new_api_key
    )
    qtbot.addWidget(later)
    assert later.log_view.log_model.rowCount() == 1
    assert later.log_view.log_model.record(0).model == "alpha"


def test_the_log_model_puts_the_newest_first_and_trims():
    model = RequestLogModel(keep=3)
    rows = [LoggedRequest(float(i), "GET", f"/{i}", 404 if i == 4 else 200, 1.5) for i in range(5)]
    model.add(rows[:2])
    model.add(rows[2:])
    assert [model.record(r).path for r in range(model.rowCount())] == ["/4", "/3", "/2"]
    assert model.index(0, DURATION).data() == "1.5 s" and model.index(0, STATUS).data() == "404"
    assert model.index(0, STATUS).data(Qt.ItemDataRole.ForegroundRole) is not None  # an error status is coloured
    assert model.index(1, STATUS).data(Qt.ItemDataRole.ForegroundRole) is None
    assert model.index(0, DRAFTS).data() == ""  # nothing drafted


def test_the_log_shows_the_drafts_kept_from_usage():
    from app.server.request_log import RequestLog, Timer

    log = RequestLog()
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 12},
        "completion_tokens_details": {"accepted_prediction_tokens": 15, "rejected_prediction_tokens": 5},
    }
    Timer(log, "POST", "/v1/chat/completions").done(200, "m", usage)
    model = RequestLogModel()
    model.add(log.items())
    assert model.index(0, CACHED).data() == "12" and model.index(0, DRAFTS).data() == "75% of 20"


# ---- settings ------------------------------------------------------------------------------------


def test_valid_edits_are_saved_and_invalid_ones_show_pydantic_words_and_save_nothing(make_env, qtbot):
    env = make_env()
    form = env.page.form
    form.origins.setPlainText("http://localhost:3000/\nnot-an-origin")
    with qtbot.waitSignal(env.page.save_failed, timeout=1_000) as failed:
        form.save_button.click()
    assert "'not-an-origin' is not an exact origin" in failed.args[0]
    assert form.error.isVisibleTo(form) and "not an exact origin" in form.error.text()
    assert not env.store.path.exists() and not env.page.busy  # nothing saved, nothing started

    form.origins.setPlainText("http://localhost:3000/\n  https://app.example:8443 \n")
    form.idle.setValue(15)
    form.max_models.setValue(2)
    form.queue.setValue(4)
    form.jit.setChecked(False)
    form.start_with_app.setChecked(True)
    form.keep_in_tray.setChecked(False)
    form.jit_context.setValue(32768)
    form.keep_responses.setChecked(True)
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        form.save_button.click()
    saved = env.store.load().server
    assert saved.cors_origins == ["http://localhost:3000", "https://app.example:8443"]
    assert (saved.idle_ttl_minutes, saved.queue_size, saved.jit_load) == (15, 4, False)
    assert saved.max_loaded_models == 2
    assert saved.start_with_app and not saved.keep_serving_in_tray
    assert saved.jit_context == 32768 and saved.keep_responses
    assert not form.error.isVisibleTo(form) and form.note.text() == "Saved."
    assert form.origins.toPlainText() == "http://localhost:3000\nhttps://app.example:8443"  # as validated
    assert not form.dirty and env.settings.server == saved


def test_the_spin_boxes_offer_what_the_settings_accept(make_env):
    form = make_env().page.form
    assert (form.port.minimum(), form.port.maximum()) == (1, 65535)
    assert (form.idle.minimum(), form.idle.maximum()) == (0, 24 * 60) and form.idle.text() == "Never"
    assert (form.queue.minimum(), form.queue.maximum()) == (1, 256)
    assert form.jit_context.minimum() == 0 and form.jit_context.text() == "The largest that fits"


def test_a_new_port_restarts_a_running_server_there(make_env, qtbot):
    env = make_env()
    env.started(qtbot)
    old, new = env.settings.server.port, free_port()
    env.page.form.port.setValue(new)
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        env.page.form.save_button.click()
    qtbot.waitUntil(lambda: not env.page.busy)
    assert env.api.status.running and env.page.status_card.url.text() == f"http://127.0.0.1:{new}/v1"
    assert env.store.load().server.port == new
    assert off_ui_thread(env.threads["restart"]) and "restarted" in env.page.form.note.text()
    assert port_is_free(old) and chat(env.page.status_card.url.text()).status_code == 200


def test_queue_and_idle_edits_do_not_restart(make_env, qtbot):
    env = make_env()
    env.started(qtbot)
    env.page.form.queue.setValue(3)
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        env.page.form.save_button.click()
    assert env.threads["restart"] == [] and env.api.status.running


def test_lan_mode_warns_and_always_needs_the_key(make_env):
    form = make_env().page.form
    assert not form.lan_warning.isVisibleTo(form) and form.require_key.isEnabled()
    form.bind.setCurrentIndex(form.bind.findData("lan"))
    assert form.lan_warning.isVisibleTo(form) and "network" in form.lan_warning.text()
    assert form.require_key.isChecked() and not form.require_key.isEnabled()
    assert form.values()["bind"] == "lan" and form.values()["require_api_key"] is False  # loopback choice kept
    form.bind.setCurrentIndex(form.bind.findData("loopback"))
    assert not form.require_key.isChecked() and form.require_key.isEnabled()


def test_needs_restart_names_what_the_server_listens_with():
    s = ServerSettings()
    for change in ({"port": 9000}, {"bind": "lan"}, {"api_key": "k"}, {"require_api_key": True},
                   {"cors_origins": ["http://a.b"]}, {"ollama_port": True}):  # fmt: skip
        assert needs_restart(s, s.model_copy(update=change)), change
    for change in ({"queue_size": 2}, {"idle_ttl_minutes": 5}, {"jit_load": False}, {"start_with_app": True}):
        assert not needs_restart(s, s.model_copy(update=change)), change


# ---- the key -------------------------------------------------------------------------------------


def test_the_key_is_hidden_shown_and_copied(make_env):
    env = make_env(ServerSettings(port=free_port(), api_key="hearth-abc", require_api_key=True))
    page = env.page
    assert (
        page.key_card.field.echoMode() == page.key_card.field.EchoMode.Password
        and page.key_card.field.displayText() != "hearth-abc"
    )
    page.key_card.show_button.click()
    assert page.key_card.field.displayText() == "hearth-abc" and page.key_card.show_button.text() == "Hide"
    page.key_card.copy_button.click()
    assert QGuiApplication.clipboard().text() == "hearth-abc"
    assert not page.key_card.make_button.isVisibleTo(page) and page.key_card.regenerate_button.isVisibleTo(page)


def test_regenerate_asks_saves_and_the_old_key_stops_working(make_env, qtbot):
    env = make_env(ServerSettings(port=free_port(), api_key="hearth-old", require_api_key=True))
    env.started(qtbot)
    url = env.api.status.url
    assert chat(url, "hearth-old").status_code == 200 and chat(url).status_code == 401

    env.answers.append(False)  # "no": nothing changes
    env.page.key_card.regenerate_button.click()
    assert not env.page.busy and env.settings.server.api_key == "hearth-old"

    env.answers.append(True)
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        env.page.key_card.regenerate_button.click()
    qtbot.waitUntil(lambda: not env.page.busy)
    key = env.store.load().server.api_key
    assert key != "hearth-old" and key.startswith("hearth-") and env.page.key_card.field.text() == key
    assert off_ui_thread(env.threads["restart"]) and env.api.status.running
    assert chat(url, "hearth-old").status_code == 401
    assert chat(url, key).status_code == 200


def test_make_a_key_when_there_is_none(make_env, qtbot):
    env = make_env()
    page = env.page
    assert page.key_card.make_button.isVisibleTo(page) and not page.key_card.copy_button.isVisibleTo(page)
    with qtbot.waitSignal(page.settings_saved, timeout=WAIT_MS):
        page.key_card.make_button.click()
    key = env.store.load().server.api_key
    assert key.startswith("hearth-") and page.key_card.field.text() == key
    assert not page.key_card.make_button.isVisibleTo(page) and page.key_card.show_button.isVisibleTo(page)
    assert env.threads["restart"] == []  # not required on loopback: nothing to restart


def test_a_new_key_keeps_edits_the_form_has_not_saved(make_env, qtbot):
    env = make_env()
    env.page.form.queue.setValue(3)  # edited, not saved
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        env.page.key_card.make_button.click()
    assert env.page.form.queue.value() == 3 and env.page.form.dirty
    assert env.store.load().server.queue_size == 8


def test_a_save_that_fails_says_why_and_the_page_stays_usable(make_env, qtbot, monkeypatch):
    env = make_env()

    def full_disk(settings):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(env.store, "save", full_disk)
    env.page.form.queue.setValue(3)
    with qtbot.waitSignal(env.page.save_failed, timeout=WAIT_MS) as failed:
        env.page.form.save_button.click()
    assert "No space left on device" in failed.args[0]
    assert "No space left" in env.page.status_card.error.text() and not env.page.busy
    assert env.page.form.save_button.isEnabled() and env.page.form.dirty


def test_the_key_lan_mode_makes_at_start_shows_on_the_page(make_env, qtbot):
    env = make_env(ServerSettings(port=free_port(), bind="lan"))
    env.started(qtbot)
    qtbot.waitUntil(lambda: env.page.key_card.field.text() != "", timeout=WAIT_MS)
    assert env.page.key_card.field.text() == env.store.load().server.api_key
    assert "Bearer" in env.page.snippet("curl") and env.page.key_card.field.text() in env.page.snippet("curl")


# ---- snippets ------------------------------------------------------------------------------------


def test_snippets_name_the_url_and_a_ready_model(make_env, qtbot):
    env = make_env()
    page = env.page
    qtbot.waitUntil(lambda: page.model_id == "alpha")  # the loaded model, from the library
    url = base_url(env.settings.server)
    for text in (page.snippet_card.curl.toPlainText(), page.snippet_card.python.toPlainText()):
        assert url in text and '"alpha"' in text and "Bearer" not in text
    env.started(qtbot)
    page.snippet_card.tabs.setCurrentWidget(page.snippet_card.python)
    page.snippet_card.copy_button.click()
    assert QGuiApplication.clipboard().text() == page.snippet_card.python.toPlainText()


def test_snippets_carry_the_key_when_one_is_required_masked_until_shown(make_env, qtbot):
    env = make_env(ServerSettings(port=free_port(), api_key="hearth-secret123", require_api_key=True))
    page = env.page
    qtbot.waitUntil(lambda: page.model_id == "alpha")
    assert (
        "hearth-secret123" not in page.snippet_card.curl.toPlainText()
        and "Bearer hearth-" in page.snippet_card.curl.toPlainText()
    )
    page.snippet_card.copy_button.click()  # copies the real key
    assert "Authorization: Bearer hearth-secret123" in QGuiApplication.clipboard().text()
    page.key_card.show_button.click()
    assert (
        "hearth-secret123" in page.snippet_card.curl.toPlainText()
        and 'api_key="hearth-secret123"' in page.snippet_card.python.toPlainText()
    )


def test_the_copied_snippets_run(make_env, qtbot, tmp_path):
    env = make_env(ServerSettings(port=free_port(), api_key="hearth-run", require_api_key=True))
    env.started(qtbot)
    qtbot.waitUntil(lambda: env.page.model_id == "alpha")
    script = tmp_path / "snippet.py"
    script.write_text(env.page.snippet("python"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if shutil.which("curl"):
        done = subprocess.run(["bash", "-c", env.page.snippet("curl")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and '"chat.completion"' in done.stdout, done.stdout + done.stderr


def test_no_ready_model_says_so():
    assert '"MODEL-ID"' in curl_snippet("http://127.0.0.1:1/v1", "")
    assert 'model="MODEL-ID"' in python_snippet("http://127.0.0.1:1/v1", "")


def test_snippets_follow_the_library(make_env, qtbot, tmp_path):
    env = make_env()
    qtbot.waitUntil(lambda: env.page.model_id == "alpha")
    assert env.host.submit(UnloadJob()).done.wait(5)
    path = tmp_path / "gamma.fake"
    path.write_bytes(b"fake")
    with qtbot.waitSignal(env.page.models_changed, timeout=WAIT_MS) as changed:
        env.library.add(name="gamma", format="fake", path=path, files=[ModelFile(path, 4)])
    assert changed.args == ["gamma"]  # nothing loaded: the most recently added or used
    assert '"gamma"' in env.page.snippet_card.curl.toPlainText()


# ---- the engine ----------------------------------------------------------------------------------


def test_the_page_says_when_the_engine_is_busy_with_the_chat(make_env, qtbot):
    env = make_env(tok_s=50)
    ready = "Engine: ready · alpha.fake · 256-token context for every route (chat, Responses, Messages)"
    assert env.page.status_card.engine.text() == ready
    request = GenerateRequest(prompt="hello there", sampling=SamplingParams(max_tokens=500))
    handle = env.host.submit(GenerateJob(request=request, source="chat"))
    try:
        qtbot.waitUntil(lambda: "busy with a chat reply" in env.page.status_card.engine.text(), timeout=WAIT_MS)
    finally:
        handle.cancel()
    qtbot.waitUntil(lambda: env.page.status_card.engine.text() == ready, timeout=WAIT_MS)


@pytest.mark.parametrize("source, text", [("api", "answering an API request"), ("cli", "a cli request")])
def test_other_work_on_the_engine_is_named(make_env, qtbot, source, text):
    env = make_env(tok_s=50)
    request = GenerateRequest(prompt="hello", sampling=SamplingParams(max_tokens=500))
    handle = env.host.submit(GenerateJob(request=request, source=source))
    try:
        qtbot.waitUntil(lambda: text in env.page.status_card.engine.text(), timeout=WAIT_MS)
    finally:
        handle.cancel()


def test_a_narrow_window_stacks_the_cards_instead_of_scrolling_sideways(make_env, qtbot, themed):
    page = make_env().page
    page.resize(704, 560)  # the page in a 900 x 600 window
    page.show()
    qtbot.waitExposed(page)
    qtbot.waitUntil(lambda: page.columns == 1)
    bar = page.page_scroll.horizontalScrollBar()
    qtbot.waitUntil(lambda: not bar.isVisible() or bar.maximum() == 0)
    assert (
        page.key_card.mapTo(page, page.key_card.rect().topLeft()).y()
        > page.form.mapTo(page, page.form.rect().topLeft()).y()
    )
    page.resize(1084, 760)  # 1280 x 800: side by side again
    qtbot.waitUntil(lambda: page.columns == 2)
    qtbot.wait(20)
    assert (
        page.key_card.mapTo(page, page.key_card.rect().topLeft()).x()
        > page.form.mapTo(page, page.form.rect().topLeft()).x()
    )


def test_the_page_shows_slots_in_use_and_the_queue(make_env, qtbot):
    env = make_env(tok_s=50)
    slots = env.page.status_card.slots
    # The fake runs one reply at a time.
    assert slots.isVisibleTo(env.page) and slots.text() == "Replies at once: 0 of 1 in use · 0 waiting"
    request = GenerateRequest(prompt="hello there", sampling=SamplingParams(max_tokens=500))
    handle = env.host.submit(GenerateJob(request=request, source="api"))
    try:
        qtbot.waitUntil(lambda: slots.text() == "Replies at once: 1 of 1 in use · 0 waiting", timeout=WAIT_MS)
    finally:
        handle.cancel()
    qtbot.waitUntil(lambda: slots.text() == "Replies at once: 0 of 1 in use · 0 waiting", timeout=WAIT_MS)
    assert env.host.submit(UnloadJob()).wait(5)
    qtbot.waitUntil(lambda: not slots.isVisibleTo(env.page), timeout=WAIT_MS)  # nothing loaded


def test_parallel_requests_is_edited_here_and_saved_to_settings_without_a_restart(make_env, qtbot):
    env = make_env()
    env.started(qtbot)
    form = env.page.form
    assert (form.parallel.minimum(), form.parallel.maximum()) == (0, 16) and form.parallel.value() == 0
    assert form.parallel.text() == "Auto (by memory)"  # the default: memory decides
    form.parallel.setValue(2)
    assert form.dirty
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        form.save_button.click()
    assert env.store.load().parallel_requests == 2 and env.settings.parallel_requests == 2
    assert env.threads["restart"] == [] and env.api.status.running  # it applies to the next load
    assert not form.dirty
    form.parallel.setValue(7)
    form.revert_button.click()
    assert form.parallel.value() == 2


def test_the_ollama_port_box_saves_restarts_and_the_card_shows_where_it_answers(make_env, qtbot):
    env = make_env()
    env.api.ollama_port = ollama = free_port()  # Ollama's 11434 in the app; a free one here
    env.started(qtbot)
    form, card = env.page.form, env.page.status_card
    assert not form.ollama_port.isChecked() and not card.ollama.isVisibleTo(env.page)  # off by default
    assert "11434" in form.ollama_port.text() and form.ollama_hint.isVisibleTo(form)
    form.ollama_port.setChecked(True)
    assert form.dirty
    with qtbot.waitSignal(env.page.settings_saved, timeout=WAIT_MS):
        form.save_button.click()
    qtbot.waitUntil(lambda: not env.page.busy, timeout=WAIT_MS)
    assert env.store.load().server.ollama_port and not form.dirty
    assert env.threads["restart"] and env.api.status.ollama_url == f"http://127.0.0.1:{ollama}"
    assert (
        card.ollama.isVisibleTo(env.page)
        and card.ollama.text() == f"Also answering as Ollama on http://127.0.0.1:{ollama}"
    )
    assert httpx.get(env.api.status.ollama_url + "/api/tags").status_code == 200


def test_an_ollama_port_in_use_is_said_on_the_card_while_the_server_runs(make_env, qtbot):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = make_env(ServerSettings(port=free_port(), ollama_port=True))
        env.api.ollama_port = taken.getsockname()[1]
        env.started(qtbot)
    card, main = env.page.status_card, env.settings.server.port
    assert card.state_label.text() == "● Running" and not card.error.isVisibleTo(env.page)
    assert card.ollama.isVisibleTo(env.page) and "is in use (is Ollama running?)" in card.ollama.text()
    assert card.ollama.text().endswith(f"Ollama's routes are still on port {main}")


def test_the_status_card_lists_the_model_the_api_serves_now(make_env, qtbot):
    env = make_env()
    strip = env.page.loaded_models
    assert strip.parentWidget() is env.page.status_card
    qtbot.waitUntil(lambda: [row.name.full_text() for row in strip.rows.values()] == [env.host.state.model.path.name])
    next(iter(strip.rows.values())).eject.click()
    qtbot.waitUntil(lambda: strip.rows == {} and env.host.state.model is None, timeout=WAIT_MS)


def test_start_and_stop_keep_the_keyboard_focus_on_the_card(make_env, qtbot):
    env = make_env()
    page, card = env.page, env.page.status_card
    page.show()
    qtbot.waitExposed(page)
    page.activateWindow()
    card.start_button.setFocus()
    qtbot.waitUntil(card.start_button.hasFocus)
    card.start_button.click()
    qtbot.waitUntil(lambda: env.api.status.running and not page.busy, timeout=WAIT_MS)
    assert card.stop_button.hasFocus()  # not the Port box below, where a key press would change it
    card.stop_button.click()
    qtbot.waitUntil(lambda: not env.api.status.running and not page.busy, timeout=WAIT_MS)
    assert card.start_button.hasFocus()
