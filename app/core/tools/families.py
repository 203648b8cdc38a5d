"""The tool-call families by name, and which one a chat template speaks.

A template with none of the markers (including one with no tool support at all) gets `hermes`: it is
the format Hearth's system-prompt fallback describes (prompt.py), so what the model is told and what
is parsed agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.tools.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP, DeepSeekFamily
from app.core.tools.hermes import CLOSE, OPEN, HermesFamily
from app.core.tools.llama3 import PYTHON_TAG, Llama3Family
from app.core.tools.mistral import ARGS, CALL_ID, TOOL_CALLS, MistralFamily
from app.core.tools.qwen3_coder import Qwen3CoderFamily
from app.core.tools.reasoning import DEFAULT_MARKERS
from app.core.tools.scanner import Family
from app.core.tools.types import ToolError

__all__ = ["DEFAULT_FAMILY", "FAMILIES", "OUTPUT_MARKERS", "ToolFormat", "detect_format", "get_family"]

DEFAULT_FAMILY = "hermes"

FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (HermesFamily(), Qwen3CoderFamily(), Llama3Family(), MistralFamily(), DeepSeekFamily())
}


# Every marker a tool-call or reasoning parser reads. Some models spell them with control tokens, which an
# engine renders as nothing by default: a request that parses its reply asks for these to stay visible.
OUTPUT_MARKERS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [OPEN, CLOSE, PYTHON_TAG, TOOL_CALLS, ARGS, CALL_ID, CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP]
        + [piece for m in DEFAULT_MARKERS for piece in (m.open, m.close, *m.drop)]
        + ["<|channel|>", "<|message|>", "<|start|>"]  # gpt-oss spells its markers from these tokens
    )
)


@dataclass(frozen=True)
class ToolFormat:
    """A family and, where a family has two output shapes, which one the template uses (for grammars)."""

    family: str = DEFAULT_FAMILY
    variant: str = ""  # mistral: "args" or "list"; deepseek: "v3.1" or "v3"

    def get(self) -> Family:
        return get_family(self.family)


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ToolError(f"unknown tool-call format {name!r}; known: {', '.join(FAMILIES)}") from None


def detect_format(template: str | None) -> ToolFormat:
    """The family a chat template's text points to (marker strings; the template is not run)."""
    text = template or ""
    if OPEN in text:
        return ToolFormat("qwen3_coder" if "<function=" in text else "hermes")
    if TOOL_CALLS in text:
        return ToolFormat("mistral", "args" if ARGS in text else "list")
    if CALLS_BEGIN in text:
        return ToolFormat("deepseek", "v3" if "```json" in text else "v3.1")
    if PYTHON_TAG in text or "ipython" in text or '"parameters"' in text:
        return ToolFormat("llama3")
    return ToolFormat()
