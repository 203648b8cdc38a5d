"""Request bodies of the Files and Vector Stores API: typed as OpenAI's, lenient about fields it does not
know (as the other OpenAI-compatible bodies are); attributes, metadata and filters are checked in the core
(documents/filters.py), which names the field at fault."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.core.documents.vector_stores import MAX_RESULTS
from app.server.request_fields import RequestBase

MAX_FILE_IDS = 500  # OpenAI's limit for one batch
MAX_QUERY_CHARS = 4000
MAX_QUERIES = 8


class _Lenient(RequestBase):
    """Unknown fields dropped, and every string checked for lone surrogates, which SQLite cannot store
    (request_text.py); no prompt's cap on characters: these bodies are not prompts."""

    max_text_chars: ClassVar[int | None] = None


class _Part(BaseModel):
    """A part of a body (its text is checked with the whole body's)."""

    model_config = ConfigDict(extra="ignore")


class ExpiresAfter(_Part):
    anchor: Literal["last_active_at"] = "last_active_at"
    days: int = Field(ge=1, le=365)


class CreateStore(_Lenient):
    name: str | None = Field(default=None, max_length=200)
    file_ids: list[str] = Field(default_factory=list, max_length=MAX_FILE_IDS)
    metadata: dict[str, Any] | None = None
    expires_after: ExpiresAfter | None = None  # accepted; a collection never expires
    chunking_strategy: dict[str, Any] | None = None  # accepted; passages are cut by the embedding model's size
    description: str | None = Field(default=None, max_length=512)
    # Hearth's own: the library's embedding model to use (else Settings' choice, else the library's best).
    embedding_model: str | None = Field(default=None, max_length=512)


class UpdateStore(_Lenient):
    name: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] | None = None
    expires_after: ExpiresAfter | None = None


class AddFile(_Lenient):
    file_id: str = Field(min_length=1, max_length=200)
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class UpdateFile(_Lenient):
    attributes: dict[str, Any] | None


class BatchFile(_Part):
    file_id: str = Field(min_length=1, max_length=200)
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class CreateBatch(_Lenient):
    file_ids: list[str] | None = Field(default=None, max_length=MAX_FILE_IDS)
    files: list[BatchFile] | None = Field(default=None, max_length=MAX_FILE_IDS)
    attributes: dict[str, Any] | None = None  # for every file named in file_ids
    chunking_strategy: dict[str, Any] | None = None


class RankingOptions(_Part):
    ranker: Literal["auto", "none", "default-2024-11-15", "default_2024_08_21"] | None = None
    score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class Search(_Lenient):
    query: str | list[str]
    max_num_results: int = Field(default=10, ge=1, le=MAX_RESULTS)
    filters: dict[str, Any] | None = None
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False  # accepted; the query is searched as written

    @field_validator("query")
    @classmethod
    def _bounded(cls, value: str | list[str]) -> str | list[str]:
        queries = [value] if isinstance(value, str) else value
        if not 1 <= len(queries) <= MAX_QUERIES or any(not q.strip() or len(q) > MAX_QUERY_CHARS for q in queries):
            raise ValueError(
                f"must be a non-empty string, or a list of 1 to {MAX_QUERIES}, of at most {MAX_QUERY_CHARS} characters"
            )
        return value
