"""Reading a snippet part back the way its tool would: TOML, JSON, YAML, shell lines, Python, fields."""

from __future__ import annotations

import ast
import json
import re
import shlex
import tomllib
from typing import Any

import yaml

from app.core.connect import Part

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_commands(text: str) -> list[list[str]]:
    """Each command's words, continuation lines joined, as a POSIX shell splits them."""
    return [shlex.split(line) for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def exports(text: str) -> dict[str, str]:
    """`export NAME=value` lines → {NAME: value}; every line must split as a shell command."""
    env = {}
    for words in shell_commands(text):
        if words[0] == "export":
            assert len(words) == 2 and NAME.match(words[1]), words
            name, _, value = words[1].partition("=")
            env[name] = value
    return env


def python_strings(text: str) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def python_call_kwargs(text: str, func: str) -> dict[str, Any]:
    """The literal keyword arguments of the first call to `func` (a name or an attribute's last part)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == func:
                return {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    raise AssertionError(f"no call to {func} in:\n{text}")


def fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        label, _, value = line.partition(":")
        out[label.strip()] = value.strip()
    return out


def parse(part: Part) -> Any:
    """The part as its tool reads it; raises when it does not parse."""
    if part.language == "toml":
        return tomllib.loads(part.text)
    if part.language == "json":
        return json.loads(part.text)
    if part.language == "yaml":
        return yaml.safe_load(part.text)
    if part.language == "shell":
        return shell_commands(part.text)
    if part.language == "python":
        return ast.parse(part.text)
    if part.language == "text":
        return fields(part.text)
    raise AssertionError(f"unknown language {part.language!r}")


def strings(part: Part) -> set[str]:
    """Every string value the part carries once parsed, with `NAME=value` words split at the first '=' and
    `Bearer TOKEN` header values giving their token."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.add(value)
            if "=" in value:
                found.add(value.split("=", 1)[1])
            if value.startswith("Bearer "):
                found.add(value.removeprefix("Bearer "))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    if part.language == "python":
        walk(python_strings(part.text))
    else:
        walk(parse(part))
    return found
