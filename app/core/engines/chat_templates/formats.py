"""Which chat template a model runs with, and Hearth's own templates for models whose file has none.

A GGUF without `tokenizer.chat_template` still has a family: its `general.architecture` (gemma3, qwen2,
phi3, ...) and the control tokens of its vocabulary (`<start_of_turn>`, `<|eot_id|>`, ...) say which turn
format it was trained on. Hearth then uses a template of its own that writes that format (the formats
llama.cpp knows by name, e.g. "gemma", "llama3", "chatml"), rendered through the same sandbox as a file's
template (render.py), with the format's end-of-turn strings added to the stops so a reply ends where its
turn does. ChatML is what a model of an unknown family gets.

The user can also pick a format by name, or paste a template, per model (runtime.chat_templates saves the
pick; LoadSpec.chat_template carries it to the engine). A pasted template is checked here before it is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.core.engines.chat_templates.jinja_sandbox import TemplateError
from app.core.settings import MAX_CHAT_TEMPLATE_CHARS as MAX_CUSTOM_TEMPLATE_CHARS

__all__ = [
    "FORMATS",
    "MAX_CUSTOM_TEMPLATE_CHARS",
    "ChatFormat",
    "TemplateChoice",
    "check_custom_template",
    "choose_template",
    "format_named",
    "is_format_name",
]


@dataclass(frozen=True)
class ChatFormat:
    name: str  # llama.cpp's name for it
    label: str  # for people: "Gemma"
    source: str  # the Jinja Hearth renders
    # Where a reply's turn ends, as text. Empty where the turn ends with the model's EOS ("</s>"), which
    # llama.cpp ends on already: as a stop string it would also cut a reply about HTML's <s> tag.
    stops: tuple[str, ...]


def _each(body: str, generation: str) -> str:
    """A template that writes every message with `body` (Jinja reading `m`), then `generation`."""
    return (
        "{%- for m in messages -%}" + body + "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '" + generation + "' }}{%- endif -%}"
    )


def _by_role(system: str, user: str, assistant: str, generation: str) -> str:
    """A template with one expression per role (a tool result is written as a user turn)."""
    return _each(
        "{%- if m['role'] == 'system' -%}"
        + system
        + "{%- elif m['role'] == 'assistant' -%}"
        + assistant
        + "{%- else -%}"
        + user
        + "{%- endif -%}",
        generation,
    )


# Gemma has no system role: the system text opens the first user turn (as llama.cpp and Gemma's own
# template do), and the assistant is "model".
_GEMMA = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{%- set ns.system = ns.system + (m['content'] | trim) -%}"
    "{%- else -%}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else 'user') + '\n' }}"
    "{%- if ns.system and m['role'] != 'assistant' -%}{{ ns.system + '\n\n' }}{%- set ns.system = '' -%}{%- endif -%}"
    "{{ m['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

# Llama 2 and Mistral: a system prompt goes inside the first [INST].
_LLAMA2 = (
    "{%- set ns = namespace(system='', open=false) -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{%- set ns.system = ns.system + m['content'] -%}"
    "{%- elif m['role'] == 'assistant' -%}{{ ' ' + m['content'] + '</s>' }}"
    "{%- else -%}{{ '[INST] ' }}"
    "{%- if ns.system -%}{{ '<<SYS>>\n' + ns.system + '\n<</SYS>>\n\n' }}{%- set ns.system = '' -%}{%- endif -%}"
    "{{ m['content'] + ' [/INST]' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
_MISTRAL_V3 = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{%- set ns.system = ns.system + m['content'] + '\n\n' -%}"
    "{%- elif m['role'] == 'assistant' -%}{{ ' ' + (m['content'] | trim) + '</s>' }}"
    "{%- else -%}{{ '[INST] ' + ns.system + m['content'] + '[/INST]' }}{%- set ns.system = '' -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
)


def _mistral_v7(space: str) -> str:
    return _by_role(
        "{{ '[SYSTEM_PROMPT]" + space + "' + m['content'] + '[/SYSTEM_PROMPT]' }}",
        "{{ '[INST]" + space + "' + m['content'] + '[/INST]' }}",
        "{{ '" + space + "' + m['content'] + '</s>' }}",
        "",
    )


_FORMATS = (
    ChatFormat(
        "chatml",
        "ChatML",
        _each("{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}", "<|im_start|>assistant\\n"),
        ("<|im_end|>",),
    ),
    ChatFormat("gemma", "Gemma", _GEMMA, ("<end_of_turn>",)),
    ChatFormat(
        "llama3",
        "Llama 3",
        _each(
            "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + (m['content'] | trim) + '<|eot_id|>' }}",
            "<|start_header_id|>assistant<|end_header_id|>\\n\\n",
        ),
        ("<|eot_id|>", "<|eom_id|>"),
    ),
    ChatFormat(
        "llama4",
        "Llama 4",
        _each(
            "{{ '<|header_start|>' + m['role'] + '<|header_end|>\n\n' + (m['content'] | trim) + '<|eot|>' }}",
            "<|header_start|>assistant<|header_end|>\\n\\n",
        ),
        ("<|eot|>",),
    ),
    ChatFormat("llama2", "Llama 2", _LLAMA2, ()),
    ChatFormat("mistral-v3", "Mistral (v3)", _MISTRAL_V3, ()),
    ChatFormat("mistral-v7", "Mistral (v7)", _mistral_v7(" "), ()),
    ChatFormat("mistral-v7-tekken", "Mistral (v7, Tekken)", _mistral_v7(""), ()),
    ChatFormat(
        "phi3",
        "Phi-3",
        _each("{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|end|>\n' }}", "<|assistant|>\\n"),
        ("<|end|>",),
    ),
    ChatFormat(
        "phi4",
        "Phi-4",
        _each(
            "{{ '<|im_start|>' + m['role'] + '<|im_sep|>' + m['content'] + '<|im_end|>' }}",
            "<|im_start|>assistant<|im_sep|>",
        ),
        ("<|im_end|>",),
    ),
    ChatFormat(
        "command-r",
        "Command R",
        _by_role(
            "{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + (m['content'] | trim) + '<|END_OF_TURN_TOKEN|>' }}",
            "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + (m['content'] | trim) + '<|END_OF_TURN_TOKEN|>' }}",
            "{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + (m['content'] | trim) + '<|END_OF_TURN_TOKEN|>' }}",
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        ),
        ("<|END_OF_TURN_TOKEN|>",),
    ),
    ChatFormat(
        "deepseek2",
        "DeepSeek V2",
        _by_role(
            "{{ m['content'] + '\n\n' }}",
            "{{ 'User: ' + m['content'] + '\n\n' }}",
            "{{ 'Assistant: ' + m['content'] + '<｜end▁of▁sentence｜>' }}",
            "Assistant:",
        ),
        ("<｜end▁of▁sentence｜>",),
    ),
    ChatFormat(
        "deepseek3",
        "DeepSeek V3 / R1",
        _by_role(
            "{{ m['content'] + '\n\n' }}",
            "{{ '<｜User｜>' + m['content'] }}",
            "{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}",
            "<｜Assistant｜>",
        ),
        ("<｜end▁of▁sentence｜>",),
    ),
    ChatFormat(
        "granite",
        "Granite",
        _each(
            "{{ '<|start_of_role|>' + m['role'] + '<|end_of_role|>' + m['content'] + '<|end_of_text|>\n' }}",
            "<|start_of_role|>assistant<|end_of_role|>",
        ),
        ("<|end_of_text|>",),
    ),
    ChatFormat(
        "zephyr",
        "Zephyr",
        _each("{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|endoftext|>\n' }}", "<|assistant|>\\n"),
        ("<|endoftext|>",),
    ),
)
FORMATS: dict[str, ChatFormat] = {f.name: f for f in _FORMATS}

# Architectures whose chat models share one format, whatever their vocabulary says.
_BY_ARCHITECTURE = {
    **dict.fromkeys(("gemma", "gemma2", "gemma3", "gemma3n"), "gemma"),
    **dict.fromkeys(
        (
            "qwen",
            "qwen2",
            "qwen2moe",
            "qwen2vl",
            "qwen3",
            "qwen3moe",
            "qwen3next",
            "qwen3vl",
            "qwen3vlmoe",
            "internlm2",
            "smollm3",
            "olmoe",
        ),
        "chatml",
    ),
    **dict.fromkeys(("phi3", "phimoe"), "phi3"),
    **dict.fromkeys(("command-r", "cohere2", "cohere2moe"), "command-r"),
    **dict.fromkeys(("granite", "granitemoe", "granitehybrid"), "granite"),
    "llama4": "llama4",
}

# Control tokens that give a format away, checked in this order (the first family whose tokens are all in
# the vocabulary wins): for the architectures many families share (llama) and for those not listed above.
_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
    ("llama4", ("<|header_start|>", "<|eot|>")),
    ("command-r", ("<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>")),
    ("deepseek3", ("<｜User｜>", "<｜Assistant｜>")),
    ("granite", ("<|start_of_role|>", "<|end_of_role|>")),
    ("phi4", ("<|im_start|>", "<|im_sep|>")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("phi3", ("<|assistant|>", "<|end|>")),
    ("mistral-v7-tekken", ("[SYSTEM_PROMPT]", "[INST]", "tekken")),  # "tekken": the pre-tokenizer
    ("mistral-v7", ("[SYSTEM_PROMPT]", "[INST]")),
    ("mistral-v3", ("[INST]", "[/INST]")),
)


@dataclass(frozen=True)
class TemplateChoice:
    """The template a model runs with, and why."""

    source: str  # the Jinja rendered
    origin: str  # "file" (the model's own), "picked" (a format picked by name), "custom" (pasted), "auto"
    format: str | None  # a ChatFormat's name when one of Hearth's own is used
    stops: tuple[str, ...]  # end-of-turn strings to stop at (empty: the model's own end tokens suffice)
    reason: str  # one sentence, for the log, model info and /api/show

    @property
    def notice(self) -> str | None:
        """What to tell the user when the template is not the file's own."""
        return None if self.origin == "file" else self.reason


def is_format_name(value: str | None) -> bool:
    return bool(value) and value in FORMATS


def format_named(name: str) -> ChatFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"no built-in chat format {name!r}; known: {', '.join(FORMATS)}") from None


def _token_set(tokens: Any) -> frozenset[str]:
    return frozenset(t for t in tokens if isinstance(t, str)) if isinstance(tokens, (list, tuple)) else frozenset()


def guess_format(architecture: str | None, tokens: Iterable[str], pre: str | None = None) -> tuple[str | None, str]:
    """The format a model of this architecture and vocabulary was trained on, and how that was found;
    (None, why) when nothing says."""
    vocab = _token_set(list(tokens))
    arch = (architecture or "").lower()
    if arch in _BY_ARCHITECTURE:
        return _BY_ARCHITECTURE[arch], f"architecture {arch}"
    for name, markers in _MARKERS:
        wanted = [m for m in markers if m != "tekken"]
        if all(m in vocab for m in wanted) and ("tekken" not in markers or pre == "tekken"):
            return name, f"architecture {arch or 'unknown'}, whose vocabulary has {wanted[0]}"
    if arch == "llama" and "<s>" in vocab and "</s>" in vocab:
        return "llama2", "architecture llama with a Llama 2 vocabulary"
    return None, f"architecture {arch or 'unknown'}"


def choose_template(
    file_template: str | None,
    architecture: str | None = None,
    tokens: Iterable[str] = (),
    *,
    pre: str | None = None,
    override: str | None = None,
) -> TemplateChoice:
    """The template to run: `override` (a format's name or a pasted template, the user's per-model pick),
    else the file's own, else Hearth's template for the model's format, else ChatML."""
    if override and override.strip():
        if is_format_name(override):
            fmt = FORMATS[override]
            return TemplateChoice(fmt.source, "picked", fmt.name, fmt.stops, f"using {fmt.label}'s format, as picked")
        return TemplateChoice(override, "custom", None, (), "using the chat template pasted for this model")
    if file_template and file_template.strip():
        return TemplateChoice(file_template, "file", None, (), "using the chat template in the model file")
    name, why = guess_format(architecture, tokens, pre)
    fmt = FORMATS[name or "chatml"]
    if name is None:
        reason = f"no template in the file and no known format for {why}: using ChatML (<|im_start|>role … <|im_end|>)"
    else:
        reason = f"no template in the file: using {fmt.label}'s format for {why}"
    return TemplateChoice(fmt.source, "auto", fmt.name, fmt.stops, reason)


def check_custom_template(text: str) -> str:
    """A pasted template, checked in the sandbox before it is kept: not too long, valid Jinja, and it puts
    a short conversation's messages into the prompt. Returns it; raises TemplateError saying what is wrong."""
    from app.core.engines.base import ChatMessage
    from app.core.engines.chat_templates.render import render_chat

    if not text.strip():
        raise TemplateError("the template is empty")
    if len(text) > MAX_CUSTOM_TEMPLATE_CHARS:
        raise TemplateError(
            f"the template is {len(text):,} characters long; at most {MAX_CUSTOM_TEMPLATE_CHARS:,} are kept"
        )
    probe = "Hearth checks this template"
    sample = [
        ChatMessage(role="user", content="Hello"),
        ChatMessage(role="assistant", content="Hi there"),
        ChatMessage(role="user", content=probe),
    ]
    try:
        rendered = render_chat(text, sample, timeout_s=1.0, max_chars=200_000)
    except TemplateError as exc:
        line = getattr(exc.__cause__, "lineno", None)  # a Jinja syntax error knows where it is
        where = f" (line {line})" if line else ""
        raise TemplateError(f"the template does not render a conversation{where}: {exc}") from None
    if probe not in rendered.text:
        raise TemplateError("the template does not write the messages into the prompt (no `messages` loop?)")
    return text
