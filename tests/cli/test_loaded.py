"""`hearth ps`, `hearth load`, `hearth unload` against a running server (the fake engine's), through its
model routes; and a clear error when no server answers."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from app.cli import main
from tests.server.conftest import make_server  # noqa: F401 (the fixture)


def _port(live) -> str:
    return str(urlparse(live.url).port)


def _table(out: str) -> list[list[str]]:
    return [[c for c in line.split("  ") if c.strip()] for line in out.splitlines()]


def test_ps_load_unload_through_the_running_server(make_server, capsys):  # noqa: F811
    live = make_server(load="alpha", idle_ttl_s=300)
    port = _port(live)
    assert main(["ps", "--port", port]) == 0
    rows = _table(capsys.readouterr().out)
    assert [c.strip() for c in rows[0]] == ["NAME", "MEMORY", "CONTEXT", "UNTIL"]
    assert [c.strip() for c in rows[1]][:3] == ["alpha", "-", "256"]
    assert rows[1][3].strip() in ("in 5 min", "in 4 min")  # idle: counting down from the server's 300 s
    assert main(["load", "beta", "--pin", "--port", port]) == 0
    assert "Loaded beta." in capsys.readouterr().out
    assert main(["ps", "--port", port]) == 0
    rows = _table(capsys.readouterr().out)
    assert sorted((r[0].strip(), r[-1].strip()[:3]) for r in rows[1:]) == [("alpha", "in "), ("beta", "pin")]
    assert main(["load", "alpha", "--ttl", "-1", "--port", port]) == 0  # loaded already: only how long it stays
    capsys.readouterr()
    assert main(["ps", "--port", port]) == 0
    assert ["alpha", "forever"] in [[r[0].strip(), r[-1].strip()] for r in _table(capsys.readouterr().out)]
    assert main(["unload", "alpha", "--port", port]) == 0
    assert main(["unload", "alpha", "--port", port]) == 1  # no longer loaded: the server's message
    assert "alpha is not loaded" in capsys.readouterr().err
    assert main(["unload", "--all", "--port", port]) == 1  # a pinned model stays: the server says how to unpin it
    assert "beta.fake is pinned" in capsys.readouterr().err and live.host.residents() != []
    assert main(["unload", "--all", "--unpin", "--port", port]) == 0
    assert "Unloaded beta." in capsys.readouterr().out
    assert live.host.residents() == []
    assert main(["ps", "--port", port]) == 0
    assert "No model is loaded." in capsys.readouterr().out
    assert main(["load", "no-such-model", "--port", port]) == 1
    assert "no-such-model" in capsys.readouterr().err


def test_no_server_is_a_clear_error(capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    assert main(["ps", "--port", port]) == 1
    assert "no Hearth server answers" in capsys.readouterr().err
    assert main(["unload", "--port", port]) == 2  # neither a model nor --all
