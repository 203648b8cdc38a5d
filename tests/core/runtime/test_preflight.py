"""Preflight through the host: corrupt GGUFs (T5), code in MLX folders (T6), no fit (T27)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.registry import EngineRegistry
from app.core.errors import HearthError
from app.core.models.devices import Device, GiB, Machine
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import DefaultPreflight, format_for_path
from tests.fixtures.fake_engine import FakeEngine


def machine(free_bytes: int) -> Machine:
    return Machine("cpu", Device("CPU", "cpu", free_bytes, free_bytes, 20.0, "RAM"), cores=2, simd=("avx2",))


@pytest.fixture
def counting_host():
    """A host whose gguf/mlx engines are fakes that count how often they are created."""
    created: list[str] = []
    hosts = []

    def make(free_bytes: int = 16 * GiB) -> EngineHost:
        registry = EngineRegistry()
        for fmt in ("gguf", "mlx"):
            registry.register(fmt, fmt, lambda fmt=fmt: created.append(fmt) or FakeEngine())
        host = EngineHost(registry, preflight=DefaultPreflight(machine=lambda: machine(free_bytes)))
        hosts.append(host)
        return host

    yield make, created
    for h in hosts:
        assert h.shutdown(5)


def test_garbage_gguf_is_refused_before_any_engine(counting_host, tmp_path):
    make, created = counting_host
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"\x00not a gguf file at all" * 100)
    host = make()
    with pytest.raises(HearthError, match=r"magic|GGUF"):
        host.load_sync(LoadSpec(path=bad), "gguf")
    assert created == []
    assert host.state.status == "error" and host.state.error


def test_truncated_gguf_is_refused(counting_host, tmp_path, tiny_gguf_f16):
    make, created = counting_host
    data = tiny_gguf_f16.read_bytes()
    cut = tmp_path / "truncated.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    host = make()
    with pytest.raises(HearthError) as err:
        host.load_sync(LoadSpec(path=cut), "gguf")
    assert "past the end of the file" in str(err.value)
    assert created == []
    # The same host then loads the intact file.
    info = host.load_sync(LoadSpec(path=tiny_gguf_f16, n_ctx=256), "gguf")
    assert created == ["gguf"] and info.path == tiny_gguf_f16 and host.state.status == "ready"


def test_model_that_does_not_fit_is_refused_with_the_planners_explanation(counting_host, tiny_gguf_f16):
    make, created = counting_host
    host = make(free_bytes=1024 * 1024)  # 1 MiB free
    with pytest.raises(HearthError) as err:
        host.load_sync(LoadSpec(path=tiny_gguf_f16, n_ctx=256), "gguf")
    message = str(err.value)
    assert "will not fit" in message and "CPU:" in message and "usable" in message
    assert created == []
    assert host.state.status == "error" and "will not fit" in host.state.error


def test_plan_check_can_be_skipped(counting_host, tiny_gguf_f16):
    make, created = counting_host
    host = make(free_bytes=1024 * 1024)
    host.load_sync(LoadSpec(path=tiny_gguf_f16, n_ctx=256), "gguf", plan_check=False)
    assert created == ["gguf"]


def _mlx_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_mlx_folder_with_model_file_and_code_is_refused(counting_host, tmp_path, tiny_mlx_model):
    make, created = counting_host
    folder = _mlx_copy(tiny_mlx_model, tmp_path / "evil-mlx")
    config = json.loads((folder / "config.json").read_text())
    config["model_file"] = "evil.py"
    (folder / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "pwned"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    host = make()
    with pytest.raises(HearthError, match="code"):
        host.load_sync(LoadSpec(path=folder))
    assert created == [] and not marker.exists()
    (folder / "evil.py").unlink()  # the config alone is refused too
    with pytest.raises(HearthError, match="own code"):
        host.load_sync(LoadSpec(path=folder))
    assert created == []


def test_mlx_tokenizer_auto_map_is_refused(counting_host, tmp_path, tiny_mlx_model):
    make, created = counting_host
    folder = _mlx_copy(tiny_mlx_model, tmp_path / "automap-mlx")
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    tok["auto_map"] = {"AutoTokenizer": ["tok.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    host = make()
    with pytest.raises(HearthError, match="own code"):
        host.load_sync(LoadSpec(path=folder))
    assert created == [] and host.state.status == "error"


def test_clean_mlx_folder_passes(counting_host, tiny_mlx_model):
    make, created = counting_host
    host = make()
    host.load_sync(LoadSpec(path=tiny_mlx_model, n_ctx=256))
    assert created == ["mlx"]


def test_format_for_path(tmp_path, tiny_mlx_model):
    assert format_for_path(tiny_mlx_model) == "mlx"
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x")
    assert format_for_path(f) == "gguf"
    with pytest.raises(HearthError, match="does not exist"):
        format_for_path(tmp_path / "missing.gguf")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(HearthError, match="not a GGUF"):
        format_for_path(tmp_path / "notes.txt")


def test_one_planning_step_serves_the_fit_check_and_the_load_defaults(tiny_gguf_f16):
    from app.core.runtime.preflight import check_model, default_context, fit_check, plan_model

    roomy = machine(16 * GiB)
    model = check_model(tiny_gguf_f16, "gguf")
    assert model is not None and check_model(tiny_gguf_f16, "plugin-format") is None
    with pytest.raises(HearthError, match="not a file"):
        check_model(tiny_gguf_f16.with_name("missing.gguf"), "gguf")
    # The load defaults: the planner may lower the default context to what fits and was trained.
    planned = plan_model(model, roomy, default_context(model))
    assert planned.plan.fits and planned.predicted_decode_tok_s > 0
    assert planned.plan.options.n_ctx <= default_context(model) <= 8192
    # The fit check: the same step at exactly the requested context.
    result = fit_check(model, LoadSpec(path=tiny_gguf_f16, n_ctx=256), roomy, "tiny")
    exact = plan_model(model, roomy, 256, result.plan.options, exact=True)
    assert result.plan.options.n_ctx == 256 and result.predicted_decode_tok_s == exact.predicted_decode_tok_s > 0
    with pytest.raises(HearthError, match="will not fit"):
        fit_check(model, LoadSpec(path=tiny_gguf_f16, n_ctx=256), machine(1024 * 1024), "tiny")
    assert not plan_model(model, machine(1024 * 1024), 256, exact=True).plan.fits
