"""What a request says about tools: the function list (OpenAI shape) and `tool_choice`, validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.core.tools.textscan import NAME_RE
from app.core.tools.types import ToolError

__all__ = ["FunctionSpec", "ToolChoice", "function_specs", "parse_tool_choice"]


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    description: str
    parameters: dict[str, Any] | None  # a JSON schema for the arguments object

    def property_schema(self, key: str) -> dict[str, Any] | None:
        props = (self.parameters or {}).get("properties")
        value = props.get(key) if isinstance(props, dict) else None
        return value if isinstance(value, dict) else None


def function_specs(tools: list[dict[str, Any]] | None) -> list[FunctionSpec]:
    """Check `tools` ({"type": "function", "function": {"name", "description", "parameters"}} each)."""
    specs: list[FunctionSpec] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools or []):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ToolError(f"{where} must be an object with type 'function'", param=where)
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ToolError(f"{where}.function must be an object", param=f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise ToolError(
                f"{where}.function.name must be 1–64 letters, digits, '_', '-' or '.'", param=f"{where}.function.name"
            )
        if name in seen:
            raise ToolError(f"two tools are named {name!r}", param=f"{where}.function.name")
        seen.add(name)
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise ToolError(f"{where}.function.description must be a string", param=f"{where}.function.description")
        parameters = fn.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ToolError(f"{where}.function.parameters must be a JSON schema object", param=f"{where}.function")
        specs.append(FunctionSpec(name, description, parameters))
    return specs


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["none", "auto", "required", "function"]
    name: str | None = None  # for mode "function"


def parse_tool_choice(value: str | dict[str, Any] | None, specs: list[FunctionSpec]) -> ToolChoice:
    """OpenAI's `tool_choice`: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.

    The Responses API form {"type": "function", "name"} is accepted too. Absent: "auto" when there
    are tools, else "none" (as OpenAI does).
    """
    if value is None:
        return ToolChoice("auto" if specs else "none")
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise ToolError("tool_choice must be 'none', 'auto', 'required' or a function", param="tool_choice")
        if value == "required" and not specs:
            raise ToolError("tool_choice 'required' needs at least one tool", param="tool_choice")
        return ToolChoice(value)  # type: ignore[arg-type]  # narrowed by the check above
    if isinstance(value, dict) and value.get("type") == "function":
        fn = value.get("function")
        name = fn.get("name") if isinstance(fn, dict) else value.get("name")
        if not isinstance(name, str):
            raise ToolError("tool_choice.function.name must be a string", param="tool_choice")
        if name not in {spec.name for spec in specs}:
            raise ToolError(f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
        return ToolChoice("function", name)
    raise ToolError("tool_choice must be 'none', 'auto', 'required' or a function", param="tool_choice")
