"""security.md T42: every route walked with hostile input, behind the key as in LAN mode (FakeEngine). A list
of hostile bodies (truncated JSON, wrong types, 10,000-deep nesting, huge numbers, lone surrogates, null
bytes, no body, a wrong content type) against every POST route, each field of a valid body replaced by
hostile values, and schemathesis's negative mode (bodies, paths and headers that break the schema) on every
operation: never a 5xx, every error in its route's shape, and the server still serving afterwards."""

from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from app.server.errors import is_ollama
from app.server.security import Policy

KEY = "hearth-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
MESSAGES = [{"role": "user", "content": "hi"}]
# A valid body for each POST route: the base the field-by-field replacements start from.
VALID = {
    "/v1/chat/completions": {"model": "alpha", "messages": MESSAGES, "max_tokens": 3},
    "/v1/completions": {"model": "alpha", "prompt": "hi", "max_tokens": 3},
    "/v1/embeddings": {"model": "alpha", "input": "hi"},
    "/v1/responses": {"model": "alpha", "input": "hi", "max_output_tokens": 3},
    "/v1/messages": {"model": "alpha", "messages": MESSAGES, "max_tokens": 3},
    "/v1/messages/count_tokens": {"model": "alpha", "messages": MESSAGES},
    "/models/load": {"model": "alpha"},  # the loaded one: answered at once
    "/models/unload": {"model": "beta"},  # not loaded: a 400, so the walk never unloads alpha
    "/api/v1/models/load": {"model": "alpha"},
    "/api/v1/models/unload": {"instance_id": "beta"},
    "/v1/rerank": {"model": "alpha", "query": "hi", "documents": ["hi", {"text": "ho"}]},
    "/rerank": {"model": "alpha", "query": "hi", "documents": ["hi"]},
    "/v1/reranking": {"model": "alpha", "query": "hi", "documents": ["hi"]},
    "/reranking": {"model": "alpha", "query": "hi", "documents": ["hi"]},
    "/api/chat": {"model": "alpha", "messages": MESSAGES, "options": {"num_predict": 3}, "stream": False},
    "/api/generate": {"model": "alpha", "prompt": "hi", "options": {"num_predict": 3}, "stream": False},
    "/api/embed": {"model": "alpha", "input": "hi"},
    "/api/embeddings": {"model": "alpha", "prompt": "hi"},
    "/api/show": {"model": "alpha"},
    "/api/pull": {"model": "hf.co/org/Repo:Q8_0", "stream": False},  # no download queue here: a 501
    "/api/copy": {"source": "alpha", "destination": "gamma"},
    "/api/create": {"model": "gamma"},
    "/api/push": {"model": "alpha"},
    # Without documents on this server these answer 400; tests/server/test_vector_stores.py walks them with.
    "/v1/files": {"purpose": "assistants"},
    "/v1/vector_stores": {"name": "x"},
    "/v1/vector_stores/{vector_store_id}": {"name": "x"},
    "/v1/vector_stores/{vector_store_id}/files": {"file_id": "file-x"},
    "/v1/vector_stores/{vector_store_id}/files/{file_id}": {"attributes": {}},
    "/v1/vector_stores/{vector_store_id}/file_batches": {"file_ids": ["file-x"]},
    "/v1/vector_stores/{vector_store_id}/search": {"query": "x"},
}
# Ollama's routes Hearth does not serve (or, /api/pull, cannot without a download queue): a clear 501, whatever
# the body; never any other 5xx.
NOT_SERVED = {"/api/copy", "/api/create", "/api/push", "/api/pull"}
# Hostile bodies that are valid requests on a route: a model and fields it ignores (Ollama's routes ignore
# unknown fields, as Ollama does, and a chat or generate with nothing to say loads the model); answered.
# Ollama's routes read a body as JSON whatever its content type, as Ollama does (its examples are `curl -d`).
VALID_THERE = {
    (path, what)
    for path in ("/api/show", "/api/embeddings", "/api/chat", "/api/generate")
    for what in ("an infinite number", "no content type", "text/plain")
}
DEEP = 10_000
# Whole bodies: (what, bytes, content type).
HOSTILE_BODIES = [
    ("empty", b"", "application/json"),
    ("no content type", b'{"model": "alpha"}', None),
    ("text/plain", json.dumps(VALID["/v1/chat/completions"]).encode(), "text/plain"),
    ("form", b"model=alpha&messages=hi", "application/x-www-form-urlencoded"),
    ("truncated", b'{"model": "alpha", "messages": [{"role": "user", "content": "h', "application/json"),
    ("not JSON", b"hello", "application/json"),
    ("null", b"null", "application/json"),
    ("a list", b"[1, 2, 3]", "application/json"),
    ("a string", b'"\\ud800"', "application/json"),
    ("a huge number", b"1" + b"0" * 5000, "application/json"),
    ("an infinite number", b'{"model": "alpha", "max_tokens": 1e999, "temperature": NaN}', "application/json"),
    ("deep lists", b"[" * DEEP + b"]" * DEEP, "application/json"),
    ("deep objects", b'{"a": ' * DEEP + b"1" + b"}" * DEEP, "application/json"),
    ("null bytes", b"\x00" * 64, "application/json"),
    ("invalid UTF-8", b'{"model": "\xff\xfe\xed\xa0\x80"}', "application/json"),
    ("wrong types", b'{"model": 5, "messages": "hi", "input": 7, "prompt": {}, "max_tokens": "x"}', "application/json"),
]


# JSON texts each field of a valid body is replaced with, one field at a time (written as text: a lone
# surrogate escaped as a client would send it, nesting deeper than Python's encoder allows).
HOSTILE_VALUES = [
    "null",
    '""',
    '"\\ud800"',
    '"a\\u0000b"',
    "-1",
    "1" + "0" * 400,
    str(2**63),
    "1e308",
    "-1e999",
    "[]",
    "{}",
    "[null]",
    '{"\\udfff": 1}',
    "[" * 5_000 + "1" + "]" * 5_000,
    '"' + "x" * 100_000 + '"',
]


def _shaped(path: str, response: httpx.Response) -> None:
    """No 5xx (but the 501 of a route Hearth does not serve), and an error is in the shape of the route's API."""
    allowed = 502 if path in NOT_SERVED else 500
    assert response.status_code < allowed, (path, response.status_code, response.text[:500])
    if response.status_code < 400:
        return
    body = response.json()
    if is_ollama(path):
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
    elif path.startswith("/v1/messages"):
        assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}, body
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body


def _with(valid: dict, field: str, value: str) -> bytes:
    """`valid` with `field` set to the JSON text `value` (written last: JSON's last duplicate key wins)."""
    return (json.dumps(valid)[:-1] + f", {json.dumps(field)}: {value}}}").encode()


@pytest.fixture
def live(make_server):
    return make_server(policy=Policy.of(api_key=KEY), n_ctx=4096, script="ok fine")


def test_t42_hostile_bodies_on_every_post_route_are_4xx_in_its_shape(live):
    posts = [path for path, item in live.client.get("/openapi.json").json()["paths"].items() if "post" in item]
    assert sorted(posts) == sorted(VALID)  # a new POST route needs a valid body here
    for path in posts:
        for what, content, content_type in HOSTILE_BODIES:
            headers = {"content-type": content_type} if content_type else {}
            response = live.client.post(path, content=content, headers=headers)
            _shaped(path, response)
            assert response.status_code >= 400 or (path, what) in VALID_THERE, (path, what, response.status_code)
    for encoding in ("utf-16", "utf-8-sig"):  # JSON's other encodings (RFC 8259 allows them in): read as JSON
        content = json.dumps(VALID["/v1/chat/completions"]).encode(encoding)
        response = live.client.post("/v1/chat/completions", content=content, headers=JSON)
        assert response.status_code == 200, response.text
    assert live.client.post("/v1/chat/completions", json=VALID["/v1/chat/completions"]).status_code == 200


def _fields(spec: dict, path: str) -> list[str]:
    """The top-level fields of a POST route's body, from its schema in /openapi.json."""
    ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return list(spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"])


def test_t42_each_field_of_every_body_replaced_with_hostile_values_is_never_a_5xx(live):
    spec = live.client.get("/openapi.json").json()
    statuses: dict[int, int] = {}
    for path, valid in VALID.items():
        if "requestBody" not in spec["paths"][path]["post"]:
            continue  # a route that reads no body (Ollama's that Hearth does not serve)
        fields = _fields(spec, path)
        assert set(valid) <= set(fields)
        for field in fields:
            for value in HOSTILE_VALUES:
                response = live.client.post(path, content=_with(valid, field, value), headers=JSON)
                _shaped(path, response)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
    assert statuses.get(400, 0) > 1000, statuses  # the replacements were read, and refused
    assert live.client.post("/v1/messages", json=VALID["/v1/messages"]).status_code == 200


EXAMPLES = 15  # per operation, derandomized: the same cases every run, in about 10 s on two cores


def _walk(operation) -> int:
    """Runs schemathesis's cases for one operation: bodies that break the schema where it takes one, valid
    input otherwise (a GET's only parameter is a path string, which nothing breaks). Returns how many ran."""
    mode = GenerationMode.NEGATIVE if len(operation.body) else GenerationMode.POSITIVE
    ran = 0

    @given(case=operation.as_strategy(mode, headers=AUTH))
    @settings(
        max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case) -> None:
        nonlocal ran
        response = case.call()
        _shaped(operation.path, httpx.Response(response.status_code, content=response.content))
        ran += 1

    check()
    return ran


def test_t42_schemathesis_walks_every_operation_with_bodies_that_break_the_schema_and_never_gets_a_5xx(live):
    schema = schemathesis.openapi.from_url(live.url + "/openapi.json", headers=AUTH)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    walked = {operation.path: _walk(operation) for operation in operations}
    assert all(count > 0 for count in walked.values()), walked
    assert sum(walked[path] for path in VALID) >= 6 * EXAMPLES, walked  # every POST route got its share
    assert live.client.get("/health").status_code == 200
