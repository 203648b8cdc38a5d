"""The Server page's "Connect a tool" card over a real ApiService and a FakeEngine host: the tool picks the
configuration and where it goes, Copy carries the real key while the page masks it, Test runs off the UI
thread and shows what came back, and the page warns when the loaded context is too small for an agent."""

from __future__ import annotations

import json
import threading
import tomllib

import pytest
from PySide6.QtGui import QGuiApplication

from app.core.connect import AGENT_MIN_CONTEXT, ProbeResult, Target, probe_route
from app.core.engines.base import LoadSpec
from app.core.settings import ServerSettings
from app.ui.server_model import base_url
from tests.core.connect.parse import exports, fields
from tests.ui import test_server_page
from tests.ui.test_server_page import WAIT_MS, free_port

make_env = test_server_page.make_env  # the Server page's fixture: a real ApiService over a FakeEngine host


def shown(card, index: int | None = None) -> str:
    return card.tabs.widget(card.tabs.currentIndex() if index is None else index).toPlainText()


def choose(card, tool: str) -> None:
    card.tool.setCurrentIndex(card.tool.findData(tool))


def test_switching_the_tool_changes_the_configuration_and_where_it_goes(make_env, qtbot):
    env = make_env()
    page, card = env.page, env.page.connect_card
    qtbot.waitUntil(lambda: page.model_id == "alpha" and page.model_context == 256)  # loaded with n_ctx 256
    url = base_url(env.settings.server)

    choose(card, "codex")
    assert [card.tabs.tabText(i) for i in range(card.tabs.count())] == ["config.toml", "Shell"]
    assert "~/.codex/config.toml" in card.where.text()
    config = tomllib.loads(shown(card, 0))
    assert config["model"] == "alpha" and config["model_context_window"] == 256
    assert config["model_providers"]["hearth"]["base_url"] == url
    card.tabs.setCurrentIndex(1)
    assert card.where.text().startswith("Goes in: your shell")

    choose(card, "claude-code")
    assert [card.tabs.tabText(i) for i in range(card.tabs.count())] == ["Shell", "settings.json"]
    env_vars = exports(shown(card, 0))
    assert env_vars["ANTHROPIC_BASE_URL"] == url.removesuffix("/v1") and env_vars["ANTHROPIC_MODEL"] == "alpha"
    assert "Claude Code adds /v1/messages" in card.note.text()


def test_the_ollama_tools_are_offered_with_the_root_url_and_the_listed_model(make_env, qtbot):
    env = make_env()
    page, card = env.page, env.page.connect_card
    qtbot.waitUntil(lambda: page.model_id == "alpha")
    root = base_url(env.settings.server).removesuffix("/v1")
    offered = [card.tool.itemData(i) for i in range(card.tool.count())]
    assert offered[-5:] == ["home-assistant", "vscode-copilot", "open-webui-ollama", "obsidian", "ollama-python"]

    choose(card, "home-assistant")
    assert [card.tabs.tabText(i) for i in range(card.tabs.count())] == ["This computer", "Docker"]
    assert "Add integration → Ollama" in card.where.text()
    shown_fields = fields(shown(card, 0))
    assert shown_fields["URL"] == root and shown_fields["Model"] == "alpha:latest"
    assert "LAN mode" in card.note.text()

    choose(card, "vscode-copilot")
    assert json.loads(shown(card, 0)) == {"github.copilot.chat.byok.ollamaEndpoint": root}
    assert "sends no API key" in card.note.text()


def test_copy_puts_the_real_key_on_the_clipboard_while_the_page_masks_it(make_env, qtbot):
    env = make_env(ServerSettings(port=free_port(), api_key="hearth-connect-secret9", require_api_key=True))
    page, card = env.page, env.page.connect_card
    qtbot.waitUntil(lambda: page.model_id == "alpha")
    choose(card, "codex")
    card.tabs.setCurrentIndex(1)
    assert "hearth-connect-secret9" not in shown(card) and "hearth-•" in shown(card)
    card.copy_button.click()
    assert exports(QGuiApplication.clipboard().text()) == {"HEARTH_API_KEY": "hearth-connect-secret9"}
    page.key_card.show_button.click()
    assert exports(shown(card)) == {"HEARTH_API_KEY": "hearth-connect-secret9"}


@pytest.mark.parametrize(
    "tool, api, path",
    [
        ("continue", "Chat Completions", "/v1/chat/completions"),
        ("codex", "Responses", "/v1/responses"),
        ("claude-code", "Messages", "/v1/messages"),
        ("home-assistant", "Ollama chat", "/api/chat"),
        ("ollama-python", "Ollama chat", "/api/chat"),
    ],
)
def test_test_sends_the_tools_route_to_the_running_server_off_the_ui_thread(make_env, qtbot, tool, api, path):
    env = make_env(ServerSettings(port=free_port(), api_key="hearth-connect-test", require_api_key=True))
    env.started(qtbot)
    card = env.page.connect_card
    qtbot.waitUntil(lambda: env.page.model_id == "alpha")
    threads: list[threading.Thread] = []

    def traced(*args):
        threads.append(threading.current_thread())
        return probe_route(*args)

    card._probe = traced
    choose(card, tool)
    card.test_button.click()
    assert not card.test_button.isEnabled() and card.result.text().startswith(f"Testing {api}")
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    assert card.result.text().startswith(f"{api}: OK — “"), card.result.text()
    assert threads and all(t is not threading.main_thread() for t in threads)
    # The server logs a request once its body has gone out, which can be after the client has read it all.
    qtbot.waitUntil(lambda: bool(env.api.log.items()), timeout=WAIT_MS)
    logged = env.api.log.items()
    assert logged[-1].path == path and logged[-1].status == 200  # the real key went with it


def test_an_ollama_tools_test_for_a_model_the_server_lacks_shows_ollamas_error(make_env, qtbot):
    env = make_env()
    env.started(qtbot)
    card = env.page.connect_card
    qtbot.waitUntil(lambda: env.page.model_id == "alpha")
    card.show_target(Target(base_url(env.settings.server), model="no-such-model"), reveal=False)
    choose(card, "obsidian")
    card.test_button.click()
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    assert card.result.text().startswith("Ollama chat: 404 — "), card.result.text()
    assert "'no-such-model'" in card.result.text()
    qtbot.waitUntil(lambda: bool(env.api.log.items()), timeout=WAIT_MS)
    assert env.api.log.items()[-1].path == "/api/chat"


def test_test_with_the_server_stopped_says_nothing_listens(make_env, qtbot):
    env = make_env()
    card = env.page.connect_card
    choose(card, "openai-python")  # both of its routes are tried
    card.test_button.click()
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    lines = card.result.text().splitlines()
    root = base_url(env.settings.server).removesuffix("/v1")
    assert lines == [
        f"Chat Completions: failed — nothing is listening at {root}: start the server first",
        f"Responses: failed — nothing is listening at {root}: start the server first",
    ]
    choose(card, "vscode-copilot")  # both APIs it calls: Ollama's to find the models, /v1 to chat
    card.test_button.click()
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    assert card.result.text().splitlines() == [
        f"Ollama chat: failed — nothing is listening at {root}: start the server first",
        f"Chat Completions: failed — nothing is listening at {root}: start the server first",
    ]


def test_an_error_in_the_apis_shape_is_shown_and_a_late_answer_for_another_tool_is_dropped(make_env, qtbot):
    env = make_env()
    card = env.page.connect_card
    release = threading.Event()

    def probe(url, key, model, route):
        release.wait(10)
        return ProbeResult(route, False, 401, "invalid x-api-key (authentication_error)")

    card._probe = probe
    choose(card, "anthropic-python")
    card.test_button.click()
    release.set()
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    assert card.result.text() == "Messages: 401 — invalid x-api-key (authentication_error)"

    release.clear()
    card.test_button.click()
    choose(card, "zed")  # the answer that comes now is for the tool no longer shown
    release.set()
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    assert card.result.text() == ""


def test_a_small_loaded_context_warns_and_a_large_one_does_not(make_env, qtbot):
    env = make_env()
    warning = env.page.status_card.context_warning
    assert warning.isVisibleTo(env.page) and "256 tokens" in warning.text() and "Claude Code" in warning.text()
    beta = env.library.find("beta").path
    env.host.load_sync(LoadSpec(path=beta, n_ctx=AGENT_MIN_CONTEXT * 2), "fake")
    qtbot.waitUntil(lambda: not warning.isVisibleTo(env.page), timeout=WAIT_MS)
    # The card follows the newly loaded model and its context.
    qtbot.waitUntil(lambda: env.page.model_id == "beta", timeout=WAIT_MS)
    choose(env.page.connect_card, "codex")
    assert tomllib.loads(shown(env.page.connect_card, 0))["model_context_window"] == AGENT_MIN_CONTEXT * 2
