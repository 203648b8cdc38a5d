"""The library store: in-place imports, downloads, delete, refresh, quarantine, events, persistence."""

from __future__ import annotations

import hashlib
import os

import pytest

from app.core.library import MISSING, QUARANTINED, READY, Library, ModelFile, import_path
from app.core.models.errors import ModelFileError
from tests.core.library.conftest import write_split_set


def test_import_gguf_file_in_place(library, gguf_copy, tmp_path):
    src = gguf_copy(tmp_path / "elsewhere" / "tiny-llama-F16.gguf")
    inode = src.stat().st_ino
    events = []
    library.changed.connect(events.append)
    (m,) = import_path(library, src).imported
    assert m.path == src and m.files[0].path.stat().st_ino == inode
    assert (m.format, m.quant, m.source, m.status) == ("gguf", "F16", "import", READY)
    assert m.size == src.stat().st_size
    assert list((tmp_path / "models").iterdir()) == []  # nothing copied
    assert events == [m.id]
    again = import_path(library, src).imported[0]
    assert again.id == m.id and len(library.list()) == 1


def test_an_entry_imported_through_a_symlinked_folder_is_found_by_the_files_real_path(library, gguf_copy, tmp_path):
    """The pool names a loaded model by its resolved path (a models folder that is a link to another disk): the
    library must know it by that path too, or /api/ps and the model lists leave the loaded model out."""
    real = gguf_copy(tmp_path / "disk" / "tiny-llama-F16.gguf")
    (tmp_path / "models-link").symlink_to(tmp_path / "disk", target_is_directory=True)
    (m,) = import_path(library, tmp_path / "models-link" / real.name).imported
    assert m.path == tmp_path / "models-link" / real.name  # kept as the user named it
    assert library.find(str(real.resolve())).id == m.id
    assert library.find(str(tmp_path / "models-link" / real.name)).id == m.id
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert library.find(str(tmp_path / "loop" / "x.gguf")) is None  # a loop of links is no match, not a crash
    assert library.find(str(tmp_path / "models-link" / "a\x00b.gguf")) is None  # a NUL from a request's model name


def test_import_folder_with_split_set_as_one_entry(library, gguf_copy, tmp_path):
    folder = tmp_path / "quants"
    shards = write_split_set(folder / "Q8_0")
    gguf_copy(folder / "Tiny-F16.gguf")
    result = import_path(library, folder)
    assert result.skipped == []
    by_quant = {m.quant: m for m in result.imported}
    assert set(by_quant) == {"Q8_0", "F16"}
    split = by_quant["Q8_0"]
    assert [f.path for f in split.files] == shards and split.path == shards[0]
    assert split.size == sum(p.stat().st_size for p in shards)
    assert library.total_size() == sum(m.size for m in result.imported)


def test_incomplete_split_set_is_skipped_with_reason(library, tmp_path):
    shards = write_split_set(tmp_path / "broken")
    shards[1].unlink()
    with pytest.raises(ModelFileError, match=r"incomplete: missing Tiny-Q8_0-00002-of-00003\.gguf"):
        import_path(library, tmp_path / "broken")
    assert library.list() == []


def _vocab_only_gguf(path):
    """A valid GGUF header with metadata and no tensor: what llama.cpp ships as ggml-vocab-*.gguf."""
    import struct

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    kv = string("general.architecture") + struct.pack("<I", 8) + string("llama")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv)
    return path


def test_a_gguf_with_no_tensors_is_not_imported_as_a_model(library, tmp_path):
    src = _vocab_only_gguf(tmp_path / "elsewhere" / "ggml-vocab-llama.gguf")
    with pytest.raises(ModelFileError, match="holds no tensors"):
        import_path(library, src)
    assert library.list() == []


def test_a_downloaded_gguf_with_no_tensors_is_quarantined_with_the_reason(library, tmp_path):
    from app.core.downloads.items import DownloadItem, RemoteFile
    from app.core.library.from_downloads import add_to_library

    path = _vocab_only_gguf(tmp_path / "models" / "org" / "Vocab-GGUF" / "vocab.gguf")

    class Manager:
        models_dir = tmp_path / "models"

        @staticmethod
        def dest(item, f):
            return path

    item = DownloadItem(
        id="d1",
        repo_id="org/Vocab-GGUF",
        commit="c" * 40,
        revision="main",
        label="Q8_0",
        files=[RemoteFile(path="vocab.gguf", size=path.stat().st_size)],
        folder="org/Vocab-GGUF",
    )
    model = add_to_library(library, Manager(), item)
    assert model.status == QUARANTINED and "no tensors" in model.reason


def test_import_mlx_folder(library, tiny_mlx_model):
    (m,) = import_path(library, tiny_mlx_model).imported
    assert m.format == "mlx" and m.path == tiny_mlx_model
    assert m.quant == "32-bit"
    names = {f.path.name for f in m.files}
    assert "config.json" in names and "model.safetensors" in names


def test_mlx_folder_asking_for_remote_code_refused(library, tiny_mlx_model, tmp_path):
    import json
    import shutil

    evil = tmp_path / "evil-mlx"
    shutil.copytree(tiny_mlx_model, evil)
    tok = json.loads((evil / "tokenizer_config.json").read_text()) if (evil / "tokenizer_config.json").exists() else {}
    tok["auto_map"] = {"AutoTokenizer": "evil.Tokenizer"}
    (evil / "tokenizer_config.json").write_text(json.dumps(tok))
    (evil / "evil.py").write_text("import os\n")
    with pytest.raises(ModelFileError, match="own code"):
        import_path(library, evil)


def test_invalid_gguf_refused_with_the_validator_message(library, gguf_copy, tmp_path):
    from app.core.models.gguf import validate_gguf

    bad = gguf_copy(tmp_path / "cut-F16.gguf")
    with open(bad, "r+b") as fh:
        fh.truncate(bad.stat().st_size - 100)
    with pytest.raises(ModelFileError) as expected:
        validate_gguf(bad)
    with pytest.raises(ModelFileError) as got:
        import_path(library, bad)
    assert str(expected.value) in str(got.value) and "cut-F16.gguf" in str(got.value)
    not_gguf = tmp_path / "notes.txt"
    not_gguf.write_text("hi")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        import_path(library, not_gguf)
    assert library.list() == []


def test_folder_with_one_bad_file_imports_the_rest(library, gguf_copy, tmp_path):
    gguf_copy(tmp_path / "mixed" / "good-F16.gguf")
    (tmp_path / "mixed" / "bad-Q4_0.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    result = import_path(library, tmp_path / "mixed")
    assert [m.name for m in result.imported] == ["good-F16"]
    assert [s.path.name for s in result.skipped] == ["bad-Q4_0.gguf"] and result.skipped[0].reason


def _download(library: Library, tmp_path, content=b"GGUF-bytes" * 100, verified=True):
    f = tmp_path / "models" / "org" / "Repo-GGUF" / "Repo-Q4_K_M.gguf"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(content)
    sha = hashlib.sha256(content).hexdigest()
    return library.add_download(
        repo_id="org/Repo-GGUF",
        commit="c" * 40,
        format="gguf",
        quant="Q4_K_M",
        files=[ModelFile(f, len(content), sha)],
        verified=verified,
    )


def test_add_download_find_and_touch(library, tmp_path):
    m = _download(library, tmp_path)
    assert (m.name, m.repo_id, m.commit, m.source, m.status) == (
        "Repo-GGUF:Q4_K_M",
        "org/Repo-GGUF",
        "c" * 40,
        "download",
        READY,
    )
    assert library.find("org/Repo-GGUF:Q4_K_M").id == m.id
    assert library.find("Repo-GGUF:Q4_K_M").id == m.id
    assert library.find(str(m.path)).id == m.id
    assert library.find("org/Repo-GGUF").id == m.id
    assert library.find(m.id).id == m.id
    assert library.find("nothing") is None
    assert library.find("~no-such-user-zz/x") is None  # a home that does not exist is no match, not a crash
    assert m.last_used_at is None
    library.touch(m.id)
    assert library.get(m.id).last_used_at is not None


def test_add_download_refuses_files_outside_models_folder(library, tmp_path):
    outside = tmp_path / "x.gguf"
    outside.write_bytes(b"x")
    with pytest.raises(ValueError, match="outside the models folder"):
        library.add_download(repo_id="a/b", commit="c", format="gguf", quant=None, files=[ModelFile(outside, 1, None)])


def test_delete_frees_space_inside_models_folder(library, tmp_path):
    m = _download(library, tmp_path)
    events = []
    library.changed.connect(events.append)
    assert library.delete(m.id) == 1000
    assert not m.path.exists() and not m.path.parent.exists()  # empty folders pruned
    assert (tmp_path / "models").is_dir()
    assert library.get(m.id) is None and events == [m.id]


def test_deleting_a_model_deletes_its_projector_unless_another_model_uses_it(library, tmp_path):
    folder = tmp_path / "models" / "org" / "Vision-GGUF"
    folder.mkdir(parents=True)
    paths = {n: folder / n for n in ("V-Q4_K_M.gguf", "V-Q8_0.gguf", "mmproj-V-F16.gguf")}
    for p in paths.values():
        p.write_bytes(b"x" * 10)
    projector = ModelFile(paths["mmproj-V-F16.gguf"], 10)
    q4, q8 = (
        library.add_download(
            repo_id="org/Vision-GGUF",
            commit="c" * 40,
            format="gguf",
            quant=q,
            files=[ModelFile(paths[n], 10), projector],
        )
        for q, n in (("Q4_K_M", "V-Q4_K_M.gguf"), ("Q8_0", "V-Q8_0.gguf"))
    )
    assert library.delete(q4.id) == 10  # the weights; the projector Q8_0 also loads stays
    assert paths["mmproj-V-F16.gguf"].exists() and not paths["V-Q4_K_M.gguf"].exists()
    assert library.delete(q8.id) == 20  # the last model that uses it takes it along
    assert not paths["mmproj-V-F16.gguf"].exists()


def test_delete_of_imported_entry_keeps_files_unless_asked(library, gguf_copy, tmp_path):
    src = gguf_copy(tmp_path / "mine" / "tiny-F16.gguf")
    m = import_path(library, src).imported[0]
    assert library.delete(m.id) == 0
    assert src.exists() and library.list() == []
    m = import_path(library, src).imported[0]
    size = src.stat().st_size
    assert library.delete(m.id, delete_imported=True) == size
    assert not src.exists()


def test_delete_never_follows_a_symlink_out_of_the_models_folder(library, tmp_path):
    target = tmp_path / "precious.gguf"
    target.write_bytes(b"keep me")
    link = tmp_path / "models" / "link.gguf"
    os.symlink(target, link)
    m = library.add(name="link", format="gguf", path=link, files=[ModelFile(link, 7, None)], source="import")
    assert library.delete(m.id) == 0
    assert target.read_bytes() == b"keep me" and not link.exists()


def test_refresh_marks_missing_and_back(library, tmp_path):
    m = _download(library, tmp_path)
    data = m.path.read_bytes()
    m.path.unlink()
    (after,) = library.refresh()
    assert after.status == MISSING and "Repo-Q4_K_M.gguf" in after.reason
    assert library.list(READY) == []
    m.path.write_bytes(data)
    assert library.refresh()[0].status == READY


def test_quarantined_never_listed_as_ready(library, tmp_path):
    bad = _download(library, tmp_path, verified=False)
    assert bad.status == QUARANTINED and not bad.ready
    assert library.list(READY) == [] and library.list(QUARANTINED)[0].id == bad.id


def test_verify_quarantines_a_flipped_byte(library, tmp_path):
    m = _download(library, tmp_path)
    assert library.verify(m.id)
    data = bytearray(m.path.read_bytes())
    data[10] ^= 0xFF
    m.path.write_bytes(bytes(data))
    assert library.refresh()[0].status == READY  # same size: only the hash can tell
    assert not library.verify(m.id)
    assert library.get(m.id).status == QUARANTINED
    assert library.list(READY) == []


def test_size_change_quarantines_on_refresh(library, tmp_path):
    m = _download(library, tmp_path)
    with open(m.path, "ab") as fh:
        fh.write(b"x")
    assert library.refresh()[0].status == QUARANTINED


def test_persists_across_instances_and_uses_wal(tmp_path):
    lib = Library(tmp_path / "models", tmp_path / "lib.db")
    m = _download(lib, tmp_path)
    lib.close()
    lib2 = Library(tmp_path / "models", tmp_path / "lib.db")
    assert lib2.get(m.id) == m
    assert lib2._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    lib2.close()


def test_two_files_of_one_name_get_names_of_their_own_that_stay(library, gguf_copy, tmp_path):
    """A model and its vision copy in another folder were two entries with one name, so one API id (issue 46)."""
    plain = import_path(library, gguf_copy(tmp_path / "plain" / "tiny.gguf")).imported[0]
    seeing = import_path(library, gguf_copy(tmp_path / "vision" / "tiny.gguf")).imported[0]
    third = import_path(library, gguf_copy(tmp_path / "a" / "vision" / "tiny.gguf")).imported[0]
    assert (plain.name, seeing.name, third.name) == ("tiny", "tiny (vision)", "tiny (2)")
    assert library.find("tiny (vision)").id == seeing.id and library.find("tiny").id == plain.id
    # Imported again, each keeps its name; reopened, too.
    assert import_path(library, seeing.path).imported[0].name == "tiny (vision)"
    assert import_path(library, plain.path).imported[0].name == "tiny"
    reopened = Library(library.models_dir, library.db_path)
    assert sorted(m.name for m in reopened.list()) == ["tiny", "tiny (2)", "tiny (vision)"]
    reopened.close()


def test_a_library_written_with_two_models_of_one_name_is_mended_on_open(library, gguf_copy, tmp_path):
    first = import_path(library, gguf_copy(tmp_path / "one" / "tiny.gguf")).imported[0]
    second = import_path(library, gguf_copy(tmp_path / "two" / "tiny.gguf")).imported[0]
    with library._lock:  # as an older Hearth wrote it
        library._db.execute("UPDATE models SET name = 'tiny' WHERE id = ?", (second.id,))
    reopened = Library(library.models_dir, library.db_path)
    assert {m.id: m.name for m in reopened.list()} == {first.id: "tiny", second.id: "tiny (two)"}
    reopened.close()
