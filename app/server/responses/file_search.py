"""The Responses API's file_search tool, run by this server over its vector stores (the documents).

OpenAI's models decide when to search; a small local model calls a tool unreliably, so the server searches
the user's last message before the model answers, as the chat's Documents menu does: one
`file_search_call` item first in the output (its `results` only when the request includes
"file_search_call.results"), the passages numbered in the user's message with their markup made inert
(T58: a document is data and cannot end the turn or forge one), and the reply's [n] markers read back as
`file_citation` annotations.

When the reply cites no passage by number, its text is annotated with the top passage's file all the same,
at the end of the text: the reply was written with that passage before it, small models seldom write the
markers, and without a citation a client could not show where an answer came from. Only the top file, so
an answer is never credited to passages ranked below it; the `file_search_call` results stay the exact
record of what was retrieved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from app.core.chat.grounding import Source, grounded_question, sources_within
from app.core.documents.vector_stores import SearchResult
from app.core.engines.base import ChatMessage
from app.server.context import ServerContext
from app.server.documents_calls import documents_call
from app.server.replies import new_id
from app.server.responses.schemas import FileSearchToolR

INCLUDE_RESULTS = "file_search_call.results"
DEFAULT_RESULTS = 10  # OpenAI's default max_num_results
# What the passages may take of the prompt, in tokens (grounding.CHARS_PER_TOKEN each): room for several
# passages and the answer in the smallest contexts local models run at (2,048 tokens and up).
BUDGET_TOKENS = 1200
_MARKER = re.compile(r"\[(\d{1,3})\]")


@dataclass
class FileSearch:
    item: dict[str, Any]  # the file_search_call output item
    sources: list[Source] = field(default_factory=list)
    files: dict[int, tuple[str, str]] = field(default_factory=dict)  # source number -> (file id, filename)

    def annotations(self, text: str) -> list[dict[str, Any]]:
        """file_citation annotations for the [n] markers in a reply, at each marker; without any, the top
        source's file at the end of the text (see the module's docstring)."""
        out = []
        for m in _MARKER.finditer(text):
            cited = self.files.get(int(m.group(1)))
            if cited is not None:
                out.append(_citation(cited, m.start()))
        if not out and self.files and text.strip():
            out.append(_citation(self.files[min(self.files)], len(text)))
        return out


def _citation(file: tuple[str, str], index: int) -> dict[str, Any]:
    return {"type": "file_citation", "file_id": file[0], "filename": file[1], "index": index}


def last_user_text(messages: list[ChatMessage]) -> tuple[int, str] | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i, messages[i].content
    return None


async def run_file_search(
    ctx: ServerContext, tool: FileSearchToolR, param: str, messages: list[ChatMessage], include: list[str] | None
) -> tuple[FileSearch, list[ChatMessage]]:
    """Search for the user's last message; the call's item and the messages with the passages before it.
    API errors: no documents here (400), an unknown store (404, naming the tool), a bad filter (400)."""
    stores = ctx.vector_stores()
    found = last_user_text(messages)
    query = found[1].strip() if found else ""
    results: list[SearchResult] = []
    if query:
        ranking = tool.ranking_options
        results = await documents_call(
            stores.search,
            tool.vector_store_ids,
            [query],
            limit=tool.max_num_results or DEFAULT_RESULTS,
            filters=tool.filters,
            rerank=ranking is None or ranking.ranker != "none",
            score_threshold=(ranking.score_threshold or 0.0) if ranking is not None else 0.0,
            param=f"{param}.vector_store_ids",
        )
    sources = sources_within([r.hit for r in results], BUDGET_TOKENS)
    # sources_within keeps the hits' order, numbered from 1: source n is results[n - 1].
    files = {s.number: (results[s.number - 1].file_id, results[s.number - 1].filename) for s in sources}
    item: dict[str, Any] = {
        "id": new_id("fs_"),
        "type": "file_search_call",
        "status": "completed",
        "queries": [query] if query else [],
        "results": None,
    }
    if include and INCLUDE_RESULTS in include:
        item["results"] = [
            {
                "file_id": r.file_id,
                "filename": r.filename,
                "score": r.score,
                "text": r.text,
                "attributes": r.attributes,
            }
            for r in results
        ]
    grounded = list(messages)
    if found is not None and sources:
        at, question = found
        text = grounded_question(question, sources)
        shift = len(text) - len(question)  # the question ends the text: its images move by what went before
        images = grounded[at].images
        moved = [i.model_copy(update={"offset": i.offset + shift}) for i in images] if images else None
        grounded[at] = grounded[at].model_copy(update={"content": text, "images": moved})
    return FileSearch(item, sources, files), grounded
