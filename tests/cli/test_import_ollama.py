"""`hearth import --ollama`: Ollama's models in place, named NAME:TAG, and the folder it looked in said; with
nothing there, where it looked for it."""

from __future__ import annotations

from app.core.library import open_library
from tests.cli.test_models import run
from tests.core.library.test_ollama_import import MODEL, FakeOllama


def test_import_ollama_names_each_model_name_tag_and_says_where_it_looked(tmp_path, tiny_gguf_f16, monkeypatch):
    fake = FakeOllama(tmp_path / "ollama")
    digest = fake.blob(tiny_gguf_f16.read_bytes())
    fake.manifest("tiny:latest", [(MODEL, digest)])
    monkeypatch.setenv("OLLAMA_MODELS", str(fake.root))
    proc = run("import", "--ollama")
    assert proc.returncode == 0, proc.stderr
    assert "Imported tiny:latest (gguf" in proc.stdout and f"Looked in {fake.root}." in proc.stdout
    lib = open_library()
    try:
        (model,) = [m for m in lib.list() if m.name == "tiny:latest"]
    finally:
        lib.close()
    assert model.path == fake.root / "blobs" / digest.replace(":", "-")  # in place
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nowhere"))
    proc = run("import", "--ollama")
    assert proc.returncode == 1 and f"Not there: {tmp_path / 'nowhere'}." in proc.stdout
