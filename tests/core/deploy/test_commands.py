"""Every emitted launch command parses with the flags each engine documents.

The parsers below declare only the options the engines' own references list (vLLM `vllm serve --help` /
docs.vllm.ai engine arguments, SGLang's server arguments page, llama.cpp's tools/server/README.md,
mlx-lm's server and convert help, TabbyAPI's config_sample.yml); an option Hearth invented, a typo or a
value of the wrong type fails to parse.
"""

from __future__ import annotations

import argparse
import shlex

import pytest

from app.core.deploy.engines import TABBY_MODEL_KEYS
from app.core.deploy.plan import make_plan
from app.core.deploy.shape import shape_from_config, shape_from_path
from app.core.deploy.targets import all_targets, find_target
from tests.core.deploy.configs import DEEPSEEK_V2_LITE, LLAMA3_8B, LLAMA3_70B, MISTRAL_7B_V01


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # raise instead of exiting, so the test reports the message
        raise _Refused(message)


def vllm_serve() -> _Parser:
    p = _Parser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model")
    p.add_argument("--tensor-parallel-size", "-tp", type=int)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int)
    p.add_argument("--data-parallel-size", "-dp", type=int)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--quantization", "-q", choices=["awq", "gptq", "fp8", "modelopt", "modelopt_fp4", "bitsandbytes"])
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--api-key")
    return p


def sglang_launch_server() -> _Parser:
    p = _Parser(prog="python -m sglang.launch_server", add_help=False, allow_abbrev=False)
    p.add_argument("--model-path", required=True)
    p.add_argument("--tp-size", "--tp", type=int)
    p.add_argument("--pp-size", type=int)
    p.add_argument("--dp-size", "--dp", type=int)
    p.add_argument("--context-length", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--quantization", choices=["awq", "gptq", "fp8", "modelopt", "modelopt_fp4", "w8a8_fp8"])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--api-key")
    return p


def llama_server() -> _Parser:
    p = _Parser(prog="llama-server", add_help=False, allow_abbrev=False)
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("-m", "--model")
    model.add_argument("-hf", "-hfr", "--hf-repo")
    p.add_argument("-c", "--ctx-size", type=int)
    p.add_argument("-np", "--parallel", type=int)
    p.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", type=int)
    p.add_argument("-sm", "--split-mode", choices=["none", "layer", "row"])
    p.add_argument("-ts", "--tensor-split")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--api-key")
    return p


def mlx_lm_server() -> _Parser:
    p = _Parser(prog="mlx_lm.server", add_help=False, allow_abbrev=False)
    p.add_argument("--model", required=True)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    return p


def mlx_lm_convert() -> _Parser:
    p = _Parser(prog="mlx_lm.convert", add_help=False, allow_abbrev=False)
    p.add_argument("--hf-path", required=True)
    p.add_argument("--mlx-path")
    p.add_argument("-q", "--quantize", action="store_true")
    p.add_argument("--q-bits", type=int, choices=[2, 3, 4, 5, 6, 8])
    p.add_argument("--q-group-size", type=int, choices=[32, 64, 128])
    return p


def parse(command: str) -> tuple[str, argparse.Namespace]:
    argv = shlex.split(command)
    if argv[:2] == ["vllm", "serve"]:
        return "vllm", vllm_serve().parse_args(argv[2:])
    if argv[:3] == ["python", "-m", "sglang.launch_server"]:
        return "sglang", sglang_launch_server().parse_args(argv[3:])
    if argv[0] == "llama-server":
        return "llama.cpp", llama_server().parse_args(argv[1:])
    if argv[0] == "mlx_lm.server":
        return "mlx", mlx_lm_server().parse_args(argv[1:])
    if argv[0] == "mlx_lm.convert":
        return "mlx-convert", mlx_lm_convert().parse_args(argv[1:])
    if argv == ["python", "start.py"]:
        return "exllama", argparse.Namespace()
    raise AssertionError(f"not a command of a known engine: {command}")


def test_the_parsers_refuse_what_the_engines_do_not_document():
    with pytest.raises(_Refused):
        parse("vllm serve org/m --tensor-parallel 2")
    with pytest.raises(_Refused):
        parse("vllm serve org/m --quantization fp4")
    with pytest.raises(_Refused):
        parse("python -m sglang.launch_server --model-path org/m --max-model-len 4096")
    with pytest.raises(_Refused):
        parse("llama-server -m x.gguf -c many")


def _plans(quant_files):
    llama70 = shape_from_config(LLAMA3_70B, "meta-llama/Meta-Llama-3-70B-Instruct", source="hub")
    llama8 = shape_from_config(LLAMA3_8B, "meta-llama/Meta-Llama-3-8B-Instruct", source="hub")
    others = [
        shape_from_config(MISTRAL_7B_V01, "mistralai/Mistral-7B-v0.1", source="hub"),
        shape_from_config(DEEPSEEK_V2_LITE, "deepseek-ai/DeepSeek-V2-Lite-Chat", source="hub"),
        shape_from_path(quant_files["Q8_0"]),
    ]
    for target in all_targets():
        n = 1 if target.per_node == 1 else 8
        for shape in (llama70, llama8, *others):
            for users, shared in ((1, False), (4, False), (32, False), (32, True)):
                ctx = min(8192, shape.max_ctx or 8192)
                yield make_plan(shape, target, gpus=n, users=users, ctx=ctx, shared_prefix=shared)
    for shared in (False, True):  # pipeline stages across two nodes
        yield make_plan(llama70, find_target("h100"), gpus=16, users=64, ctx=32768, dtype="bf16", shared_prefix=shared)
    yield make_plan(llama8, find_target("l40s"), gpus=1, users=4, ctx=32768, dtype="fp8")
    yield make_plan(llama70, find_target("m2-ultra"), gpus=1, users=1, ctx=8192, dtype="int4")
    for gpus in (1, 2):  # ExLlamaV3 on one or two consumer cards
        yield make_plan(llama70 if gpus == 2 else llama8, find_target("rtx4090"), gpus=gpus, users=2, ctx=16384)


def test_every_emitted_command_parses(quant_files):
    engines_seen = set()
    pipelines = 0
    for plan in _plans(quant_files):
        if not plan.fits:
            continue
        engine, ns = parse(plan.launch.command)
        engines_seen.add(engine)
        pipelines += plan.layout.pp > 1
        assert engine == plan.engine, plan.launch.command
        for step in plan.launch.prepare:
            assert parse(shlex.join(step))[0] == "mlx-convert"
        lay = plan.layout
        if engine == "vllm":
            assert ns.tensor_parallel_size == lay.tp and ns.max_model_len == plan.ctx
            assert ns.max_num_seqs == plan.users and ns.gpu_memory_utilization == 0.9
            assert (ns.pipeline_parallel_size or 1) == lay.pp
            assert ns.quantization == ("fp8" if plan.dtype == "fp8" else None)
        elif engine == "sglang":
            assert (ns.pp_size or 1) == lay.pp
            assert ns.tp_size == lay.tp and ns.context_length == plan.ctx and ns.max_running_requests == plan.users
            assert ns.mem_fraction_static == 0.9
        elif engine == "llama.cpp":
            assert ns.parallel == plan.users and ns.ctx_size == plan.ctx * plan.users and ns.gpu_layers == 99
        elif engine == "exllama":
            keys = [ln.split(":")[0].strip() for ln in plan.launch.config[1:]]
            assert plan.launch.config[0] == "model:" and set(keys) <= set(TABBY_MODEL_KEYS)
    assert engines_seen == {"vllm", "sglang", "llama.cpp", "mlx", "exllama"}
    assert pipelines >= 2
