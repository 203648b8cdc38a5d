"""A model file without a chat template still speaks its own format: Hearth's built-in templates (the formats
llama.cpp knows by name) write exactly that format through the sandbox, the architecture and vocabulary pick
one, ChatML is left for the families that use it and the unknown, and a pasted template is checked before it
is kept."""

from __future__ import annotations

import pytest

from app.core.engines.base import ChatMessage
from app.core.engines.chat_templates.formats import (
    FORMATS,
    MAX_CUSTOM_TEMPLATE_CHARS,
    check_custom_template,
    choose_template,
    guess_format,
)
from app.core.engines.chat_templates.render import CHATML_TEMPLATE, TemplateError, render_chat


def convo() -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content=" Hi "),
        ChatMessage(role="assistant", content="Hello!"),
        ChatMessage(role="user", content="Why?"),
    ]


# Each format as llama.cpp's llm_chat_apply_template writes it for the same conversation.
EXPECTED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n",
    "gemma": "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
    "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n",
    "llama3": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\n Hi <|end|>\n<|assistant|>\nHello!<|end|>\n"
    "<|user|>\nWhy?<|end|>\n<|assistant|>\n",
    "mistral-v7": "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST]  Hi [/INST] Hello!</s>[INST] Why?[/INST]",
    "command-r": "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|>"
    "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|>"
    "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Why?<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    "deepseek3": "Be brief.\n\n<｜User｜> Hi <｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Why?<｜Assistant｜>",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_builtin_format_writes_what_llama_cpp_writes(name):
    rendered = render_chat(FORMATS[name].source, convo())
    assert rendered.text == EXPECTED[name]
    # Request text stays content (tokenized with special parsing off); the format's markers are literals.
    content = "".join(text for text, is_content in rendered.segments if is_content)
    assert "Why?" in content and "Be brief." in content
    literals = "".join(text for text, is_content in rendered.segments if not is_content)
    assert "Why?" not in literals


def test_every_builtin_renders_in_the_sandbox_with_a_turn_end():
    for fmt in FORMATS.values():
        text = render_chat(fmt.source, convo()).text
        assert "Why?" in text, fmt.name
        assert all(stop for stop in fmt.stops), fmt.name
    assert FORMATS["llama2"].stops == ()  # its turn ends with EOS, which llama.cpp ends on: no text stop


def test_chatml_builtin_is_the_fallback_template():
    assert render_chat(FORMATS["chatml"].source, convo()).text == render_chat(CHATML_TEMPLATE, convo()).text


@pytest.mark.parametrize(
    ("arch", "tokens", "pre", "expected"),
    [
        ("gemma3", [], None, "gemma"),
        ("gemma2", [], None, "gemma"),
        ("gemma", ["<start_of_turn>"], None, "gemma"),
        ("qwen2", ["<|im_start|>", "<|im_end|>"], None, "chatml"),
        ("qwen3", [], None, "chatml"),
        ("phi3", ["<|assistant|>", "<|end|>"], None, "phi3"),
        ("phi3", ["<|im_start|>", "<|im_sep|>", "<|im_end|>"], None, "phi3"),  # the architecture decides
        ("command-r", [], None, "command-r"),
        ("llama", ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "llama-bpe", "llama3"),
        ("llama", ["<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]"], "tekken", "mistral-v7-tekken"),
        ("llama", ["<s>", "</s>", "[INST]", "[/INST]"], None, "mistral-v3"),
        ("llama", ["<|im_start|>", "<|im_end|>"], "smollm", "chatml"),
        ("llama", ["<s>", "</s>", "▁the"], None, "llama2"),
        ("deepseek2", ["<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"], None, "deepseek3"),
        ("granite", [], None, "granite"),
        ("olmo2", ["<|endoftext|>"], None, None),
        (None, [], None, None),
    ],
)
def test_the_architecture_and_vocabulary_pick_the_format(arch, tokens, pre, expected):
    assert guess_format(arch, tokens, pre)[0] == expected


def test_a_file_without_a_template_gets_its_architectures_format_and_says_why():
    choice = choose_template(None, "gemma3", ["<start_of_turn>", "<end_of_turn>"])
    assert choice.format == "gemma" and choice.source == FORMATS["gemma"].source
    assert choice.stops == ("<end_of_turn>",)
    assert choice.notice == "no template in the file: using Gemma's format for architecture gemma3"
    unknown = choose_template("", "olmo2", [])
    assert unknown.format == "chatml" and "ChatML" in unknown.reason and "olmo2" in unknown.reason


def test_the_files_own_template_wins_over_the_architecture_and_a_pick_wins_over_both():
    own = choose_template("{{ messages[0]['content'] }}", "gemma3", [])
    assert (own.origin, own.source, own.stops, own.notice) == ("file", "{{ messages[0]['content'] }}", (), None)
    picked = choose_template("{{ messages[0]['content'] }}", "gemma3", [], override="llama3")
    assert picked.format == "llama3" and picked.stops == ("<|eot_id|>", "<|eom_id|>")
    assert "Llama 3" in (picked.notice or "")
    pasted = choose_template(None, "gemma3", [], override="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert pasted.origin == "custom" and pasted.stops == () and "pasted" in (pasted.notice or "")


def test_a_pasted_template_is_checked_in_the_sandbox():
    good = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    assert check_custom_template(good) == good
    with pytest.raises(TemplateError, match=r"line 2"):
        check_custom_template("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}")
    with pytest.raises(TemplateError, match="does not write the messages"):
        check_custom_template("Hello there")
    with pytest.raises(TemplateError, match="unsafe"):
        check_custom_template("{{ ''.__class__.__mro__[1].__subclasses__() }}{{ messages[-1]['content'] }}")
    with pytest.raises(TemplateError, match="at most 100,000"):
        check_custom_template("{{ messages }}" + " " * MAX_CUSTOM_TEMPLATE_CHARS)
    # One over the cap in a hand-edited settings file is dropped (that model back to Auto), the file still read.
    from app.core.settings import Settings

    assert Settings(chat_templates={"a": "{{ x }}" * MAX_CUSTOM_TEMPLATE_CHARS, "b": "gemma"}).chat_templates == {
        "b": "gemma"
    }
    with pytest.raises(TemplateError, match="empty"):
        check_custom_template("  \n")
    with pytest.raises(TemplateError, match=r"ran away|budget|time|stopped"):
        check_custom_template("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}")
