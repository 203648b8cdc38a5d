"""`hearth pull` in a subprocess against the fake Hub: the file lands in the models folder and `hearth ls` lists it."""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
from pathlib import Path

import pytest

from app.cli.pull import add_pull_command, parse_spec, progress_line
from tests.cli.helpers import hearth, isolated_env
from tests.fakehub import gguf_repo

REPO = "org/Tiny-GGUF"


@pytest.fixture
def run(fake_hub, quant_files, tmp_path):
    fake_hub.add_repo(
        gguf_repo(REPO, quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    home = tmp_path / "home"
    env = isolated_env(tmp_path, fake_hub.url, home, QT_QPA_PLATFORM="offscreen")

    def run(module: str, *args: str) -> subprocess.CompletedProcess:
        return hearth(*args, env=env, module=module)

    run.home = home
    return run


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_a_named_quant_then_ls_lists_it(run, quant_files, fake_hub):
    proc = run("app.cli", "pull", f"{REPO}:q8_0")
    assert proc.returncode == 0, proc.stderr
    files = list(run.home.rglob("Tiny-Q8_0.gguf"))
    assert len(files) == 1 and sha(files[0]) == sha(quant_files["Q8_0"]) and "models" in files[0].parts
    assert "Done: Tiny-GGUF:Q8_0 (" in proc.stdout and str(files[0]) in proc.stdout
    assert proc.stderr.rstrip().splitlines()[-1].startswith("[" + "#" * 28 + "] 100.0%")  # the bar ends full
    assert not fake_hub.requests("GET", "Tiny-F16.gguf")  # only the chosen quant is fetched
    ls = run("app.cli", "ls")
    assert ls.returncode == 0, ls.stderr
    assert "Tiny-GGUF:Q8_0" in ls.stdout and str(files[0]) in ls.stdout

    again = run("app.cli", "pull", f"{REPO}:Q8_0")  # already there: nothing fetched twice
    assert again.returncode == 0, again.stderr
    fake_hub.wait_idle()
    gets = [r for r in fake_hub.requests("GET", "Tiny-Q8_0.gguf") if not r.range]
    assert len(gets) == 1


def test_pull_without_quant_takes_the_recommended_variant(run, quant_files):
    proc = run("app.cli", "pull", REPO)
    assert proc.returncode == 0, proc.stderr
    assert "Pulling org/Tiny-GGUF Q8_0" in proc.stdout  # F16 is no better than Q8_0 and twice the size
    assert list(run.home.rglob("Tiny-Q8_0.gguf")) and not list(run.home.rglob("Tiny-F16.gguf"))


def test_pull_unknown_quant_lists_what_exists(run):
    proc = run("app.cli", "pull", f"{REPO}:Q2_K")
    assert proc.returncode == 1
    assert "has no Q2_K" in proc.stderr and "F16" in proc.stderr and "Q8_0" in proc.stderr


def test_spec_parsing_and_the_parser():
    assert parse_spec("org/M:Q4_K_M") == ("org/M", "Q4_K_M", None)
    assert parse_spec("org/M@4.0bpw") == ("org/M", None, "4.0bpw")
    assert parse_spec(" org/M ") == ("org/M", None, None)
    parser = argparse.ArgumentParser()
    add_pull_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["pull", "org/M:Q8_0"])
    assert args.model == "org/M:Q8_0" and callable(args.handler)


def test_progress_line():
    line = progress_line(512 * 1024, 1024 * 1024, 256 * 1024, 2.0)
    assert line.startswith("[" + "#" * 14 + "-" * 14 + "]") and " 50.0%" in line and "2 s left" in line
    assert "/s" in line and isinstance(io.StringIO().write(line), int)
