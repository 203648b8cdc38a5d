"""The Chat page on a FakeEngine host, for the chat tests: a harness that opens (and reopens, as after a
restart) a page on one database, the `make_chat` fixture (a plugin: see tests/conftest.py), and the
steps the tests share."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.core.chat.store import ChatStore
from app.core.engines.base import LoadSpec, SamplingParams
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import PreflightResult
from app.ui.chat import ChatPage
from app.ui.tasks import TaskRunner
from tests.fixtures.fake_engine import FakeEngine, registry_with_fake


def no_preflight(spec, fmt, plan_check):
    return PreflightResult()


class Harness:
    """A page on a fake host; `open_page()` again on the same DB simulates a restart."""

    def __init__(self, qtbot, db: Path, tok_s: float, n_ctx: int, **engine) -> None:
        self.qtbot, self.db = qtbot, db
        self.engines: list[FakeEngine] = []
        self.host = EngineHost(
            registry_with_fake(self.engines, tok_s=tok_s, **engine), preflight=no_preflight, name="test-chat-host"
        )
        self.pool = ThreadPoolExecutor(2)
        self.tasks = TaskRunner(self.pool)
        self.pages: list[ChatPage] = []
        self.stores: list[ChatStore] = []
        self.n_ctx = n_ctx
        self.tools = None  # McpServers for the pages opened next (tests/ui/test_chat_tools.py)
        self.documents = None  # Documents for the pages opened next (tests/ui/test_chat_documents.py)

    def load(self, n_ctx: int | None = None) -> None:
        self.host.load_sync(LoadSpec(path=Path("/nonexistent/model.fake"), n_ctx=n_ctx or self.n_ctx), "fake")
        page = self.pages[-1]
        self.qtbot.waitUntil(lambda: page.replies.reason == "", timeout=5000)

    def open_page(self) -> ChatPage:
        store = ChatStore(self.db)
        page = ChatPage(self.host, store, None, self.tasks, tools=self.tools, documents=self.documents)
        self.qtbot.addWidget(page)
        page.resize(1100, 750)
        page.show()
        self.pages.append(page)
        self.stores.append(store)
        return page

    def close_page(self, page: ChatPage) -> None:
        page.shutdown()
        self.stores[self.pages.index(page)].close()

    def close(self) -> None:
        # As the app quits: pages, then the task runner (a search still on the pool answers no one), then
        # the stores, so a late read fails on the pool, never in a test's teardown.
        for page in self.pages:
            page.shutdown()
        self.tasks.close()
        for store in self.stores:
            store.close()
        assert self.host.shutdown(5.0)
        self.pool.shutdown(wait=True)


@pytest.fixture
def make_chat(qtbot, tmp_path):
    made: list[Harness] = []

    def make(tok_s: float = 3000, n_ctx: int = 4096, load: bool = True, **engine) -> tuple[Harness, ChatPage]:
        """`engine`: more FakeEngine arguments (fail_on_load, script…)."""
        h = Harness(qtbot, tmp_path / "chats.sqlite3", tok_s, n_ctx, **engine)
        made.append(h)
        page = h.open_page()
        if load:
            h.load()
        return h, page

    yield make
    for h in made:
        h.close()


def limit_tokens(page: ChatPage, n: int | None) -> None:
    """Test setup, written straight to the store: the open chat (a new one if none) replies in `n` tokens."""
    if page.conv_id is None:
        conv_id = page.store.create_conversation().id
        page.refresh_conversations()
        page.open_conversation(conv_id)
    conv = page.store.update_settings(page.conv_id, sampling=SamplingParams(max_tokens=n))
    page.settings.set_conversation(conv)


def new_chat(qtbot, page: ChatPage) -> int:
    """New chat, as the button does it; returns its id once it is created and open."""
    with qtbot.waitSignal(page.conversation_opened, timeout=5000) as opened:
        page.new_conversation()
    return opened.args[0]


def switch_branch(qtbot, page: ChatPage, msg_id: int, step: int) -> None:
    """Switch the branch and wait until the thread shows the committed choice."""
    with qtbot.waitSignal(page.thread_view.changed, timeout=5000):
        page.thread_view.switch_branch(msg_id, step)


def reply_words(page: ChatPage) -> int:
    """Words in the reply being shown (0 until its row appears: the turn is saved off the UI thread)."""
    rows = page.thread_view.messages.rows
    return len(rows[-1].text.split()) if rows and rows[-1].message.role == "assistant" else 0


def send_and_wait(qtbot, page: ChatPage, text: str | None, timeout: int = 10_000):
    with qtbot.waitSignal(page.reply_finished, timeout=timeout) as got:
        assert page.replies.send(text)
    return got.args
