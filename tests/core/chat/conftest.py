"""Fixtures for the chat-store tests."""

from __future__ import annotations

import pytest

from app.core.chat.store import ChatStore
from tests.core.chat.tool_fixtures import make_host, servers  # noqa: F401 (fixtures for the tool tests)


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "chats.sqlite3"


@pytest.fixture
def store(db_path):
    s = ChatStore(db_path)
    yield s
    s.close()
