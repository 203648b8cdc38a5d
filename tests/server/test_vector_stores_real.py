"""End to end with real models and OpenAI's own clients: SmolLM2 answers, the tiny BERT GGUF embeds, both on
one ModelPool behind a live server with the app's Documents. A file is uploaded, put in a vector store and
polled until indexed, searched, and a Responses turn with the file_search tool returns its call and a reply
citing the file; openai-agents' FileSearchTool runs the same turn through an Agent."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from app.core.documents.service import Documents
from app.core.documents.vector_stores import VectorStores
from app.core.library import Library, import_path
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.server.app import create_app
from app.server.context import ServerContext
from app.server.runner import ServerThread

pytestmark = pytest.mark.slow

NOTE = (
    "# The lighthouse\n\nThe lighthouse on Gull Island was built in 1874. Its keeper, Mara Quill, lit the lamp "
    "every night for forty years.\n"
)
QUESTION = "Who was the keeper of the lighthouse on Gull Island?"


@pytest.fixture(scope="module")
def served(smollm2_gguf: Path, tiny_encoder_gguf: Path, tmp_path_factory):
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.core.engines import default_registry

    folder = tmp_path_factory.mktemp("vector-stores-real")
    library = Library(folder / "models", folder / "library.db")
    chat = import_path(library, smollm2_gguf).imported[0]
    import_path(library, tiny_encoder_gguf)
    resolver = ModelResolver(library)
    pool = ModelPool(default_registry(), resolver=resolver, name="test-vs-pool")
    documents = Documents(
        folder / "data" / "documents.sqlite3",
        pool.submit,
        library,
        role_of=resolver.role,
        context_of=resolver.context_length,
        watch_s=3600,
    )
    documents.start()
    context = ServerContext(pool, library, resolver, stores=VectorStores.over(documents, folder / "data" / "uploads"))
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    client = openai.OpenAI(base_url=runner.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    yield client, chat.name, folder
    runner.stop(5)
    documents.close()
    pool.shutdown(10)
    library.close()


@pytest.fixture(scope="module")
def store(served):
    client, _chat, folder = served
    note = folder / "lighthouse.md"
    note.write_text(NOTE)
    made = client.vector_stores.create(name="lighthouse")
    assert "encoder" in made.model_extra["embedding_model"]  # the library's embedding model, said by name
    with note.open("rb") as f:
        uploaded = client.files.create(file=f, purpose="assistants")
    added = client.vector_stores.files.create_and_poll(
        vector_store_id=made.id, file_id=uploaded.id, poll_interval_ms=100
    )
    assert added.status == "completed", added.last_error
    return made.id, uploaded.id


def test_the_uploaded_file_is_found_by_search(served, store):
    client, _chat, _folder = served
    store_id, file_id = store
    hits = list(client.vector_stores.search(store_id, query="lighthouse keeper Mara Quill", max_num_results=3))
    assert hits and hits[0].file_id == file_id and hits[0].filename == "lighthouse.md"
    assert "Mara Quill" in hits[0].content[0].text


def test_a_responses_turn_searches_and_cites_the_file(served, store):
    client, chat, _folder = served
    store_id, file_id = store
    response = client.responses.create(
        model=chat,
        instructions="You are a helpful assistant who answers in English.",
        input=QUESTION,
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
        include=["file_search_call.results"],
        temperature=0,
        max_output_tokens=48,
    )
    call = response.output[0]
    assert call.type == "file_search_call" and call.status == "completed" and call.queries == [QUESTION]
    assert call.results and call.results[0].file_id == file_id and "Mara Quill" in (call.results[0].text or "")
    message = response.output[-1]
    assert message.type == "message" and response.output_text.strip()
    citations = [a for a in message.content[0].annotations if a.type == "file_citation"]
    assert citations and all(c.file_id == file_id and c.filename == "lighthouse.md" for c in citations)


def test_openai_agents_file_search_tool_runs_against_hearth(served, store):
    agents = pytest.importorskip("agents", reason="openai-agents is not installed")
    client, chat, _folder = served
    store_id, file_id = store
    model = agents.OpenAIResponsesModel(
        model=chat,
        openai_client=openai.AsyncOpenAI(base_url=str(client.base_url), api_key="unused", max_retries=0, timeout=300),
    )
    agent = agents.Agent(
        name="librarian",
        instructions="You are a helpful assistant who answers in English.",
        model=model,
        model_settings=agents.ModelSettings(temperature=0, max_tokens=48),
        tools=[agents.FileSearchTool(vector_store_ids=[store_id], max_num_results=3, include_search_results=True)],
    )
    result = agents.Runner.run_sync(agent, QUESTION, run_config=agents.RunConfig(tracing_disabled=True))
    calls = [i.raw_item for i in result.new_items if getattr(i.raw_item, "type", None) == "file_search_call"]
    assert calls and calls[0].results and calls[0].results[0].file_id == file_id
    assert isinstance(result.final_output, str) and result.final_output.strip()
