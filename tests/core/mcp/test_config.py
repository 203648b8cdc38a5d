"""mcp.json: the format LM Studio, Cursor and Claude Desktop write, read as it is; what Hearth cannot honour
refused by name; secrets kept out of the file (in the keyring or a 0600 file) and put back only to start."""

from __future__ import annotations

import json
import stat

import pytest

from app.core.mcp.config import McpConfigError, known_config_files, load_config, parse_config, save_config
from app.core.mcp.secrets import HIDDEN, SecretStore, keep_secrets, shown, with_secrets

CLAUDE = {
    "mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
        "github": {
            "command": "docker",
            "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret", "LOG_LEVEL": "info"},
        },
        "search": {
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer sk-live", "X-Team": "a"},
            "autoApprove": ["find"],
        },
    },
    "globalShortcut": "Ctrl+Space",
}


def test_claude_desktops_file_reads_as_it_is():
    config = parse_config(json.dumps(CLAUDE), "claude_desktop_config.json")
    assert list(config.servers) == ["files", "github", "search"]
    files, search = config.servers["files"], config.servers["search"]
    assert files.transport == "stdio" and files.command_line() == "npx -y @modelcontextprotocol/server-filesystem /tmp"
    assert search.transport == "http" and search.command_line() == "connect to https://mcp.example.com/mcp"
    assert search.model_extra == {"autoApprove": ["find"]}  # another program's field, kept


@pytest.mark.parametrize(
    ("servers", "why"),
    [
        ({"x": {"command": "a", "url": "http://b"}}, "either a command .* or a url"),
        ({"x": {}}, "either a command"),
        ({"x": {"url": "http://b/sse", "type": "sse"}}, "SSE servers are not supported"),
        ({"x": {"url": "file:///etc/passwd"}}, "http:// or https://"),
        ({"../x": {"command": "a"}}, "is not a server name"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(servers, why):
    with pytest.raises(McpConfigError, match=why):
        parse_config(json.dumps({"mcpServers": servers}), "mcp.json")


def test_a_file_that_is_not_a_config_says_so(tmp_path):
    with pytest.raises(McpConfigError, match="is not JSON"):
        parse_config("{", "a.json")
    with pytest.raises(McpConfigError, match='no "mcpServers" object'):
        parse_config('{"mcpServers": []}', "a.json")
    assert load_config(tmp_path / "missing.json").servers == {}


def test_secrets_leave_the_file_and_come_back_only_to_start(tmp_path):
    store = SecretStore(tmp_path / "mcp-secrets.json")
    kept = keep_secrets(parse_config(json.dumps(CLAUDE), "c.json"), store)
    save_config(tmp_path / "mcp.json", kept)
    written = (tmp_path / "mcp.json").read_text()
    assert "ghp_secret" not in written and "sk-live" not in written
    assert '"LOG_LEVEL": "info"' in written and '"X-Team": "a"' in written  # not secrets: left as they are
    for path in (tmp_path / "mcp.json", tmp_path / "mcp-secrets.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_config(tmp_path / "mcp.json")
    github = with_secrets("github", again.servers["github"], store)
    assert github.env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret", "LOG_LEVEL": "info"}
    assert with_secrets("search", again.servers["search"], store).headers["Authorization"] == "Bearer sk-live"
    # Shown (CLI, log) with secrets hidden, references as they are; a lost secret is a clear error.
    assert shown(github)["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": HIDDEN, "LOG_LEVEL": "info"}
    assert "sk-live" not in json.dumps(shown(again.servers["search"]))
    with pytest.raises(McpConfigError, match="secret for env GITHUB_PERSONAL_ACCESS_TOKEN is not in"):
        with_secrets("github", again.servers["github"], SecretStore(tmp_path / "other.json"))


def test_a_keyring_takes_the_secrets_when_there_is_one(tmp_path):
    class Keyring:
        def __init__(self):
            self.kept = {}

        def get(self, name):
            return self.kept.get(name)

        def set(self, name, value):
            self.kept[name] = value

    keyring = Keyring()
    store = SecretStore(tmp_path / "mcp-secrets.json", keyring)  # type: ignore[arg-type]
    kept = keep_secrets(parse_config(json.dumps(CLAUDE), "c.json"), store)
    assert keyring.kept == {
        "mcp/github/env/GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret",
        "mcp/search/headers/Authorization": "Bearer sk-live",
    }
    assert not (tmp_path / "mcp-secrets.json").exists() and store.where == "the system keyring"
    assert with_secrets("github", kept.servers["github"], store).env["GITHUB_PERSONAL_ACCESS_TOKEN"] == "ghp_secret"


def test_other_programs_files_are_found_for_import(tmp_path):
    lmstudio = tmp_path / ".lmstudio" / "mcp.json"
    lmstudio.parent.mkdir()
    lmstudio.write_text('{"mcpServers": {}}')
    claude = tmp_path / ".config" / "Claude" / "claude_desktop_config.json"
    claude.parent.mkdir(parents=True)
    claude.write_text("{}")
    assert known_config_files(tmp_path) == [("LM Studio", lmstudio), ("Claude Desktop", claude)]
