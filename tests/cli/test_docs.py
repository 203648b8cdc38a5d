"""`hearth docs` as a user runs it: a folder added to a new collection is indexed with the library's embedding
model (a tiny real BERT GGUF), listed, searched (keywords without a model, hybrid with it), synced after a
change, and removed; without an embedding model the error says what to download."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import hearth, isolated_env


@pytest.fixture
def env(tmp_path):
    return isolated_env(tmp_path, "http://127.0.0.1:9")  # no Hub is asked anything


def _folder(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "tea.md").write_text("# Tea\n\nThe kettle boils water for green tea.\n")
    (root / "disk.txt").write_text("Error E1042 means the disk is full.\n")
    (root / "broken.docx").write_bytes(b"PK\x03\x04 not a zip")
    return root


def test_without_an_embedding_model_add_names_what_to_download(tmp_path, env):
    proc = hearth("docs", "add", str(_folder(tmp_path)), env=env)
    assert proc.returncode == 2 and "hearth pull" in proc.stderr and "embedding model" in proc.stderr
    assert "no collections yet" in hearth("docs", "ls", env=env).stdout


def test_add_ls_search_sync_and_rm(tmp_path, env, tiny_encoder_gguf, tiny_gguf_f16):
    assert hearth("import", str(tiny_encoder_gguf), str(tiny_gguf_f16), env=env).returncode == 0
    root = _folder(tmp_path)
    proc = hearth("docs", "add", str(root), "-c", "Notes", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "2 indexed" in proc.stdout and "1 failed" in proc.stdout and "broken.docx" in proc.stdout
    assert "encoder" in proc.stderr  # the collection says which model embeds it

    listed = json.loads(hearth("docs", "ls", "--json", env=env).stdout)
    assert [(c["name"], c["files"], c["passages"] >= 2) for c in listed] == [("Notes", 3, True)]
    files = {
        f["path"].rsplit("/", 1)[-1]: f for f in json.loads(hearth("docs", "ls", "Notes", "--json", env=env).stdout)
    }
    assert files["tea.md"]["state"] == "indexed" and files["broken.docx"]["state"] == "failed"

    hits = json.loads(hearth("docs", "search", "E1042", "--keywords", "--json", env=env).stdout)
    assert hits[0]["file"].endswith("disk.txt") and hits[0]["keyword_rank"] == 1
    proc = hearth("docs", "search", "kettle water", "-c", "notes", "--json", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)
    assert hits[0]["file"].endswith("tea.md") and hits[0]["vector_rank"] is not None

    (root / "disk.txt").write_text("Error E2000 means the network is down.\n")
    proc = hearth("docs", "sync", "Notes", env=env, timeout=300)
    assert proc.returncode == 0 and "1 indexed" in proc.stdout and "1 unchanged" not in proc.stdout, proc.stdout
    assert json.loads(hearth("docs", "search", "E1042", "--keywords", "--json", env=env).stdout) == []

    proc = hearth("docs", "add", str(root), "-c", "Notes", "--model", "tiny-llama", env=env)
    assert proc.returncode == 2 and "keeps its model" in proc.stderr
    proc = hearth("docs", "add", str(root), "-c", "Other", "--model", tiny_gguf_f16.stem, env=env)
    assert proc.returncode == 2 and "not an embedding model" in proc.stderr

    assert hearth("docs", "rm", "Notes", str(root / "tea.md"), env=env).returncode == 0
    assert hearth("docs", "rm", "Notes", env=env).returncode == 0
    proc = hearth("docs", "search", "kettle", "--keywords", env=env)
    assert proc.returncode == 2 and "no collections yet" in proc.stderr


def test_a_bundle_reads_a_document_through_the_hearth_command(tmp_path, env):
    # A frozen app has no `python -m`: parse_in_child runs `Hearth --hearth-parse-document PATH`.
    note = tmp_path / "note.md"
    note.write_text("# Lamp\n\nThe brass lamp is lit.\n")
    proc = hearth("--hearth-parse-document", str(note), env=env)
    assert proc.returncode == 0, proc.stderr
    from app.core.documents.parse_child import from_payload

    (section,) = from_payload(json.loads(proc.stdout)).sections
    assert section.heading == "Lamp" and "brass lamp" in section.text


def test_run_answers_from_a_collection_and_lists_its_sources(tmp_path, env, tiny_encoder_gguf, tiny_gguf_f16):
    assert hearth("import", str(tiny_encoder_gguf), str(tiny_gguf_f16), env=env).returncode == 0
    root = _folder(tmp_path)
    assert hearth("docs", "add", str(root), "-c", "Notes", env=env, timeout=300).returncode == 0
    proc = hearth(
        "run", str(tiny_gguf_f16), "What does E1042 mean?", "--docs", "notes", "--max-tokens", "8", "--temp", "0",
        env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # a random tiny model cites nothing, so every passage it was given is listed, the best first
    assert "Passages given (none cited):\n[1] " in proc.stdout and "disk.txt" in proc.stdout
    proc = hearth("run", str(tiny_gguf_f16), "q", "--docs", "Nope", env=env, timeout=120)
    assert proc.returncode == 2 and "no collection named 'Nope'" in proc.stderr


def test_chat_answers_each_message_from_a_collection(tmp_path, env, tiny_encoder_gguf, tiny_gguf_f16):
    import subprocess
    import sys

    from tests.cli.helpers import ROOT

    assert hearth("import", str(tiny_encoder_gguf), str(tiny_gguf_f16), env=env).returncode == 0
    assert hearth("docs", "add", str(_folder(tmp_path)), "-c", "Notes", env=env, timeout=300).returncode == 0
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "chat", str(tiny_gguf_f16), "--docs", "Notes", "--max-tokens", "4"],
        input="What does E1042 mean?\nAnd the kettle?\n/exit\n",
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("Passages given (none cited):") == 2 and "tea.md" in proc.stdout


def test_run_docs_says_why_when_the_embedding_model_fails(monkeypatch):
    # A model that fails mid-search (its file gone, the engine refusing) is the command's error, not a traceback.
    import argparse

    from app.cli import docs
    from app.cli.engine import _document_sources
    from app.core.documents.embedding import EmbeddingFailed
    from app.core.errors import HearthError

    def failing(*_a, **_k):
        raise EmbeddingFailed("the model file is gone", "load_failed")

    monkeypatch.setattr(docs, "search", failing)
    args = argparse.Namespace(docs="Notes", prompt="q", ctx=4096)
    with pytest.raises(HearthError, match="could not be searched: the model file is gone"):
        _document_sources(None, args)
