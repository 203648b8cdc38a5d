"""Deployment plans against public figures: what fits on how many GPUs, which format and engine."""

from __future__ import annotations

import pytest

from app.core.deploy.errors import PlanError
from app.core.deploy.plan import make_plan
from app.core.deploy.shape import shape_from_config, shape_from_path
from app.core.deploy.speed import predict_decode
from app.core.deploy.targets import GiB, all_targets, find_target
from tests.core.deploy.configs import DEEPSEEK_V2_LITE, LLAMA3_8B, LLAMA3_70B

H100 = "h100"


@pytest.fixture(scope="module")
def llama70b():
    return shape_from_config(LLAMA3_70B, "meta-llama/Meta-Llama-3-70B-Instruct", source="hub")


@pytest.fixture(scope="module")
def llama8b():
    return shape_from_config(LLAMA3_8B, "meta-llama/Meta-Llama-3-8B-Instruct", source="hub")


def test_70b_bf16_needs_4_h100s_for_8_users_at_32k(llama70b):
    h100 = find_target(H100)
    two = make_plan(llama70b, h100, gpus=2, users=8, ctx=32768, dtype="bf16")
    assert not two.fits and two.launch is None
    # Per GPU: 65.7 GiB of weights leaves no room for 40 GiB of KV under 90 % of 80 GiB.
    assert two.closest is not None and two.closest.tp == 2 and two.closest.total > 72 * GiB
    assert two.needed is not None and two.needed.gpus == 4
    assert "does not fit on 2 × H100-80GB" in two.verdict and "it needs 4 (TP 4)" in two.verdict
    four = make_plan(llama70b, h100, gpus=4, users=8, ctx=32768, dtype="bf16")
    assert four.fits and four.layout is not None and (four.layout.tp, four.layout.pp) == (4, 1)
    assert four.kv_total == 8 * 32768 * 327_680
    assert four.layout.total <= 0.9 * h100.memory_bytes
    assert four.engine == "vllm" and "--tensor-parallel-size 4" in four.launch.command


def test_70b_bf16_with_16_users_needs_8(llama70b):
    h100 = find_target(H100)
    assert make_plan(llama70b, h100, gpus=4, users=16, ctx=32768, dtype="bf16").needed.gpus == 8
    eight = make_plan(llama70b, h100, gpus=8, users=16, ctx=32768, dtype="bf16")
    assert eight.fits and eight.layout.tp == 8


def test_the_smallest_layout_wins_and_spare_gpus_become_replicas(llama70b):
    plan = make_plan(llama70b, find_target(H100), gpus=8, users=8, ctx=32768, dtype="bf16")
    assert plan.layout.gpus == 4 and any("2 replicas" in n for n in plan.notes)


def test_past_one_node_pipeline_stages_are_added(llama70b):
    plan = make_plan(llama70b, find_target(H100), gpus=16, users=64, ctx=32768, dtype="bf16")
    assert plan.fits and (plan.layout.tp, plan.layout.pp) == (8, 2)
    assert "--pipeline-parallel-size 2" in plan.launch.command
    assert any("Ray cluster" in n for n in plan.launch.notes)


def test_8b_fp8_fits_one_l40s(llama8b):
    plan = make_plan(llama8b, find_target("l40s"), gpus=1, users=4, ctx=32768, dtype="fp8")
    assert plan.fits and plan.layout.tp == 1 and plan.dtype == "fp8"
    assert plan.launch.argv[:3] == ["vllm", "serve", "meta-llama/Meta-Llama-3-8B-Instruct"]
    assert "--quantization fp8" in plan.launch.command
    # FP8 linear layers (one byte each) with 16-bit embeddings: about 8.5 GiB.
    assert 8.3 * GiB < plan.layout.weights < 8.7 * GiB


def test_auto_picks_the_best_format_that_fits_the_hardware(llama70b):
    h100, a100, b200 = find_target(H100), find_target("a100-80gb"), find_target("b200")
    assert make_plan(llama70b, h100, gpus=4, users=8, ctx=32768).dtype == "bf16"
    assert make_plan(llama70b, h100, gpus=2, users=4, ctx=32768).dtype == "fp8"
    # Ampere has no FP8 tensor cores: the next format down is 4-bit.
    assert make_plan(llama70b, a100, gpus=1, users=1, ctx=8192).dtype == "int4"
    # Blackwell has NVFP4 kernels, and its plan says a pre-quantized checkpoint is needed.
    one_b200 = make_plan(llama70b, b200, gpus=1, users=10, ctx=32768)
    assert one_b200.dtype == "nvfp4" and any("pre-quantized" in n for n in one_b200.launch.notes)


def test_engine_rules(llama8b, llama70b, quant_files):
    m2 = make_plan(llama70b, find_target("m2-ultra"), gpus=1, users=1, ctx=8192)
    assert m2.engine == "mlx" and m2.launch.argv[0] == "mlx_lm.server" and "Apple" in m2.reason
    m2_q = make_plan(llama70b, find_target("m2-ultra"), gpus=1, users=4, ctx=32768, dtype="int4")
    assert m2_q.dtype == "mlx4" and m2_q.launch.prepare[0][0] == "mlx_lm.convert"
    rtx = make_plan(llama8b, find_target("rtx4090"), gpus=1, users=1, ctx=16384)
    assert rtx.engine == "exllama" and rtx.dtype == "exl8" and "  max_seq_len: 16384" in rtx.launch.config
    busy = make_plan(llama8b, find_target("rtx4090"), gpus=2, users=16, ctx=8192)
    assert busy.engine == "vllm" and "16 concurrent users" in busy.reason
    agents = make_plan(llama70b, find_target(H100), gpus=4, users=32, ctx=16384, shared_prefix=True)
    assert agents.engine == "sglang" and "RadixAttention" in agents.reason
    assert agents.launch.argv[:3] == ["python", "-m", "sglang.launch_server"]
    gguf = make_plan(shape_from_path(quant_files["Q8_0"]), find_target("rtx4090"), gpus=1, users=2, ctx=2048)
    assert gguf.engine == "llama.cpp" and gguf.launch.argv[:3] == ["llama-server", "-m", str(quant_files["Q8_0"])]
    assert gguf.launch.argv[gguf.launch.argv.index("-c") + 1] == str(2048 * 2)  # shared by the -np slots


def test_every_reason_is_one_sentence(llama8b, llama70b):
    plans = [
        make_plan(llama70b, t, gpus=1 if t.per_node == 1 else 8, users=4, ctx=8192, dtype="auto") for t in all_targets()
    ]
    plans.append(make_plan(llama8b, find_target("rtx5090"), gpus=1, users=1, ctx=8192))
    for p in plans:
        assert p.fits, p.verdict
        assert p.reason and "." not in p.reason.rstrip(".") and "\n" not in p.reason


def test_speed_follows_bandwidth_and_drops_with_context(llama70b):
    h100, h200 = find_target(H100), find_target("h200")
    fast = predict_decode(llama70b, h200, "bf16", tp=4, pp=1, users=8, ctx=32768)
    slow = make_plan(llama70b, h100, gpus=4, users=8, ctx=32768, dtype="bf16").speed
    assert fast.per_user_tok_s > slow.per_user_tok_s
    # The H200 holds the same load on half as many GPUs, and each user then gets fewer tokens a second.
    h200_plan = make_plan(llama70b, h200, gpus=4, users=8, ctx=32768, dtype="bf16")
    assert h200_plan.layout.tp == 2 and h200_plan.speed.per_user_tok_s < fast.per_user_tok_s
    assert slow.single_user_tok_s > slow.per_user_tok_s  # KV reads of 8 users at 32k slow each step
    # One user alone: 35.3 GB per GPU read at 3,350 GB/s × η → tens of tok/s, not hundreds.
    assert 30 < slow.single_user_tok_s < 80
    assert slow.aggregate_tok_s == pytest.approx(8 * slow.per_user_tok_s)


def test_a_model_that_fits_nowhere_is_a_sentence(llama70b):
    plan = make_plan(llama70b, find_target("rtx4090"), gpus=2, users=4096, ctx=131072, dtype="int4")
    assert not plan.fits and plan.needed is None
    assert "nor on any count of them up to 64" in plan.verdict
    mac = make_plan(llama70b, find_target("m2-ultra"), gpus=1, users=64, ctx=131072)
    assert not mac.fits and "bigger machine" in mac.verdict


def test_mla_kv_is_replicated_across_tp():
    ds = shape_from_config(DEEPSEEK_V2_LITE, "deepseek-ai/DeepSeek-V2-Lite-Chat", source="hub")
    plan = make_plan(ds, find_target(H100), gpus=2, users=48, ctx=32768, dtype="bf16")
    assert plan.fits and plan.layout.tp == 2
    assert plan.layout.kv == plan.kv_total == 48 * 32768 * 31_104  # not divided by TP
    assert plan.shape.active_params < plan.shape.n_params / 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(gpus=1, users=0, ctx=8192), "users must be between 1"),
        (dict(gpus=0, users=1, ctx=8192), "at least 1"),
        (dict(gpus=1, users=1, ctx=200_000), "over meta-llama/Meta-Llama-3-8B-Instruct's maximum of 131,072"),
        (dict(gpus=1, users=1, ctx=8192, dtype="fp4"), "unknown dtype 'fp4'"),
        (dict(gpus=1, users=1, ctx=0), "at least 1 token"),
    ],
)
def test_bad_inputs_are_clear_errors(llama8b, kwargs, message):
    with pytest.raises(PlanError, match=message):
        make_plan(llama8b, find_target(H100), **kwargs)


def test_hardware_without_the_kernels_is_refused(llama8b):
    with pytest.raises(PlanError, match="no fp8 kernels on A100-80GB"):
        make_plan(llama8b, find_target("a100"), gpus=1, users=1, ctx=8192, dtype="fp8")
    with pytest.raises(PlanError, match="no nvfp4 kernels on H100-80GB"):
        make_plan(llama8b, find_target(H100), gpus=1, users=1, ctx=8192, dtype="nvfp4")
    with pytest.raises(PlanError, match="one machine"):
        make_plan(llama8b, find_target("m3-ultra"), gpus=2, users=1, ctx=8192)
    with pytest.raises(PlanError, match="mlx does not run on H100-80GB"):
        make_plan(llama8b, find_target(H100), gpus=1, users=1, ctx=8192, engine="mlx")
    with pytest.raises(PlanError, match="vllm does not run on Apple M2 Ultra"):
        make_plan(llama8b, find_target("m2-ultra"), gpus=1, users=1, ctx=8192, engine="vllm")
    with pytest.raises(PlanError, match="unknown GPU 'h900'"):
        find_target("h900")


def test_the_hardware_table_cites_its_sources():
    ids = {t.id for t in all_targets()}
    assert {"rtx4090", "rtx5090", "l40s", "a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "b200-180gb"} <= ids
    assert {"mi300x", "m2-ultra-192gb", "m3-ultra-256gb"} <= ids
    for t in all_targets():
        assert t.sources and all(s.startswith("https://") for s in t.sources), t.id
        assert t.memory_bytes > 0 and t.bandwidth_gbps > 0 and t.bf16_tflops > 0
        assert ("fp8" in t.kernels) == (t.arch in ("ada", "hopper", "blackwell", "cdna3")), t.id
        assert ("nvfp4" in t.kernels) == (t.arch == "blackwell"), t.id
    assert find_target("H100-80GB") == find_target("h100") == find_target("H100 SXM")


def test_a_gguf_repo_plans_its_own_quants(quant_files):
    shape = shape_from_path(quant_files["Q8_0"])
    plan = make_plan(shape, find_target("h100"), gpus=1, users=1, ctx=2048, dtype="q8_0")
    assert plan.fits and plan.dtype == "Q8_0" and plan.engine == "llama.cpp"
    with pytest.raises(PlanError, match="has no Q4_K_M GGUF"):
        make_plan(shape, find_target("h100"), gpus=1, users=1, ctx=2048, dtype="int4")
    forced = make_plan(
        shape_from_config(LLAMA3_8B, "org/Llama-3-8B"),
        find_target("l40s"),
        gpus=1,
        users=2,
        ctx=8192,
        engine="llama.cpp",
    )
    assert forced.dtype == "Q8_0" and forced.launch.argv[:3] == ["llama-server", "-m", "Llama-3-8B-Q8_0.gguf"]
    assert any("convert_hf_to_gguf.py" in n for n in forced.launch.notes)


def test_the_text_report_says_the_arithmetic(llama70b):
    from app.core.deploy.report import format_plan, plan_json

    no = format_plan(make_plan(llama70b, find_target(H100), gpus=2, users=8, ctx=32768, dtype="bf16"))
    assert "verdict   meta-llama/Meta-Llama-3-70B-Instruct does not fit on 2 × H100-80GB" in no  # case kept
    assert "weights 65.7 GiB + KV 40.0 GiB + reserve" in no and "> 72.0 GiB" in no and "command" not in no
    yes = make_plan(llama70b, find_target(H100), gpus=4, users=8, ctx=32768, dtype="bf16")
    text = format_plan(yes)
    assert "verdict   Fits on 4 × H100-80GB (TP 4) in BF16 with 8 users × 32,768 tokens." in text
    assert f"command   {yes.launch.command}" in text
    data = plan_json(yes)
    assert data["per_gpu"]["tensor_parallel"] == 4 and data["per_gpu"]["fits"] and data["command"] == yes.launch.command


def test_mlx_and_exl_checkpoints_are_served_as_they_are():
    mlx = shape_from_config({**LLAMA3_8B, "quantization": {"bits": 4, "group_size": 64}}, "mlx-community/L3-8B-4bit")
    assert mlx.native_dtype == "mlx4"
    plan = make_plan(mlx, find_target("m3-ultra"), gpus=1, users=2, ctx=8192)
    assert plan.dtype == "mlx4" and not plan.launch.prepare
    assert plan.launch.argv[:3] == ["mlx_lm.server", "--model", "mlx-community/L3-8B-4bit"]
    assert plan.weights_total == int(mlx.n_params * 4.5 / 8)  # embeddings quantized too
    with pytest.raises(PlanError, match="Apple Silicon only"):
        make_plan(mlx, find_target(H100), gpus=1, users=1, ctx=8192)
    exl_cfg = {**LLAMA3_8B, "quantization_config": {"quant_method": "exl3", "bits": 5.0}}
    exl = shape_from_config(exl_cfg, "someone/L3-8B-exl3-5.0bpw")
    plan = make_plan(exl, find_target("h100"), gpus=1, users=2, ctx=8192)
    assert plan.engine == "exllama" and plan.dtype == "exl5"
    assert "  model_name: L3-8B-exl3-5.0bpw" in plan.launch.config
    with pytest.raises(PlanError, match="NVIDIA GPUs only"):
        make_plan(exl, find_target("mi300x"), gpus=1, users=1, ctx=8192)
