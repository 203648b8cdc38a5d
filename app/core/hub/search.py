"""The pure parts of a Hub search: query parameters, merging several formats' pages into one opaque
page token, and the sort order of merged results. The requests are the HubClient's."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from app.core.formats import EXL2, GGUF, MLX
from app.core.hub.results import ModelSummary

SORTS = {"downloads": "downloads", "likes": "likes", "trending": "trendingScore", "updated": "lastModified"}
# The Hub indexes a repo's library as a tag too, named as we name the format: one `filter=` value each.
FORMAT_FILTERS: dict[str, str] = {fmt: fmt.value for fmt in (GGUF, MLX, EXL2)}
_EXPAND = (
    "author",
    "downloads",
    "likes",
    "trendingScore",
    "lastModified",
    "createdAt",
    "tags",
    "library_name",
    "pipeline_tag",
    "gated",
    "private",
)


def check_query(formats: tuple[str, ...] | list[str], sort: str) -> None:
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {sorted(SORTS)}, not {sort!r}")
    unknown = [f for f in formats if f not in FORMAT_FILTERS]
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {sorted(FORMAT_FILTERS)}")


def search_params(text: str, author: str | None, fmt: str | None, sort: str, limit: int) -> list[tuple[str, Any]]:
    params: list[tuple[str, Any]] = []
    if text:
        params.append(("search", text))
    if author:
        params.append(("author", author))
    if fmt:
        params.append(("filter", FORMAT_FILTERS[fmt]))
    params += [("sort", SORTS[sort]), ("limit", limit)]
    params += [("expand", e) for e in _EXPAND]
    return params


def encode_page_token(nexts: list[str | None]) -> str | None:
    """One query's next URL as it is; several queries' next URLs packed into one token."""
    if not any(nexts):
        return None
    if len(nexts) == 1:
        return nexts[0]
    return "m:" + base64.urlsafe_b64encode(json.dumps(nexts).encode()).decode()


def decode_page_token(token: str, n: int) -> list[str | None]:
    try:
        if token.startswith("m:"):
            urls = json.loads(base64.urlsafe_b64decode(token[2:].encode()))
        else:
            urls = [token]
    except ValueError as exc:
        raise ValueError("not a page token from this search") from exc
    if not isinstance(urls, list) or len(urls) != n or not all(u is None or isinstance(u, str) for u in urls):
        raise ValueError("the page token does not match these search formats")
    return urls


def merge_results(results: list[ModelSummary], sort: str) -> list[ModelSummary]:
    """Several formats' results as one list: each repo once, in the order the user asked for."""
    seen: set[str] = set()
    unique = [r for r in results if not (r.id in seen or seen.add(r.id))]  # type: ignore[func-returns-value]
    return sorted(unique, key=_sort_key(sort), reverse=True)


def _sort_key(sort: str) -> Callable[[ModelSummary], float]:
    if sort == "updated":
        return lambda r: r.last_modified.timestamp() if r.last_modified else 0.0
    attr = {"downloads": "downloads", "likes": "likes", "trending": "trending_score"}[sort]
    return lambda r: getattr(r, attr)
