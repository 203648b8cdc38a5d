"""`hearth remote add/ls/rm/refresh` and `hearth run` / `hearth chat` with a remote model id, as a user runs
them (subprocesses), against a second Hearth on loopback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.cli.helpers import ROOT, isolated_env
from tests.core.engines.remote.upstream import UPSTREAM_KEY, upstream_server


def hearth(*args: str, env: dict[str, str], input: str | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        input=input,
        timeout=timeout,
    )


@pytest.fixture
def env(tmp_path):
    # Never the machine's keyring, should `keyring` be installed: the fail backend means "use the file".
    return isolated_env(tmp_path, "http://127.0.0.1:9", PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")


def test_add_ls_run_chat_rm(tmp_path, env):
    with upstream_server(tmp_path / "up", script="hello from the box") as up:
        added = hearth("remote", "add", up.url + "/v1", "--name", "box", "--api-key", UPSTREAM_KEY, env=env)
        assert added.returncode == 0, added.stderr
        assert "Added box: Hearth" in added.stdout and "box/alpha  (context 256)" in added.stdout
        assert UPSTREAM_KEY not in added.stdout + added.stderr
        stored = tmp_path / "home" / "data" / "remotes.json"
        if os.name == "posix":
            assert stat.S_IMODE(os.stat(stored).st_mode) == 0o600
        assert json.loads(stored.read_text())["remotes"][0]["name"] == "box"

        listed = hearth("remote", "ls", env=env)
        assert listed.returncode == 0 and "box  " + up.url in listed.stdout and "key set" in listed.stdout
        assert "box/beta  (context 4,096)" in listed.stdout and UPSTREAM_KEY not in listed.stdout

        run = hearth("run", "box/alpha", "hi", "--max-tokens", "3", env=env)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "hello from the" and "3 tokens" in run.stderr and "length" in run.stderr
        assert up.engines[0].generations[-1].sampling.max_tokens == 3

        chat = hearth("chat", "box/alpha", env=env, input="hi\n/exit\n")
        assert chat.returncode == 0, chat.stderr
        assert "Chatting with box/alpha on " + up.url in chat.stderr and "hello from the box" in chat.stdout

        missing = hearth("run", "box/nope", "hi", env=env)
        assert missing.returncode == 1 and "nor a remote model" in missing.stderr

        logs = "".join(p.read_text() for p in (tmp_path / "home" / "logs").glob("*.log*"))
        assert "remote box added" in logs and UPSTREAM_KEY not in logs

        assert hearth("remote", "rm", "box", env=env).returncode == 0
        assert "No remotes" in hearth("remote", "ls", env=env).stdout
        gone = hearth("remote", "rm", "box", env=env)
        assert gone.returncode == 1 and "no remote named 'box'" in gone.stderr


def test_a_wrong_key_or_an_unreachable_url_is_a_clear_failure_and_saves_nothing(tmp_path, env):
    with upstream_server(tmp_path / "up") as up:
        wrong = hearth("remote", "add", up.url, "--api-key", "sk-wrong", env=env)
        url = up.url
    assert wrong.returncode == 1 and "refused the API key (401)" in wrong.stderr
    down = hearth("remote", "add", url, env=env, timeout=60)
    assert down.returncode == 1 and "could not reach " + url in down.stderr
    assert "No remotes" in hearth("remote", "ls", env=env).stdout


def test_the_key_can_come_from_stdin_and_refresh_reports_an_unreachable_remote(tmp_path, env):
    with upstream_server(tmp_path / "up") as up:
        added = hearth("remote", "add", up.url, "--name", "box", "--api-key", "-", env=env, input=UPSTREAM_KEY + "\n")
        assert added.returncode == 0, added.stderr
        assert hearth("remote", "refresh", "box", env=env).returncode == 0
    refreshed = hearth("remote", "refresh", "box", env=env)
    assert refreshed.returncode == 1 and "could not reach" in refreshed.stderr
    assert "UNREACHABLE" in hearth("remote", "ls", env=env).stdout


def test_hearth_serve_exposes_a_remote_the_user_chose_to(tmp_path, env):
    import re
    import signal
    import time

    import httpx

    with upstream_server(tmp_path / "up", script="hi from afar") as up:
        added = hearth("remote", "add", up.url, "--name", "box", "--api-key", UPSTREAM_KEY, "--expose", env=env)
        assert added.returncode == 0, added.stderr
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", "0"],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stderr is not None
            url, deadline = None, time.monotonic() + 120
            while url is None and time.monotonic() < deadline:
                line = proc.stderr.readline()
                if not line:
                    break
                if m := re.search(r"Hearth API on (http://\S+)/v1", line):
                    url = m.group(1)
            assert url, "hearth serve did not start"
            ids = [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]]
            assert "box/alpha" in ids
            body = {"model": "box/alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
            assert reply.status_code == 200, reply.text
            content = reply.json()["choices"][0]["message"]["content"]
            assert content and "hi from afar".startswith(content), content  # the remote's words, 3 tokens of them
            assert reply.json()["model"] == "box/alpha"
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
