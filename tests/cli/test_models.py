"""`hearth search/ls/rm` in subprocesses, with HEARTH_HOME in a temp dir and HF_ENDPOINT at the fake Hub."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.library import ModelFile, open_library
from tests.fakehub import gguf_repo, mlx_repo

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, endpoint: str = "http://127.0.0.1:9", stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost")
    env.pop("HF_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        input=stdin,
    )


def test_commands_attach_to_a_parser():
    from app.cli.models import MODEL_COMMANDS, add_model_commands, cmd_rm

    parser = argparse.ArgumentParser()
    add_model_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rm", "x", "--yes"])
    assert args.handler is cmd_rm and args.yes and args.model == "x"
    assert set(MODEL_COMMANDS) == {"search", "ls", "rm", "import"}


def test_search_prints_a_table(fake_hub):
    fake_hub.add_repo(gguf_repo("alice/Llama-GGUF", downloads=1_500_000, likes=42))
    fake_hub.add_repo(gguf_repo("bob/Llama-small-GGUF", downloads=900, likes=3))
    fake_hub.add_repo(mlx_repo("mlx-community/Llama-4bit", downloads=5))
    proc = run("search", "llama", endpoint=fake_hub.url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "DOWNLOADS", "LIKES", "UPDATED"]
    assert lines[2].split()[:3] == ["alice/Llama-GGUF", "1.5M", "42"]
    assert lines[3].split()[:3] == ["bob/Llama-small-GGUF", "900", "3"]
    assert "mlx-community" not in proc.stdout
    proc = run("search", "llama", "--format", "mlx", "--sort", "likes", "--limit", "1", endpoint=fake_hub.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split()[0] == "mlx-community/Llama-4bit"
    req = fake_hub.requests("GET", "/api/models")[-1]
    assert req.query["filter"] == ["mlx"] and req.query["sort"] == ["likes"] and req.query["limit"] == ["1"]


def test_search_offline_is_a_clear_error():
    proc = run("search", "llama", endpoint="http://127.0.0.1:9")
    assert proc.returncode == 1
    assert "can't reach the Hub at http://127.0.0.1:9" in proc.stderr


def _setup_library(tmp_path):
    lib = open_library()
    content = b"weights" * 1000
    f = lib.models_dir / "org" / "Repo-GGUF" / "Repo-Q4_K_M.gguf"
    f.parent.mkdir(parents=True)
    f.write_bytes(content)
    dl = lib.add_download(
        repo_id="org/Repo-GGUF",
        commit="c" * 40,
        format="gguf",
        quant="Q4_K_M",
        files=[ModelFile(f, len(content), hashlib.sha256(content).hexdigest())],
    )
    outside = tmp_path / "mine" / "other-Q8_0.gguf"
    outside.parent.mkdir()
    outside.write_bytes(b"x" * 2048)
    imp = lib.add(
        name="other-Q8_0",
        format="gguf",
        quant="Q8_0",
        path=outside,
        files=[ModelFile(outside, 2048, None)],
        source="import",
    )
    lib.close()
    return dl, imp


def test_ls_lists_the_library_with_total(tmp_path):
    assert "No models yet" in run("ls").stdout
    dl, imp = _setup_library(tmp_path)
    proc = run("ls")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.splitlines()[0].split() == ["NAME", "FORMAT", "QUANT", "SIZE", "PATH", "LAST", "USED"]
    assert "Repo-GGUF:Q4_K_M" in out and str(dl.path) in out and "6.8 KiB" in out
    assert "other-Q8_0" in out and str(imp.path) in out
    assert "2 models, 8.8 KiB in total" in out
    imp.path.unlink()
    assert "other-Q8_0 [missing]" in run("ls").stdout


def test_rm_asks_then_frees_space(tmp_path):
    dl, imp = _setup_library(tmp_path)
    proc = run("rm", "org/Repo-GGUF:Q4_K_M", stdin="n\n")
    assert proc.returncode == 1 and "Nothing removed" in proc.stdout and dl.path.exists()
    proc = run("rm", "org/Repo-GGUF:Q4_K_M", stdin="y\n")
    assert proc.returncode == 0, proc.stderr
    assert "freed 6.8 KiB (7000 bytes)" in proc.stdout
    assert not dl.path.exists()
    proc = run("rm", "other-Q8_0", "--yes")
    assert proc.returncode == 0 and "(0 bytes)" in proc.stdout
    assert imp.path.exists()  # imported in place: forgotten, not deleted
    lib = open_library()
    assert lib.list() == []
    lib.close()


def test_rm_unknown_model():
    proc = run("rm", "nothing-here", "--yes")
    assert proc.returncode == 1 and "no model 'nothing-here'" in proc.stderr


@pytest.mark.parametrize("argv", [["search", "--format", "onnx"], ["search", "--sort", "stars"]])
def test_search_rejects_bad_choices(argv):
    assert run(*argv).returncode == 2


def test_import_adds_models_in_place_lists_what_it_skipped_and_exits_by_outcome(tmp_path):
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf
    from tests.fixtures.tiny_mlx import write_tiny_mlx_model

    folder = tmp_path / "models"
    folder.mkdir()
    good = write_tiny_llama_gguf(folder / "tiny-F16.gguf")
    (folder / "broken-Q4_0.gguf").write_bytes(b"GGUF" + b"\0" * 40)
    mlx = write_tiny_mlx_model(tmp_path / "tiny-mlx")
    assert run("import").returncode == 2  # nothing asked for
    proc = run("import", str(folder), str(mlx))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("Imported ") == 2 and "2 models in your library now" in proc.stdout
    assert "skipped" in proc.stderr and "broken-Q4_0.gguf" in proc.stderr
    lib = open_library()
    try:
        paths = sorted(str(m.path) for m in lib.list())
    finally:
        lib.close()
    assert paths == sorted([str(good), str(mlx)])  # in place: nothing copied
    assert good.exists() and "2 models" in run("ls").stdout
    proc = run("import", str(tmp_path / "nowhere"))
    assert proc.returncode == 1 and "Nothing imported" in proc.stdout and "no such file or folder" in proc.stderr
