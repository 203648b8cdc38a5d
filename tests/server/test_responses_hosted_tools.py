"""Responses API tools that only OpenAI's servers run (a remote MCP server, a code sandbox, images, the
computer and shell tools; file search runs here, tests/server/test_vector_stores.py): refused by name in
OpenAI's error shape, before anything reaches the engine, where they used to be dropped without a word and
the model answered as if they were not offered.
Web search, which Codex offers on every request, is still left out (tests/server/test_responses_fake.py)."""

from __future__ import annotations

import openai
import pytest

from app.server.responses.schemas import HOSTED_TOOLS
from tests.server.test_responses_fake import ASK, WEATHER

# One of each as clients send them.
HOSTED = {
    "mcp": {
        "type": "mcp",
        "server_label": "deepwiki",
        "server_url": "https://mcp.example/sse",
        "require_approval": "never",
    },
    "local_shell": {"type": "local_shell"},
    "code_interpreter": {"type": "code_interpreter", "container": {"type": "auto"}},
    "image_generation": {"type": "image_generation"},
    "computer_use_preview": {"type": "computer_use_preview", "display_width": 1024, "display_height": 768},
}


def test_every_hosted_type_has_an_example():
    assert set(HOSTED) == set(HOSTED_TOOLS)


@pytest.mark.parametrize("kind", sorted(HOSTED))
def test_a_hosted_tool_is_refused_by_name(make_server, kind):
    live = make_server(script="ok")
    r = live.client.post("/v1/responses", json={**ASK, "tools": [WEATHER, HOSTED[kind]]})
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "unsupported_tool"
    assert error["param"] == "tools[1]"
    assert repr(kind) in error["message"] and "runs no hosted tools" in error["message"]
    assert live.engines[0].generations == []  # refused before the model ran


def test_the_openai_client_raises_the_refusal(make_server):
    live = make_server(script="ok")
    client = openai.OpenAI(base_url=live.v1, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="alpha", input="hi", tools=[HOSTED["mcp"]])
    assert err.value.code == "unsupported_tool" and "'mcp'" in str(err.value)
    streamed = live.client.post("/v1/responses", json={**ASK, "stream": True, "tools": [HOSTED["code_interpreter"]]})
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "tools[0]"
