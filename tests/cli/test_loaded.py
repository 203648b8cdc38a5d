"""`hearth ps`, `hearth load`, `hearth unload` against a running server (the fake engine's), through its
model routes; and a clear error when no server answers."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from app.cli import main
from tests.server.conftest import make_server  # noqa: F401 (the fixture)


def _port(live) -> str:
    return str(urlparse(live.url).port)


def test_ps_load_unload_through_the_running_server(make_server, capsys):  # noqa: F811
    live = make_server(load="alpha")
    port = _port(live)
    assert main(["ps", "--port", port]) == 0
    assert capsys.readouterr().out.splitlines() == ["NAME", "alpha"]
    assert main(["load", "beta", "--port", port]) == 0
    assert "Loaded beta." in capsys.readouterr().out
    assert live.host.state.model is not None and live.host.state.model.path.name.startswith("beta")
    assert main(["unload", "alpha", "--port", port]) == 1  # not the loaded one: the server's message
    assert "alpha is not loaded" in capsys.readouterr().err
    assert main(["unload", "--all", "--port", port]) == 0
    assert "Unloaded beta." in capsys.readouterr().out
    assert live.host.state.model is None
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
