"""T23: schemathesis against the server's own /openapi.json (FakeEngine): whatever it sends, no 5xx, and
every answer is documented (status, content type, body schema) in OpenAI's error shape."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.server.test_hostile_routes import NOT_SERVED

EXAMPLES = 30  # per operation; hypothesis explores bodies, paths and headers from the schema
# T23's bar: nothing fails on the server's side, and every answer is one the schema documents. (Whether a
# request the schema allows is accepted is not checked: tools and tool_choice are checked against each
# other, which a schema cannot say.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def test_the_api_never_fails_and_answers_as_documented(make_server):
    live = make_server(script="ok fine", n_ctx=4096)
    schema = schemathesis.openapi.from_url(live.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/v1/completions", "/v1/models"}
    for operation in operations:
        _check(operation)
    assert live.client.get("/health").status_code == 200  # and it is still serving


def _check(operation) -> None:
    """Ollama's routes Hearth does not serve answer their documented 501; every other check still holds."""
    served = operation.path not in NOT_SERVED
    checks = CHECKS if served else [c for c in CHECKS if c is not not_a_server_error]

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case) -> None:
        response = case.call_and_validate(checks=checks)
        assert response.status_code < 500 or (not served and response.status_code == 501)

    check()
