"""bench/run_all.py and the benches it launches agree on their arguments: every command line run_all would build
(quick and full, llama-server built or not) parses with that bench's own parser, and every script in bench/ is
either run by `make bench` or listed as run by hand. The benches are imported for their build_parser(), never
run."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def load(stem: str):
    """bench/<stem>.py as a module (its top level only: imports and constants)."""
    name = f"hearth_bench_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved  # the scripts put bench/ first on the path for their siblings; not for other tests
    return module


run_all = load("run_all")
bench_args = load("bench_args")


class ParserError(Exception):
    pass


def parser_of(script: str) -> argparse.ArgumentParser:
    parser = load(Path(script).stem).build_parser()

    def error(message: str):  # argparse would print usage and exit; the test wants the reason
        raise ParserError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


CASES = [
    pytest.param(bench, quick, peers, id=f"{bench.name}-{'quick' if quick else 'full'}-{'peers' if peers else 'none'}")
    for bench in run_all.BENCHES
    for quick in (True, False)
    for peers in (Path("/opt/llama/bin"), None)
]


@pytest.mark.parametrize(("bench", "quick", "peers"), CASES)
def test_every_bench_accepts_the_arguments_run_all_gives_it(bench, quick, peers, tmp_path):
    out = tmp_path / f"{bench.name}.json"
    cmd, reason, _notes = run_all.command_for(bench, quick, out, peers)
    if cmd is None:
        assert bench.peer == "required" and peers is None, reason  # the one case run_all skips on purpose
        return
    assert cmd[:2] == [sys.executable, str(BENCH / bench.script)]
    try:
        args = parser_of(bench.script).parse_args(cmd[2:])
    except ParserError as exc:
        pytest.fail(f"{bench.script} refuses what run_all gives it, {cmd[2:]}: {exc}")
    if bench.out_flag:
        assert Path(getattr(args, bench.out_flag.lstrip("-").replace("-", "_"))) == out
    if bench.peer:
        assert (args.bin == peers) if peers else args.no_peer


def test_every_script_in_bench_is_run_by_make_bench_or_listed_as_run_by_hand():
    scripts = {p.name for p in BENCH.glob("*.py")}
    launched = {b.script for b in run_all.BENCHES}
    assert not launched & run_all.BY_HAND.keys() and not launched & run_all.NOT_BENCHES
    assert scripts == launched | run_all.BY_HAND.keys() | run_all.NOT_BENCHES


@pytest.mark.parametrize("bench", [b for b in run_all.BENCHES if b.peer], ids=lambda b: b.name)
def test_a_bench_that_uses_llama_server_takes_the_shared_peer_flags(bench):
    """--bin on every one; --no-peer on every one run_all may run without llama-server (a "required" one may
    have it too, for a run by hand, but run_all never gives it)."""
    flags = {flag for action in parser_of(bench.script)._actions for flag in action.option_strings}
    assert bench_args.BIN in flags
    if bench.peer == "optional":
        assert bench_args.NO_PEER in flags


def test_bin_defaults_to_llama_bin_and_is_used_without_a_build(monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_BIN", str(tmp_path))
    parser = argparse.ArgumentParser()
    bench_args.add_peers(parser)
    args = parser.parse_args([])
    assert args.bin == tmp_path and not args.no_peer
    monkeypatch.setattr(bench_args.subprocess, "run", lambda *a, **k: pytest.fail("built llama-server"))
    assert bench_args.peer_dir(args) == tmp_path
    assert bench_args.peer_dir(parser.parse_args(["--bin", "/x/bin"])) == Path("/x/bin")
    required = argparse.ArgumentParser()
    bench_args.add_peers(required, optional=False)
    with pytest.raises(SystemExit):
        required.parse_args(["--no-peer"])


def test_the_peers_are_found_only_where_both_programs_are_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_BIN", str(tmp_path))
    assert bench_args.built_peer_dir() is None
    server, llama_bench = (tmp_path / exe for exe in bench_args.PEER_EXECUTABLES)
    for exe in (server, llama_bench):
        exe.write_text("#!/bin/sh\n")
    os.chmod(server, 0o755)
    assert bench_args.built_peer_dir() is None  # llama-bench is not executable yet
    os.chmod(llama_bench, 0o755)
    assert bench_args.built_peer_dir() == tmp_path
    assert run_all.peer_bin_dir() == tmp_path
