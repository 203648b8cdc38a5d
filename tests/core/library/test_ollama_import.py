"""Ollama's models imported in place from a fake ~/.ollama tree (manifests and content-addressed blobs): named
NAME:TAG as Ollama shows them, the blob itself in the library (nothing copied), a projector layer paired when
it fits, and everything read from the tree treated as untrusted: digests must be sha256 hex, blobs must resolve
inside the blobs folder, manifests must be bounded JSON. Each import also says which folders it looked in."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from app.core.library import import_lmstudio, import_ollama
from app.core.library.ollama_import import ollama_roots, scan_ollama
from app.core.library.projectors import projector_of
from tests.fixtures.tiny_projector import write_tiny_projector

MODEL, PROJECTOR = "application/vnd.ollama.image.model", "application/vnd.ollama.image.projector"
TEMPLATE = "application/vnd.ollama.image.template"


class FakeOllama:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs").mkdir(parents=True, exist_ok=True)

    def blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (self.root / "blobs" / f"sha256-{digest}").write_bytes(data)
        return f"sha256:{digest}"

    def manifest(self, name: str, layers: list[tuple[str, str]], host: str = "registry.ollama.ai/library") -> Path:
        model, tag = name.split(":")
        path = self.root / "manifests" / host / model / tag
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64},
            "layers": [{"mediaType": media, "digest": digest, "size": 1} for media, digest in layers],
        }
        path.write_text(json.dumps(body))
        return path


@pytest.fixture
def ollama(tmp_path, tiny_gguf_f16) -> tuple[FakeOllama, str]:
    fake = FakeOllama(tmp_path / "home" / ".ollama" / "models")
    return fake, fake.blob(tiny_gguf_f16.read_bytes())


def blob_file(fake: FakeOllama, digest: str) -> Path:
    return fake.root / "blobs" / digest.replace(":", "-")


def test_ollama_models_are_imported_in_place_named_name_tag_with_their_projector(library, ollama, tmp_path):
    fake, model = ollama
    template = fake.blob(b"{{ .System }}{{ .Prompt }}")
    projector = fake.blob(write_tiny_projector(tmp_path / "p.gguf", n_embd_text=256).read_bytes())
    fake.manifest("tiny:latest", [(MODEL, model), (TEMPLATE, template), (PROJECTOR, projector)])
    fake.manifest("tiny:f16", [(MODEL, model), (TEMPLATE, template), (PROJECTOR, projector)])  # one blob, two tags
    result = import_ollama(library, [fake.root])
    (entry,) = result.imported
    assert entry.name == "tiny:latest" and entry.source == "ollama" and entry.format == "gguf"
    assert entry.path == blob_file(fake, model)  # the blob itself: in place, nothing copied
    assert entry.quant == "F16"  # from the header: a blob's name says nothing
    assert projector_of(entry) == blob_file(fake, projector)
    assert list(library.models_dir.iterdir()) == []
    assert result.skipped == [] and result.searched == [fake.root]
    (scanned, *_), refused = scan_ollama(fake.root)
    assert scanned.template == "{{ .System }}{{ .Prompt }}" and refused == []
    import_ollama(library, [fake.root])
    assert [m.name for m in library.list()] == ["tiny:latest"]  # again: no duplicate


def test_names_outside_ollamas_library_keep_their_namespace_and_a_foreign_projector_is_left_out(
    library, ollama, tmp_path
):
    fake, model = ollama
    other = fake.blob(write_tiny_projector(tmp_path / "o.gguf", n_embd_text=128).read_bytes())
    fake.manifest("Tiny-GGUF:Q8_0", [(MODEL, model), (PROJECTOR, other)], host="hf.co/someone")
    result = import_ollama(library, [fake.root])
    (entry,) = result.imported
    assert entry.name == "hf.co/someone/Tiny-GGUF:Q8_0"
    assert projector_of(entry) is None
    assert [s.path for s in result.skipped] == [blob_file(fake, other)]
    assert "made for a model 128 wide" in result.skipped[0].reason


def test_hostile_manifests_name_no_file_outside_the_blobs_folder(library, ollama, tmp_path):
    fake, model = ollama
    outside = tmp_path / "secret.gguf"
    outside.write_bytes(b"GGUF private")
    fake.manifest("escape:latest", [(MODEL, "sha256:../../../../secret.gguf")])
    fake.manifest("short:latest", [(MODEL, "sha256:abc")])
    fake.manifest("gone:latest", [(MODEL, "sha256:" + "1" * 64)])
    linked = "sha256:" + "2" * 64
    os.symlink(outside, blob_file(fake, linked))
    fake.manifest("linked:latest", [(MODEL, linked)])
    fake.manifest("twice:latest", [(MODEL, model), (MODEL, model)])
    junk = fake.manifest("junk:latest", [])
    junk.write_bytes(b"\xff not json")
    big = fake.manifest("big:latest", [])
    big.write_bytes(b" " * (2 << 20))
    fake.manifest("good:latest", [(MODEL, model)])
    odd = fake.root / "manifests" / "registry.ollama.ai" / "library" / ".hidden" / "latest"
    odd.parent.mkdir(parents=True)
    odd.write_text(json.dumps({"layers": [{"mediaType": MODEL, "digest": model}]}))
    result = import_ollama(library, [fake.root])
    assert [m.name for m in result.imported] == ["good:latest"]
    reasons = {s.path.parent.name: s.reason for s in result.skipped}
    assert set(reasons) == {"escape", "short", "gone", "linked", "twice", "junk", "big"}  # .hidden: not a name
    assert "not sha256 and 64 hex digits" in reasons["escape"] and "not sha256" in reasons["short"]
    assert "missing" in reasons["gone"] and "outside Ollama's blobs folder" in reasons["linked"]
    assert "several model layers" in reasons["twice"] and "not JSON" in reasons["junk"]
    assert "too large" in reasons["big"]
    assert all(m.path.is_relative_to(fake.root / "blobs") for m in library.list())


def test_a_blob_that_is_no_model_is_skipped_with_the_reason(library, ollama):
    fake, _ = ollama
    fake.manifest("broken:latest", [(MODEL, fake.blob(b"GGUF" + b"\0" * 40))])
    result = import_ollama(library, [fake.root])
    assert result.imported == [] and "broken:latest" in result.skipped[0].reason


def test_ollama_models_folder_comes_from_ollama_models_when_set(tmp_path, monkeypatch):
    assert ollama_roots({"OLLAMA_MODELS": str(tmp_path / "elsewhere")}) == [tmp_path / "elsewhere"]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ollama_roots({})[0] == tmp_path / "home" / ".ollama" / "models"


def test_every_import_from_another_app_says_where_it_looked(library, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    studio = import_lmstudio(library)
    assert studio.imported == [] and studio.searched == []
    assert str(tmp_path / "empty-home" / ".lmstudio" / "models") in studio.where()
    assert str(tmp_path / "empty-home" / ".cache" / "lm-studio" / "models") in studio.where()
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama-models"))
    assert f"Not there: {tmp_path / 'ollama-models'}." == import_ollama(library).where()
    (tmp_path / "lms").mkdir()
    assert import_lmstudio(library, [tmp_path / "lms"]).where() == f"Looked in {tmp_path / 'lms'}."
