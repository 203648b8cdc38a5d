"""Small hostile inputs at the llama.cpp engine (T34, T35, T37), for callers that are not the API (the chat window):
a lone surrogate is the caller's error, a prompt over the character cap is refused before it is rendered
or tokenized, and a grammar llama.cpp rejects is logged as a bounded excerpt, never whole on stderr."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.core.engines.errors import MAX_PROMPT_CHARS, InvalidRequest, PromptTooLong
from app.core.engines.llamacpp.log import MAX_MESSAGE_BYTES, on_log
from app.core.tools.schema_limits import SchemaTooComplex

LOGGER = "app.core.engines.llamacpp.log"


def test_a_long_native_error_is_logged_as_an_excerpt_and_chatter_is_dropped(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    grammar = b'root ::= "a" undefined-rule\n' + b"# filler line\n" * 50_000
    message = b"parse: error parsing grammar: Undefined rule identifier 'undefined-rule'\n\n" + grammar
    on_log(3, message)
    on_log(5, b"more of the same error\n")  # CONT: at the level of the message it continues
    on_log(1, b"llama_model_loader: loaded meta data with 33 key-value pairs\n")  # INFO: dropped
    on_log(5, b"continues the info line\n")
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in records] == [logging.ERROR, logging.ERROR]
    first = records[0].getMessage()
    assert first.startswith("llama.cpp: parse: error parsing grammar: Undefined rule identifier")
    assert len(first) < MAX_MESSAGE_BYTES + 100 and f"{len(message.rstrip()):,} bytes in all" in first
    assert records[1].getMessage() == "llama.cpp: more of the same error"


def test_a_short_native_error_is_logged_whole(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    on_log(3, b"llama_model_load: error loading model: tensor 'x' has invalid dims\n")
    assert (
        caplog.records[-1].getMessage()
        == "llama.cpp: llama_model_load: error loading model: tensor 'x' has invalid dims"
    )


def test_a_rejected_grammar_is_not_printed_whole(smollm2_engine, capfd, caplog):
    import llama_cpp

    from app.core.engines.llamacpp.options import build_grammar

    caplog.set_level(logging.ERROR, logger=LOGGER)
    capfd.readouterr()
    grammar = 'root ::= "a" undefined-rule\n' + "# a line the parser reads past\n" * 10_000  # under the size cap
    with pytest.raises(SchemaTooComplex, match="could not be parsed"):
        build_grammar(llama_cpp, GenerateRequest(prompt="x", grammar=grammar), smollm2_engine._llm._model.vocab)
    out, err = capfd.readouterr()
    # It was the whole grammar (here 310 kB) on stderr. Counted by its lines, not by the length of stderr: in a long
    # session a handler an earlier test left behind may print a "Logging error" holding the bounded excerpt.
    assert (out + err).count("a line the parser reads past") <= 10
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("Undefined rule identifier 'undefined-rule'" in m and "bytes in all" in m for m in logged), logged
    assert all(len(m) < MAX_MESSAGE_BYTES + 100 for m in logged)


def test_a_grammar_llama_cpp_takes_leaves_stderr_alone(smollm2_engine, capfd):
    import llama_cpp

    from app.core.engines.llamacpp.options import build_grammar

    capfd.readouterr()
    request = GenerateRequest(prompt="x", grammar='root ::= "yes" | "no"')
    assert build_grammar(llama_cpp, request, smollm2_engine._llm._model.vocab) is not None
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(
    "request_",
    [
        GenerateRequest(prompt="a\ud800b"),
        GenerateRequest(messages=[ChatMessage(role="user", content="a\udfffb")]),
    ],
    ids=["prompt", "messages"],
)
def test_a_lone_surrogate_is_an_invalid_request(smollm2_engine, request_):
    with pytest.raises(InvalidRequest, match="lone UTF-16 surrogate"):
        smollm2_engine.count_tokens(request_)
    with pytest.raises(InvalidRequest, match="lone UTF-16 surrogate"):
        smollm2_engine.embed(["fine", "x\ud800"])
    # and the engine is as it was
    reply = smollm2_engine.generate(
        GenerateRequest(prompt="Hello", sampling=SamplingParams(temperature=0.0, max_tokens=2)), threading.Event()
    )
    assert list(reply)[-1].finish_reason in ("stop", "length")


@pytest.mark.parametrize("chat", [False, True], ids=["prompt", "messages"])
def test_a_prompt_over_the_character_cap_is_refused_before_it_is_tokenized(smollm2_engine, chat):
    text = "hello world " * (MAX_PROMPT_CHARS // 12 + 10_000)
    request = (
        GenerateRequest(messages=[ChatMessage(role="user", content=text)]) if chat else GenerateRequest(prompt=text)
    )
    start = time.perf_counter()
    with pytest.raises(PromptTooLong, match="over the 2,000,000-character cap") as caught:
        smollm2_engine.count_tokens(request)
    assert time.perf_counter() - start < 0.5  # tokenizing it takes about 2 s here
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(PromptTooLong):
        smollm2_engine.embed([text])
