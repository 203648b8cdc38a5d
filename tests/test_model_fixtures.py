"""The model fixtures load in the real engines and compute the same function in both."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from tests.fixtures.models import SMOLLM2_SIZE
from tests.fixtures.tiny_gguf import (
    CHATML,
    EOS_ID,
    IM_END_ID,
    IM_START_ID,
    RMS_EPS,
    ROPE_THETA,
    build_vocab,
    hf_to_gguf_weights,
    permute_qk,
    tiny_llama_weights,
)

# <|im_start|>user\nHello, world<|im_end|>\n<|im_start|>assistant\n as raw ids (bytes < 256).
PROMPT_IDS = [IM_START_ID, *b"user\nHello, world", IM_END_ID, 10, IM_START_ID, *b"assistant\n"]
N_GREEDY = 16


def _llama_cpp():
    from tests.helpers import require_llama_cpp

    return require_llama_cpp()


def _mlx_lm():
    try:
        import mlx.core as mx
        import mlx_lm
        from mlx_lm.generate import generate_step
    except Exception as exc:
        pytest.skip(f"mlx / mlx-lm is not importable here: {exc!r}")
    return mx, mlx_lm, generate_step


def _open_llama(path, **kw):
    from app.core.engines.base import LoadSpec
    from app.core.engines.llamacpp.canary import guard_for
    from app.core.engines.llamacpp.options import model_params_for
    from app.core.models.gguf import validate_gguf

    llama_cpp = _llama_cpp()
    # A bare Llama decodes too: load it as the canary found safe here (AMX buffers crash on some Xeons).
    types = [t.type_name for t in validate_gguf(path).tensors]
    safe = guard_for(llama_cpp).safe_spec(LoadSpec(path=path, n_ctx=256), types).spec
    with model_params_for(llama_cpp, safe):
        return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False, **kw)


def _llama_greedy(llm, tokens: list[int], n: int) -> list[int]:
    return list(itertools.islice(llm.generate(tokens, temp=0.0, repeat_penalty=1.0), n))


def _mlx_greedy(folder, tokens: list[int], n: int) -> list[int]:
    mx, mlx_lm, generate_step = _mlx_lm()
    model, _ = mlx_lm.load(str(folder))
    steps = generate_step(mx.array(tokens), model, max_tokens=n, sampler=lambda logprobs: mx.argmax(logprobs, axis=-1))
    return [int(tok) for tok, _ in steps]


# --- pure numpy: vocabulary and weight layout -------------------------------------------------


def test_vocab_is_deterministic_and_specials_are_fixed():
    a, b = build_vocab(320), build_vocab(320)
    assert a == b and a.size == 320
    assert a.tokens[IM_START_ID] == "<|im_start|>" and a.tokens[IM_END_ID] == "<|im_end|>"
    assert len(a.merges) > 30
    # Every merge produces a token that is in the vocabulary, from parts that are too.
    index = set(a.tokens)
    for merge in a.merges:
        left, right = merge.split(" ")
        assert left in index and right in index and left + right in index
    assert build_vocab(400).size == 400


def test_weights_depend_on_seed_and_std():
    w0 = tiny_llama_weights(seed=0, std=0.02)
    assert np.array_equal(w0["lm_head.weight"], tiny_llama_weights(seed=0, std=0.02)["lm_head.weight"])
    assert not np.array_equal(w0["lm_head.weight"], tiny_llama_weights(seed=1)["lm_head.weight"])
    std = float(tiny_llama_weights(std=0.2)["model.layers.0.mlp.up_proj.weight"].std())
    assert 0.19 < std < 0.21
    assert "lm_head.weight" not in tiny_llama_weights(tie_embeddings=True)


def _rope_rotate_half(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """HF / MLX (non-traditional) RoPE on [T, heads, head_dim]."""
    hd = x.shape[-1]
    ang = pos[:, None] * ROPE_THETA ** (-np.arange(0, hd, 2) / hd)[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def _rope_interleaved(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """llama.cpp LLAMA_ROPE_TYPE_NORM: rotates adjacent pairs."""
    hd = x.shape[-1]
    ang = (pos[:, None] * ROPE_THETA ** (-np.arange(0, hd, 2) / hd)[None, :])[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(ang) - odd * np.sin(ang)
    out[..., 1::2] = even * np.sin(ang) + odd * np.cos(ang)
    return out


def test_qk_permutation_makes_interleaved_rope_match_rotate_half():
    n_head, n_kv, hd, n_embd, T = 4, 2, 64, 256, 5
    w = tiny_llama_weights(n_embd=n_embd, n_head=n_head, n_head_kv=n_kv, std=0.2, seed=3)
    g = hf_to_gguf_weights(w, n_head, n_kv)
    h = np.random.default_rng(9).standard_normal((T, n_embd))
    pos = np.arange(T, dtype=np.float64)

    def scores(wq, wk, rope):
        q = rope((h @ wq.T).reshape(T, n_head, hd), pos)
        k = rope((h @ wk.T).reshape(T, n_kv, hd), pos)
        k = np.repeat(k, n_head // n_kv, axis=1)
        return np.einsum("thd,shd->hts", q, k)

    wq, wk = w["model.layers.0.self_attn.q_proj.weight"], w["model.layers.0.self_attn.k_proj.weight"]
    hf = scores(wq, wk, _rope_rotate_half)
    cpp = scores(g["blk.0.attn_q.weight"], g["blk.0.attn_k.weight"], _rope_interleaved)
    np.testing.assert_allclose(cpp, hf, rtol=1e-9, atol=1e-9)
    # Without the permutation the two RoPE conventions disagree, so the check above has teeth.
    wrong = scores(wq, wk, _rope_interleaved)
    assert not np.allclose(wrong, hf, atol=1e-3)
    assert permute_qk(np.arange(8.0)[:, None], 1).ravel().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_gguf_f32_tensors_are_the_permuted_hf_weights(tiny_pair_std02):
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(tiny_pair_std02[0]))
    expected = hf_to_gguf_weights(tiny_llama_weights(std=0.2), 4, 2)
    got = {t.name: np.asarray(t.data) for t in reader.tensors}
    assert set(got) == set(expected)
    for name, arr in expected.items():
        np.testing.assert_array_equal(got[name].reshape(arr.shape), arr, err_msg=name)
    tmpl = reader.fields["tokenizer.chat_template"]
    assert bytes(tmpl.parts[tmpl.data[0]]).decode() == CHATML


def test_mlx_folder_matches_vocab_and_weights(tiny_mlx_model):
    from safetensors.numpy import load_file

    config = json.loads((tiny_mlx_model / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is False
    assert config["rms_norm_eps"] == RMS_EPS and config["rope_theta"] == ROPE_THETA
    tensors = load_file(str(tiny_mlx_model / "model.safetensors"))
    ref = tiny_llama_weights()
    assert set(tensors) == set(ref)
    for name in ("model.layers.1.self_attn.k_proj.weight", "lm_head.weight"):
        np.testing.assert_array_equal(tensors[name], ref[name], err_msg=name)
    tok = json.loads((tiny_mlx_model / "tokenizer.json").read_text())
    assert tok["model"]["vocab"]["<|im_end|>"] == EOS_ID
    assert tok["model"]["merges"] == build_vocab(320).merges


# --- llama.cpp ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["tiny_gguf_f16", "tiny_gguf_q8_0", "tiny_gguf_q4_k_m"])
def test_tiny_gguf_loads_and_generates(fixture, request):
    path = request.getfixturevalue(fixture)
    llm = _open_llama(path)
    assert llm.n_vocab() == 320
    assert llm.metadata["tokenizer.chat_template"] == CHATML
    assert int(llm.token_eos()) == EOS_ID
    # The GGUF's ChatML template is what llama-cpp-python formats chats with (not its llama-2 fallback).
    assert llm.chat_format == "chat_template.default"
    chat = llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, temperature=0)
    chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert chat["usage"]["prompt_tokens"] == len(llm.tokenize(chatml.encode(), add_bos=False, special=True))
    out = _llama_greedy(llm, PROMPT_IDS, 6)
    assert len(out) == 6 and all(0 <= t < 320 for t in out)
    # Greedy decoding of the same file is reproducible.
    assert _llama_greedy(llm, PROMPT_IDS, 6) == out


def test_q4_k_m_file_has_k_quant_tensors(tiny_gguf_q4_k_m, tiny_gguf_f16):
    gguf = pytest.importorskip("gguf")

    def types(path):
        return {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}

    assert "Q4_K" in types(tiny_gguf_q4_k_m)
    assert "Q4_K" not in types(tiny_gguf_f16)
    assert tiny_gguf_q4_k_m.stat().st_size < tiny_gguf_f16.stat().st_size / 2


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world!",
        "The capital of France is Paris.\n",
        "  12345 tokens; attention!!",
        "<|im_start|>user\nhi<|im_end|>",
    ],
)
def test_gguf_and_tokenizer_json_tokenize_alike(text, tiny_gguf_f16, tiny_mlx_model):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(tiny_mlx_model / "tokenizer.json"))
    llm = _open_llama(tiny_gguf_f16, vocab_only=True)
    cpp_ids = llm.tokenize(text.encode(), add_bos=False, special=True)
    assert cpp_ids == hf.encode(text, add_special_tokens=False).ids
    assert hf.decode(cpp_ids, skip_special_tokens=False) == text


# --- MLX and the cross-engine check -------------------------------------------------------------


@pytest.mark.slow
def test_tiny_mlx_model_loads_and_generates(tiny_mlx_model):
    _mx, mlx_lm, _ = _mlx_lm()
    model, tokenizer = mlx_lm.load(str(tiny_mlx_model))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True)
    assert list(prompt) == tokenizer.encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    out = _mlx_greedy(tiny_mlx_model, PROMPT_IDS, 6)
    assert len(out) == 6 and all(0 <= t < 320 for t in out)
    text = mlx_lm.generate(model, tokenizer, prompt=prompt, max_tokens=4)
    assert isinstance(text, str)


def test_smollm2_fixture_is_the_shipped_file(smollm2_gguf):
    assert smollm2_gguf.is_file()
    assert smollm2_gguf.stat().st_size == SMOLLM2_SIZE


def _numpy_greedy(tokens: list[int], n: int, std: float) -> list[int]:
    """Reference forward pass of the HF weights, recomputed from scratch each step."""
    w = {k: v.astype(np.float64) for k, v in tiny_llama_weights(std=std).items()}
    n_head, n_kv, hd = 4, 2, 64

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + RMS_EPS) * g

    toks = list(tokens)
    for _ in range(n):
        T = len(toks)
        pos = np.arange(T, dtype=np.float64)
        x = w["model.embed_tokens.weight"][toks]
        for i in range(2):
            p = f"model.layers.{i}."
            h = rms(x, w[p + "input_layernorm.weight"])
            q = _rope_rotate_half((h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, n_head, hd), pos)
            k = _rope_rotate_half((h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, n_kv, hd), pos)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, n_kv, hd)
            k, v = np.repeat(k, n_head // n_kv, 1), np.repeat(v, n_head // n_kv, 1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + np.triu(np.full((T, T), -np.inf), 1)
            a = np.exp(s - s.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            x = x + np.einsum("hts,shd->thd", a, v).reshape(T, -1) @ w[p + "self_attn.o_proj.weight"].T
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            gate = h @ w[p + "mlp.gate_proj.weight"].T
            act = gate / (1 + np.exp(-gate)) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + act @ w[p + "mlp.down_proj.weight"].T
        logits = rms(x[-1], w["model.norm.weight"]) @ w["lm_head.weight"].T
        toks.append(int(np.argmax(logits)))
    return toks[len(tokens) :]


@pytest.mark.slow
def test_llama_cpp_greedy_matches_numpy_reference(tiny_pair_std02):
    ref = _numpy_greedy(PROMPT_IDS, N_GREEDY, std=0.2)
    assert len(set(ref)) > 2, "a constant output would make the comparison meaningless"
    assert _llama_greedy(_open_llama(tiny_pair_std02[0]), PROMPT_IDS, N_GREEDY) == ref


@pytest.mark.slow
def test_llama_cpp_and_mlx_agree_on_greedy_tokens(tiny_pair_std02):
    gguf_path, mlx_dir = tiny_pair_std02
    mlx_ids = _mlx_greedy(mlx_dir, PROMPT_IDS, N_GREEDY)
    cpp_ids = _llama_greedy(_open_llama(gguf_path), PROMPT_IDS, N_GREEDY)
    assert len(cpp_ids) == N_GREEDY
    assert cpp_ids == mlx_ids
