"""What the Hub client returns: search results, repo details, refs, file metadata."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.core.models.files import RepoFile


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class ModelSummary:
    id: str
    author: str
    downloads: int = 0
    likes: int = 0
    trending_score: int = 0
    last_modified: datetime | None = None
    tags: list[str] = field(default_factory=list)
    library_name: str | None = None
    pipeline_tag: str | None = None
    gated: bool | str = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelSummary:
        repo_id = str(d.get("id") or d.get("modelId") or "")
        tags = d.get("tags")
        return cls(
            id=repo_id,
            author=str(d.get("author") or repo_id.split("/")[0]),
            downloads=as_int(d.get("downloads")),
            likes=as_int(d.get("likes")),
            trending_score=as_int(d.get("trendingScore")),
            last_modified=parse_time(d.get("lastModified") or d.get("createdAt")),
            tags=[str(t) for t in tags] if isinstance(tags, list) else [],
            library_name=d.get("library_name") if isinstance(d.get("library_name"), str) else None,
            pipeline_tag=d.get("pipeline_tag") if isinstance(d.get("pipeline_tag"), str) else None,
            gated=gated if isinstance(gated := d.get("gated"), (bool, str)) else False,
        )


@dataclass
class SearchPage:
    results: list[ModelSummary]
    next: str | None = None  # opaque token for `search(page_token=...)`; None on the last page


@dataclass
class RepoDetails:
    id: str
    sha: str
    files: list[RepoFile]
    gated: bool | str = False
    private: bool = False
    tags: list[str] = field(default_factory=list)
    library_name: str | None = None
    card_data: dict[str, Any] = field(default_factory=dict)
    last_modified: datetime | None = None
    downloads: int = 0
    likes: int = 0


@dataclass
class Ref:
    name: str
    commit: str


@dataclass
class FileMetadata:
    url: str
    commit: str | None
    etag: str | None
    size: int | None
