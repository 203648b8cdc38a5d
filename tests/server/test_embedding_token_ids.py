"""/v1/embeddings with OpenAI token ids (what LangChain's OpenAIEmbeddings sends by default), over the
FakeEngine: the ids are read back into text with a cl100k_base table found where tiktoken caches it and
checked by its hash, so they embed exactly as that text does; every way they cannot be read is a 400 naming
`input` that embeds nothing and leaves the next request served."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from app.server.openai.token_ids import CL100K_SPECIAL, TokenTables, cache_dirs, cache_file_name

# A stand-in for OpenAI's file, in its format: "é" is split over two ids, as byte-pair ranks can split it.
PIECES = {0: b"red", 1: b" apple", 2: b" pear", 3: b" caf", 4: b"\xc3", 5: b"\xa9"}


def write_table(folder: Path, pieces: dict[int, bytes] = PIECES) -> str:
    """Writes the table under tiktoken's cache name; returns its SHA-256."""
    folder.mkdir(parents=True, exist_ok=True)
    data = b"".join(base64.b64encode(piece) + b" %d\n" % rank for rank, piece in pieces.items())
    (folder / cache_file_name()).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def served(make_server, tmp_path):
    live = make_server()
    cache = tmp_path / "tiktoken-cache"
    live.context.token_tables = TokenTables([tmp_path / "empty", cache], write_table(cache))
    return live


def vectors(live, payload: object) -> list[list[float]]:
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": payload})
    assert r.status_code == 200, r.text[:300]
    return [item["embedding"] for item in r.json()["data"]]


def test_token_ids_embed_exactly_as_the_text_they_encode(served):
    assert vectors(served, [[0, 1], [0, 2]]) == vectors(served, ["red apple", "red pear"])
    assert vectors(served, [0, 1]) == vectors(served, "red apple")  # one array is one input
    assert vectors(served, [[3, 4, 5]]) == vectors(served, [" café"])  # bytes joined before decoding


def test_usage_counts_the_models_tokens_of_the_text(served):
    by_ids = served.client.post("/v1/embeddings", json={"model": "alpha", "input": [[0, 1]]}).json()
    by_text = served.client.post("/v1/embeddings", json={"model": "alpha", "input": ["red apple"]}).json()
    assert by_ids["usage"] == by_text["usage"]


def test_the_official_openai_client_sends_ids_and_gets_vectors(served):
    from openai import OpenAI

    client = OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    got = client.embeddings.create(model="alpha", input=[[0, 2]])  # the SDK asks for base64 (float32)
    assert got.data[0].embedding == pytest.approx(vectors(served, ["red pear"])[0], abs=1e-6)


UNREADABLE = {
    "an id the table lacks": ([[0, 99]], 400, "token_ids_unreadable", "99"),
    "a negative id": ([[-1]], 400, None, "input"),
    "an empty array": ([[0], []], 400, None, "input"),
    "ids and text mixed": ([0, "apple"], 400, None, "input"),
}


@pytest.mark.parametrize("payload, status, code, names", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_ids_are_a_4xx_naming_input_and_nothing_is_embedded(served, payload, status, code, names):
    r = served.client.post("/v1/embeddings", json={"model": "alpha", "input": payload})
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "input" or "input" in error["message"], error
    assert code is None or error["code"] == code
    assert names in error["message"]
    assert served.engines[0].embedded == 0
    assert len(vectors(served, [[0, 1]])) == 1


def test_the_special_tokens_read_as_their_names(served):
    end = next(i for i, name in CL100K_SPECIAL.items() if name == "<|endoftext|>")
    assert vectors(served, [[0, end]]) == vectors(served, ["red<|endoftext|>"])


def test_more_ids_than_one_request_takes_is_a_413(served):
    from app.core.engines.inputs.embed_limits import MAX_EMBED_TOKENS

    half = MAX_EMBED_TOKENS // 2 + 1
    r = served.client.post("/v1/embeddings", json={"model": "alpha", "input": [[0] * half, [1] * half]})
    assert r.status_code == 413 and r.json()["error"]["param"] == "input", r.text[:300]
    assert served.engines[0].embedded == 0


def test_without_the_tokenizer_file_the_400_says_how_to_send_text(make_server, tmp_path):
    live = make_server()
    live.context.token_tables = TokenTables([tmp_path / "nowhere"])
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": [[0, 1]]})
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == "token_ids_unreadable" and error["param"] == "input"
    assert "check_embedding_ctx_length=False" in error["message"] and str(tmp_path / "nowhere") in error["message"]
    assert live.engines[0].embedded == 0


def test_a_file_whose_hash_is_not_cl100k_is_not_read(make_server, tmp_path):
    live = make_server()
    write_table(tmp_path)  # the right name, but not OpenAI's bytes
    live.context.token_tables = TokenTables([tmp_path])
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": [[0, 1]]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "token_ids_unreadable", r.text[:300]


def test_a_table_written_after_a_refusal_is_found_on_the_next_request(make_server, tmp_path):
    live = make_server()
    cache = tmp_path / "later"
    live.context.token_tables = TokenTables([cache], write_table(tmp_path / "elsewhere"))
    assert live.client.post("/v1/embeddings", json={"model": "alpha", "input": [[0]]}).status_code == 400
    write_table(cache)
    assert vectors(live, [[0]]) == vectors(live, ["red"])


def test_tiktokens_cache_variables_are_searched_first(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "b"))
    dirs = cache_dirs()
    assert dirs[:2] == [tmp_path / "a", tmp_path / "b"] and dirs[2].name == "data-gym-cache"
    # tiktoken names a download by the SHA-1 of its URL; this is the name its cl100k_base file has.
    assert cache_file_name() == "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
