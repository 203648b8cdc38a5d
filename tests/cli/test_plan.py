"""`hearth plan` as a user runs it: a folder holding only a config.json, a Hub repo through the fake Hub,
a plan that does not fit (an answer, exit status 3), and bad input (a clear line on stderr, status 1)."""

from __future__ import annotations

import json

from tests.cli.helpers import hearth, isolated_env
from tests.core.deploy.configs import LLAMA3_8B, LLAMA3_70B, config_folder
from tests.fakehub import FakeRepo


def test_plan_a_config_folder_as_text(tmp_path):
    folder = config_folder(tmp_path, LLAMA3_70B, "Llama-3-70B")
    env = isolated_env(tmp_path, "http://127.0.0.1:9")  # no Hub is needed for a local folder
    proc = hearth(
        "plan", str(folder), "--gpu", "h100", "--gpus", "4", "--users", "8", "--ctx", "32768", "--dtype", "bf16",
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Fits on 4 × H100-80GB (TP 4) in BF16 with 8 users × 32,768 tokens." in out
    assert "KV 327,680 B per token" in out
    assert f"vllm serve {folder} --tensor-parallel-size 4 --max-model-len 32768" in out
    assert "tok/s per user" in out


def test_plan_that_does_not_fit_is_a_sentence_and_status_3(tmp_path):
    folder = config_folder(tmp_path, LLAMA3_70B, "Llama-3-70B")
    env = isolated_env(tmp_path, "http://127.0.0.1:9")
    proc = hearth(
        "plan", str(folder), "--gpu", "H100-80GB", "--gpus", "2", "--users", "8", "--ctx", "32768",
        "--dtype", "bf16", "--json", env=env,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["fits"] is False and plan["command"] is None and plan["needed"]["gpus"] == 4
    assert plan["verdict"].endswith("in BF16; it needs 4 (TP 4)")
    assert "Traceback" not in proc.stderr


def test_plan_a_hub_repo_as_json(fake_hub, tmp_path):
    fake_hub.add_repo(
        FakeRepo(
            "meta-llama/Meta-Llama-3-8B-Instruct",
            files={"config.json": json.dumps(LLAMA3_8B).encode()},
            tags=["transformers", "llama"],
        )
    )
    env = isolated_env(tmp_path, fake_hub.url)
    proc = hearth(
        "plan", "meta-llama/Meta-Llama-3-8B-Instruct", "--gpu", "l40s", "--users", "4", "--ctx", "32768",
        "--dtype", "fp8", "--json", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["fits"] and plan["engine"] == "vllm" and plan["dtype"] == "fp8"
    assert plan["argv"][:3] == ["vllm", "serve", "meta-llama/Meta-Llama-3-8B-Instruct"]
    assert "--quantization" in plan["argv"] and plan["kv_bytes_per_token"] == 131_072
    assert plan["speed"]["per_user_tok_s"] > 0
    assert fake_hub.requests("GET", "/config.json")


def test_bad_input_is_one_clear_line(tmp_path):
    folder = config_folder(tmp_path, LLAMA3_8B, "Llama-3-8B")
    env = isolated_env(tmp_path, "http://127.0.0.1:9")
    cases = [
        (["--gpu", "h900"], "unknown GPU 'h900'; known targets: rtx4090"),
        (["--gpu", "h100", "--users", "0"], "users must be between 1"),
        (["--gpu", "h100", "--ctx", "262144"], "over"),
        (["--gpu", "a100", "--dtype", "fp8"], "no fp8 kernels on A100-80GB"),
    ]
    for extra, message in cases:
        proc = hearth("plan", str(folder), *extra, env=env)
        assert proc.returncode == 1, (extra, proc.stdout)
        assert proc.stderr.startswith("hearth plan: ") and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
