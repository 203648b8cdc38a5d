"""The log never keeps a credential: httpx logs each request's URL, and a remote server's URL may carry a
user and password; error texts may quote a token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.core.logs import redact

ROOT = Path(__file__).resolve().parents[2]


def test_credentials_are_replaced_and_the_rest_is_kept():
    assert redact('GET http://bob:s3cret@10.0.0.2:8080/v1/models "HTTP/1.1 200 OK"') == (
        'GET http://***:***@10.0.0.2:8080/v1/models "HTTP/1.1 200 OK"'
    )
    assert redact("https://x.example/y?api_key=abc123&n=1") == "https://x.example/y?api_key=***&n=1"
    assert redact("Authorization: Bearer sk-abcdef.123") == "Authorization: Bearer ***"
    assert redact("a token hf_abcdefghijklmnopqrstuvwxyz in it") == "a token hf_*** in it"
    kept = "plain http://host:8080/v1/models?limit=5 and mail a@b.example"
    assert redact(kept) == kept


def test_the_log_file_gets_no_password_from_a_library_logger(tmp_path):
    code = (
        "import logging, sys; from pathlib import Path; from app.core.logs import configure_logging;"
        "f = configure_logging(Path(sys.argv[1]), console=True);"
        "logging.getLogger('httpx').info('HTTP Request: GET %s %s', 'http://bob:s3cret@h:1/v1/models', 'OK');"
        "logging.getLogger('app.x').warning('failed with token %s', 'hf_abcdefghijklmnop')"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "hearth.log").read_text()
    assert "GET http://***:***@h:1/v1/models OK" in text and "failed with token hf_***" in text
    assert "s3cret" not in text and "hf_abcdefghijklmnop" not in text
    assert "hf_abcdefghijklmnop" not in done.stderr and "failed with token hf_***" in done.stderr  # the console too
