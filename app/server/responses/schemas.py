"""Request bodies of the OpenAI Responses API (`POST /v1/responses`): as strict as the API about types and
bounds, lenient about fields it does not know. Input items are checked one by one in input.py,
so a mistake names the item it is in."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.server.request_fields import MAX_MESSAGES, MAX_TOKENS_CAP, JsonSchemaFormat, RequestBase

# Web search, which Codex offers on every request: a local model cannot search, so the tool is left out of the
# prompt and the model answers from what it knows, as it would with search switched off.
LEFT_OUT_TOOLS = frozenset({"web_search", "web_search_preview"})
# Tools that OpenAI's servers run or whose calls only its own models make (a remote MCP server, a code
# sandbox, images, the computer and shell tools): a client that offers one expects it to be used, so the
# request is refused naming the type rather than answered as if the tool were not there. File search is
# the one hosted tool this server runs (file_search.py), over the documents' vector stores.
HOSTED_TOOLS = frozenset(
    {
        "code_interpreter",
        "computer_use_preview",
        "image_generation",
        "mcp",
        "local_shell",
    }
)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionToolR(_Lenient):
    """A function tool, flat as the Responses API has it (not nested under "function")."""

    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomToolR(_Lenient):
    """A tool whose input is free text (Codex's apply_patch): the model sees a function with one string."""

    type: Literal["custom"]
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    format: dict[str, Any] | None = None


class NamespaceToolR(_Lenient):
    """A group of tools under one name (Codex's sub-agent tools): each is offered to the model, and a call
    to one goes back with its `namespace`."""

    type: Literal["namespace"]
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    tools: list[FunctionToolR | CustomToolR] = Field(default_factory=list, max_length=512)


class FileSearchRanking(_Lenient):
    ranker: str | None = Field(default=None, max_length=64)
    score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class FileSearchToolR(_Lenient):
    """OpenAI's hosted file search, which this server runs itself over its vector stores (collections)."""

    type: Literal["file_search"]
    vector_store_ids: list[Annotated[str, Field(max_length=200)]] = Field(min_length=1, max_length=16)
    max_num_results: int | None = Field(default=None, ge=1, le=50)
    filters: dict[str, Any] | None = None
    ranking_options: FileSearchRanking | None = None


class OtherToolR(_Lenient):
    type: str


class TextFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = Field(default=None, max_length=256)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    def as_json_schema(self) -> JsonSchemaFormat | None:
        if self.type != "json_schema":
            return None
        return JsonSchemaFormat.model_validate({"name": self.name or "response", "schema": self.schema_ or {}})


class TextOptions(_Lenient):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningOptions(_Lenient):
    # Accepted as the API has it; a local model reasons as its template and weights make it.
    # Any level a client names (new ones appear often): it is echoed back, never an error.
    effort: str | None = Field(default=None, max_length=32)
    summary: str | None = Field(default=None, max_length=32)


class ResponsesRequest(RequestBase):
    model: str | None = Field(default=None, max_length=512)
    input: str | Annotated[list[dict[str, Any]], Field(max_length=MAX_MESSAGES)] = ""
    instructions: str | None = None
    tools: list[FunctionToolR | CustomToolR | NamespaceToolR | FileSearchToolR | OtherToolR] | None = Field(
        default=None, max_length=512
    )
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_CAP)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = Field(default=None, max_length=256)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    user: str | None = Field(default=None, max_length=256)
    truncation: Literal["auto", "disabled"] | None = None  # never truncated: a prompt too long is refused
    include: list[str] | None = None
    # llama.cpp's extras that clients of local servers send; honoured, not required.
    seed: int | None = None
    top_k: int | None = Field(default=None, ge=0, le=100_000)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, ge=0.0, le=10.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
