"""T6–T8: hostile remote names and planted symlinks are refused before any write or request."""

from __future__ import annotations

import os

import pytest

from app.core.downloads import DownloadManager, FileDownload, RemoteFile, Source, Target
from app.core.downloads.errors import RefusedFileTypeError, UnsafePathError
from app.core.downloads.paths import check_file_type, destination, repo_folder, validate_remote_name
from tests.core.downloads.conftest import REPO, gets
from tests.fakehub import HOSTILE_NAMES, hostile_repo

MORE_HOSTILE = [
    "a/../../x.gguf",
    "a//x.gguf",
    "./x.gguf",
    "x.gguf.",
    "x.gguf ",
    "CON.gguf",
    "a/nul.json",
    "x\x00.gguf",
    "x\n.gguf",
    "C:/x.gguf",
    "\\x.gguf",
    "a/b\\c.gguf",
    "lpt1",
    "",
]


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, *MORE_HOSTILE])
def test_hostile_names_are_rejected(name, tmp_path):
    with pytest.raises(UnsafePathError):
        validate_remote_name(name)
    with pytest.raises(UnsafePathError):
        destination(tmp_path, name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    [
        "Q4/m-00001-of-00003.gguf",
        "model.safetensors",
        "config.json",
        "tokenizer.model",
        "chat_template.jinja",
        "README.md",
        "notes.txt",
    ],
)
def test_ordinary_names_pass(name, tmp_path):
    assert validate_remote_name(name) == name
    check_file_type(name)
    assert destination(tmp_path, name) == tmp_path.resolve().joinpath(*name.split("/"))


@pytest.mark.parametrize("name", ["evil.py", "pytorch_model.bin", "w.pt", "w.pth", "w.pkl", "w.ckpt", "x.model"])
def test_refused_file_types(name):
    with pytest.raises(RefusedFileTypeError):
        check_file_type(name)


def test_repo_folder_is_validated():
    assert repo_folder("a/b") == "a/b" and repo_folder("a/b", "4.0bpw") == "a/b@4.0bpw"
    for bad in ("a", "../b", "a/..", "a/b/c", "a\\b"):
        with pytest.raises(UnsafePathError):
            repo_folder(bad)


def test_hostile_repo_rejected_by_manager_and_downloader(fake_hub, tmp_path, models_dir):
    repo = fake_hub.add_repo(hostile_repo())
    snap = repo.snapshot("main")
    manager = DownloadManager(models_dir, tmp_path / "state.json", endpoint=fake_hub.url)
    try:
        for name in HOSTILE_NAMES:
            f = snap.files[name]
            with pytest.raises(UnsafePathError):
                manager.add_file(repo.repo_id, RemoteFile(name, f.size, f.sha256), commit=snap.commit)
            naive = models_dir / repo.repo_id / name  # what a careless join would produce
            with pytest.raises(UnsafePathError):
                FileDownload(
                    Source(fake_hub.resolve_url(repo.repo_id, name), name, f.sha256, size=f.size),
                    Target(naive, models_dir),
                ).run()
    finally:
        manager.close()
    assert manager.items() == []
    assert gets(fake_hub, "") == []  # not one request
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert written in (["models"], ["models", "state.json"])


def test_planted_symlink_is_refused(fake_hub, repo, make_dl, models_dir, tmp_path, client):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, models_dir / "org")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        make_dl().run(client)
    assert list(outside.iterdir()) == [] and gets(fake_hub) == []


def test_symlinked_part_file_is_refused(fake_hub, repo, make_dl, models_dir, tmp_path, client):
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    (models_dir / REPO).mkdir(parents=True)
    os.symlink(target, models_dir / REPO / "m.gguf.part")
    with pytest.raises(UnsafePathError):
        make_dl().run(client)
    assert target.read_text() == "keep me" and gets(fake_hub) == []
