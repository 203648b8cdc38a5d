"""Adding, editing and removing a server of mcp.json from the app: the same file and rules as an import,
secrets kept out of the file and never shown back, other programs' fields kept, bad input refused by name
with nothing changed."""

from __future__ import annotations

import json
import stat

import pytest

from app.core.mcp.config import McpConfigError, load_config, parse_config, save_config
from app.core.mcp.editing import (
    ServerDraft,
    draft_of,
    format_pairs,
    parse_pairs,
    remove_server,
    save_server,
)
from app.core.mcp.secrets import HIDDEN, SecretStore, with_secrets


@pytest.fixture
def store(tmp_path) -> SecretStore:
    return SecretStore(tmp_path / "mcp-secrets.json")


def servers(tmp_path):
    return load_config(tmp_path / "mcp.json").servers


def test_a_stdio_server_is_added_with_its_secret_in_the_store_not_the_file(tmp_path, store):
    draft = ServerDraft(
        name="files", command="npx", args=["-y", "server-fs", "/tmp"], env={"API_KEY": "k-1", "MODE": "ro"}
    )
    written = save_server(tmp_path, draft, store)
    text = (tmp_path / "mcp.json").read_text()
    assert (
        "k-1" not in text and '"MODE": "ro"' in text and stat.S_IMODE((tmp_path / "mcp.json").stat().st_mode) == 0o600
    )
    entry = servers(tmp_path)["files"]
    assert entry == written and entry.command_line() == "npx -y server-fs /tmp"
    assert with_secrets("files", entry, store).env == {"API_KEY": "k-1", "MODE": "ro"}


def test_an_http_server_is_added_with_its_authorization_header_kept_secret(tmp_path, store):
    save_server(
        tmp_path,
        ServerDraft(
            name="search", transport="http", url="https://mcp.example.com/mcp", headers={"Authorization": "Bearer s"}
        ),
        store,
    )
    entry = servers(tmp_path)["search"]
    assert entry.transport == "http" and "Bearer s" not in (tmp_path / "mcp.json").read_text()
    assert with_secrets("search", entry, store).headers == {"Authorization": "Bearer s"}


def test_editing_shows_secrets_hidden_and_hidden_saved_back_keeps_them(tmp_path, store):
    save_server(tmp_path, ServerDraft(name="gh", command="docker", env={"GITHUB_TOKEN": "ghp_1", "LOG": "info"}), store)
    draft = draft_of("gh", servers(tmp_path)["gh"])
    assert draft.env == {"GITHUB_TOKEN": HIDDEN, "LOG": "info"}  # the editor never holds the secret
    renamed = ServerDraft(name="github", command="docker", args=["run"], env={**draft.env, "LOG": "debug"})
    save_server(tmp_path, renamed, store, original="gh")
    assert list(servers(tmp_path)) == ["github"]
    assert with_secrets("github", servers(tmp_path)["github"], store).env == {"GITHUB_TOKEN": "ghp_1", "LOG": "debug"}
    # A new value replaces the stored one.
    save_server(
        tmp_path, ServerDraft(name="github", command="docker", env={"GITHUB_TOKEN": "ghp_2"}), store, original="github"
    )
    assert with_secrets("github", servers(tmp_path)["github"], store).env == {"GITHUB_TOKEN": "ghp_2"}


def test_a_secret_typed_into_the_file_by_hand_moves_to_the_store_when_edited(tmp_path, store):
    raw = {"mcpServers": {"x": {"command": "run", "env": {"API_KEY": "plain"}, "autoApprove": ["read"]}}}
    save_config(tmp_path / "mcp.json", parse_config(json.dumps(raw), "t"))
    draft = draft_of("x", servers(tmp_path)["x"])
    assert draft.env == {"API_KEY": HIDDEN}
    save_server(tmp_path, draft, store, original="x")
    entry = servers(tmp_path)["x"]
    assert (
        "plain" not in (tmp_path / "mcp.json").read_text() and with_secrets("x", entry, store).env["API_KEY"] == "plain"
    )
    assert entry.model_extra == {"autoApprove": ["read"]}  # another program's field, kept


def test_order_and_the_other_servers_are_kept(tmp_path, store):
    for name in ("a", "b", "c"):
        save_server(tmp_path, ServerDraft(name=name, command=name), store)
    save_server(tmp_path, ServerDraft(name="B", transport="http", url="http://127.0.0.1:9/mcp"), store, original="b")
    assert list(servers(tmp_path)) == ["a", "B", "c"] and servers(tmp_path)["B"].transport == "http"


@pytest.mark.parametrize(
    ("draft", "why"),
    [
        (ServerDraft(name="../x", command="a"), "a server's name is"),
        (ServerDraft(name="a", command="other"), "already a server named 'a'"),
        (ServerDraft(name="n", command="  "), "needs its command"),
        (ServerDraft(name="n", transport="http"), "needs its url"),
        (ServerDraft(name="n", transport="http", url="file:///etc/passwd"), "http:// or https://"),
        (ServerDraft(name="n", command="a", env={"API_KEY": HIDDEN}), "API_KEY: type its value"),
    ],
)
def test_what_cannot_be_saved_is_refused_by_name_and_nothing_changes(tmp_path, store, draft, why):
    save_server(tmp_path, ServerDraft(name="a", command="a"), store)
    before = (tmp_path / "mcp.json").read_text()
    with pytest.raises(McpConfigError, match=why):
        save_server(tmp_path, draft, store)
    assert (tmp_path / "mcp.json").read_text() == before


def test_removing_a_server_forgets_the_secrets_only_it_used(tmp_path, store):
    save_server(tmp_path, ServerDraft(name="a", command="a", env={"API_KEY": "ka"}), store)
    save_server(tmp_path, ServerDraft(name="b", command="b", env={"API_KEY": "kb"}), store)
    remove_server(tmp_path, "a", store)
    assert list(servers(tmp_path)) == ["b"]
    assert json.loads(store.file.read_text()) == {"mcp/b/env/API_KEY": "kb"}
    with pytest.raises(McpConfigError, match="no server named 'a'"):
        remove_server(tmp_path, "a", store)


def test_an_edit_that_drops_a_secret_forgets_it(tmp_path, store):
    save_server(tmp_path, ServerDraft(name="a", command="a", env={"API_KEY": "ka"}), store)
    save_server(tmp_path, ServerDraft(name="a", command="a"), store, original="a")
    assert json.loads(store.file.read_text()) == {}


def test_pairs_read_one_a_line_and_a_line_that_is_not_one_is_named():
    assert parse_pairs("A=1\n\n B = two=2 \n", "=", "Environment") == {"A": "1", "B": "two=2"}
    assert parse_pairs("Authorization: Bearer x:y", ":", "Headers") == {"Authorization": "Bearer x:y"}
    assert format_pairs({"A": "1"}, "=") == "A=1" and format_pairs({"X-Team": "a"}, ":") == "X-Team: a"
    with pytest.raises(McpConfigError, match="Environment, line 2: write it as NAME=value"):
        parse_pairs("A=1\njust words", "=", "Environment")
