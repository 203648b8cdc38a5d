"""Attributes on a vector store's files and the filters a search applies to them, as OpenAI's API has them.

Attributes are at most 16 keys, each a string, a number or a boolean. A filter is a comparison
(`{"type": "eq", "key": "year", "value": 2024}`, and ne, gt, gte, lt, lte, in, nin) or a compound
(`{"type": "and"|"or", "filters": [...]}`). A comparison on a key the file lacks, or between a number and a
string, is false (`ne` and `nin` too: a file without the key is not known to differ); numbers compare
with numbers, strings with strings, booleans only by (in)equality.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from app.core.documents.store import DocumentsError

MAX_ATTRIBUTES = 16
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 512
MAX_FILTER_DEPTH = 8
MAX_FILTERS = 64  # comparisons and compounds in one filter, all levels together
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")

Attributes = dict[str, str | int | float | bool]
Predicate = Callable[[Mapping[str, Any]], bool]


class FilterError(DocumentsError):
    """A malformed filter or attribute set; `param` names where (`filters.filters.1.value`)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def checked_attributes(value: object, param: str = "attributes") -> Attributes:
    """`value` as attributes (None: none), or FilterError naming what is wrong."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FilterError(f"{param} must be an object", param)
    if len(value) > MAX_ATTRIBUTES:
        raise FilterError(f"{param} has {len(value)} keys; at most {MAX_ATTRIBUTES}", param)
    out: Attributes = {}
    for key, item in value.items():
        where = f"{param}.{str(key)[:MAX_KEY_CHARS]}"
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
            raise FilterError(f"an attribute's key is 1 to {MAX_KEY_CHARS} characters", param)
        if not _scalar(item):
            raise FilterError(f"{where} must be a string, a number or a boolean", where)
        if isinstance(item, str) and len(item) > MAX_VALUE_CHARS:
            raise FilterError(f"{where} is over {MAX_VALUE_CHARS} characters", where)
        out[key] = item
    return out


def compile_filter(spec: object, param: str = "filters") -> Predicate:
    """A predicate over a file's attributes (None: everything matches), or FilterError."""
    if spec is None:
        return lambda _attributes: True
    count = [0]
    return _compile(spec, param, 0, count)


def _compile(spec: object, param: str, depth: int, count: list[int]) -> Predicate:
    count[0] += 1
    if count[0] > MAX_FILTERS:
        raise FilterError(f"the filter has more than {MAX_FILTERS} parts", param)
    if depth > MAX_FILTER_DEPTH:
        raise FilterError(f"the filter nests deeper than {MAX_FILTER_DEPTH} levels", param)
    if not isinstance(spec, dict):
        raise FilterError(f"{param} must be an object with a type", param)
    kind = spec.get("type")
    if kind in COMPOUNDS:
        parts = spec.get("filters")
        if not isinstance(parts, list) or not parts:
            raise FilterError(f"{param}.filters must be a non-empty list", f"{param}.filters")
        compiled = [_compile(p, f"{param}.filters.{i}", depth + 1, count) for i, p in enumerate(parts)]
        if kind == "and":
            return lambda a: all(p(a) for p in compiled)
        return lambda a: any(p(a) for p in compiled)
    if kind not in COMPARISONS:
        raise FilterError(
            f"{param}.type must be one of {', '.join(COMPARISONS + COMPOUNDS)}, not {str(kind)[:40]!r}",
            f"{param}.type",
        )
    key = spec.get("key")
    if not isinstance(key, str) or not key:
        raise FilterError(f"{param}.key must be a non-empty string", f"{param}.key")
    value = spec.get("value")
    if kind in ("in", "nin"):
        if not isinstance(value, list) or not value or not all(_scalar(v) for v in value):
            raise FilterError(f"{param}.value must be a non-empty list of strings or numbers", f"{param}.value")
        if kind == "in":
            return lambda a: key in a and any(_equal(a[key], v) for v in value)
        return lambda a: key in a and not any(_equal(a[key], v) for v in value)
    if not _scalar(value):
        raise FilterError(f"{param}.value must be a string, a number or a boolean", f"{param}.value")
    if kind == "eq":
        return lambda a: key in a and _equal(a[key], value)
    if kind == "ne":
        return lambda a: key in a and not _equal(a[key], value)
    if isinstance(value, bool):
        raise FilterError(f"{param}: {kind} compares numbers or strings, not booleans", f"{param}.value")
    order = _ORDERS[kind]
    return lambda a: key in a and _comparable(a[key], value) and order(a[key], value)


_ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": lambda x, y: x > y,
    "gte": lambda x, y: x >= y,
    "lt": lambda x, y: x < y,
    "lte": lambda x, y: x <= y,
}


def _scalar(value: object) -> bool:
    return isinstance(value, (str, int, float, bool)) and value == value  # NaN is no value


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _comparable(x: object, y: object) -> bool:
    return (_number(x) and _number(y)) or (isinstance(x, str) and isinstance(y, str))


def _equal(x: object, y: object) -> bool:
    """Equal as the API means it: True is not 1, and "1" is not 1."""
    if isinstance(x, bool) or isinstance(y, bool):
        return isinstance(x, bool) and isinstance(y, bool) and x == y
    return _comparable(x, y) and x == y
