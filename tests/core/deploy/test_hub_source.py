"""A Hub repo's shape, read through HubClient from the fake Hub over loopback: config.json, or for a
GGUF-only repo one quant's header by HTTP Range; never the weights."""

from __future__ import annotations

import json

import pytest

from app.core.deploy.errors import PlanError
from app.core.deploy.plan import make_plan
from app.core.deploy.shape import shape_from_hub
from app.core.deploy.sizing import kv_bytes_per_token
from app.core.deploy.targets import find_target
from app.core.hub.client import HubClient
from app.core.hub.errors import HubNotFound, HubRefused
from tests.core.deploy.configs import LLAMA3_70B
from tests.fakehub import FakeRepo, gguf_repo


@pytest.fixture
def client(hf_env, fake_hub) -> HubClient:
    return HubClient(fake_hub.url, None, timeout=5)


def test_a_transformers_repo_is_planned_from_its_config(fake_hub, client):
    fake_hub.add_repo(
        FakeRepo(
            "meta-llama/Meta-Llama-3-70B-Instruct",
            files={"config.json": json.dumps(LLAMA3_70B).encode(), "model-00001-of-00030.safetensors": b"x" * 64},
            tags=["transformers", "safetensors", "llama"],
            library_name="transformers",
        )
    )
    shape = shape_from_hub(client, "meta-llama/Meta-Llama-3-70B-Instruct")
    assert shape.source == "hub" and shape.repo_id == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert shape.spec.n_layers == 80 and kv_bytes_per_token(shape) == 327_680
    plan = make_plan(shape, find_target("h100"), gpus=4, users=8, ctx=32768, dtype="bf16")
    assert plan.launch.argv[2] == "meta-llama/Meta-Llama-3-70B-Instruct"
    # Only config.json was fetched: no weight file was read.
    resolved = [r.path for r in fake_hub.requests("GET", "/resolve/")]
    assert resolved and all(p.endswith("/config.json") for p in resolved)


def test_a_gguf_only_repo_is_planned_from_a_header(fake_hub, client, quant_files):
    fake_hub.add_repo(
        gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    shape = shape_from_hub(client, "org/Tiny-GGUF")
    assert shape.native_dtype == "gguf" and set(shape.gguf_quants) == {"F16", "Q8_0"}
    assert shape.gguf_quants["F16"] == quant_files["F16"].stat().st_size
    assert all(r.range for r in fake_hub.requests("GET", ".gguf"))  # headers by Range, not whole files
    plan = make_plan(shape, find_target("rtx4090"), gpus=1, users=2, ctx=4096)
    assert plan.engine == "llama.cpp" and plan.dtype == "F16"  # the best quant that fits
    assert plan.launch.argv[:3] == ["llama-server", "-hf", "org/Tiny-GGUF:F16"]


def test_repos_that_cannot_be_planned_say_why(fake_hub, client):
    with pytest.raises(HubNotFound):
        shape_from_hub(client, "org/Nope")
    fake_hub.add_repo(FakeRepo("org/Empty", files={"README.md": b"# nothing"}))
    with pytest.raises(PlanError, match=r"neither a config\.json nor a GGUF"):
        shape_from_hub(client, "org/Empty")
    hostile = {**LLAMA3_70B, "auto_map": {"AutoModelForCausalLM": "modeling.X"}}
    fake_hub.add_repo(FakeRepo("org/Hostile", files={"config.json": json.dumps(hostile).encode()}))
    with pytest.raises(HubRefused, match="own code"):
        shape_from_hub(client, "org/Hostile")
