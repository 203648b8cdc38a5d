"""A GGUF without a chat template on llama.cpp: a Gemma 3 file gets Gemma's turn format (not ChatML), its
replies end at `<end_of_turn>`, and the model info says which template was picked and why; a per-model pick
(LoadSpec.chat_template, from the library) replaces the file's own."""

from __future__ import annotations

import pytest

from app.core.engines import generate_all
from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.core.engines.chat_templates.formats import FORMATS
from tests.core.engines.fixtures import load_llamacpp

pytest.importorskip("gguf", reason="the gguf package writes the tiny GGUF models")

CONVO = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Hi")]
GEMMA_PROMPT = "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
CHATML_PROMPT = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    from tests.fixtures.tiny_gguf import write_tiny_gemma3_gguf

    return write_tiny_gemma3_gguf(tmp_path_factory.mktemp("gemma3") / "tiny-gemma-3-F16.gguf")


@pytest.fixture(scope="module")
def gemma_engine(tiny_gemma3):
    engine = load_llamacpp(tiny_gemma3, n_ctx=256)
    yield engine
    engine.unload()


def forced(text: str, **sampling) -> GenerateRequest:
    """A greedy chat request whose reply is `text`, spelled out (a grammar forces it)."""
    literal = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return GenerateRequest(
        messages=CONVO,
        grammar=f'root ::= "{literal}"',
        sampling=SamplingParams(temperature=0.0, max_tokens=64, **sampling),
    )


def test_a_gemma3_file_without_a_template_is_prompted_in_gemmas_format(gemma_engine):
    info = gemma_engine.info
    assert info.extra["architecture"] == "gemma3"
    assert info.chat_template == FORMATS["gemma"].source
    assert info.template_notice == "no template in the file: using Gemma's format for architecture gemma3"
    assert info.extra["chat_template"] == "gemma" and info.extra["chat_template_reason"] == info.template_notice
    ids = gemma_engine.prompt_tokens(GenerateRequest(messages=CONVO))
    assert ids == gemma_engine.tokenize(GEMMA_PROMPT, special=True)
    start_of_turn = gemma_engine.tokenize("<start_of_turn>", special=True)
    assert len(start_of_turn) == 1 and ids.count(start_of_turn[0]) == 2  # the control token, not its letters
    assert "<|im_start|>" not in GEMMA_PROMPT and not set(gemma_engine.tokenize("<|im_start|>", special=True)) & set(
        ids
    )


def test_a_reply_ends_at_end_of_turn_and_reports_no_stop_sequence(gemma_engine):
    text, last = generate_all(gemma_engine, forced("Hello.<end_of_turn>\n<start_of_turn>user\nmore"))
    assert text == "Hello."
    assert last.finish_reason == "stop" and last.stop_sequence is None  # the turn ended; nothing the caller asked
    # A stop the caller asked for is still reported as theirs.
    text, last = generate_all(gemma_engine, forced("Hel<end_of_turn>", stop=["l"]))
    assert text == "He" and last.stop_sequence == "l"


def test_a_picked_format_replaces_the_files_template(tiny_gguf_f16):
    chatml = load_llamacpp(tiny_gguf_f16, n_ctx=256)
    try:
        assert chatml.info.template_notice is None and chatml.info.extra["chat_template"] == "file"
        assert chatml.prompt_tokens(GenerateRequest(messages=CONVO)) == chatml.tokenize(CHATML_PROMPT, special=True)
    finally:
        chatml.unload()
    picked = load_llamacpp(tiny_gguf_f16, n_ctx=256, chat_template="gemma")
    try:
        assert picked.info.chat_template == FORMATS["gemma"].source
        assert picked.info.template_notice == "using Gemma's format, as picked"
        assert picked.prompt_tokens(GenerateRequest(messages=CONVO)) == picked.tokenize(GEMMA_PROMPT, special=True)
        assert generate_all(picked, forced("Yes<end_of_turn>no"))[0] == "Yes"
    finally:
        picked.unload()


def test_a_pasted_template_runs_in_the_sandbox(tiny_gguf_f16):
    pasted = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=256, chat_template=pasted)
    try:
        assert engine.info.extra["chat_template"] == "custom"
        want = "[system] Be brief.\n[user] Hi\n[assistant] "
        assert engine.prompt_tokens(GenerateRequest(messages=CONVO)) == engine.tokenize(want, special=False)
    finally:
        engine.unload()
