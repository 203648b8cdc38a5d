"""Regenerate resources/catalog.json: popular instruct models, their repos and per-variant sizes.

Sizes are estimated from the parameter count and each quant's whole-file bits per weight (the quality
ladder in resources/quants.json), so Discover can rank offline; the Hub's real sizes replace them
when a model page is opened.     python scripts/build_catalog.py
"""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GGUF_QUANTS = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M", "Q2_K"]


def cfg(model_type, layers, hidden, heads, kv, ff, vocab, ctx, *, head_dim=None, tied=False, **extra):
    c = {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": ff,
        "vocab_size": vocab,
        "max_position_embeddings": ctx,
        "tie_word_embeddings": tied,
    }
    if head_dim:
        c["head_dim"] = head_dim
    c.update(extra)
    return c


MODELS = [
    # name, family, params, licence, config, gguf repo, mlx repo (4-bit), exl2 repo
    (
        "Qwen2.5 0.5B Instruct",
        "Qwen2.5",
        494_000_000,
        "apache-2.0",
        cfg("qwen2", 24, 896, 14, 2, 4864, 151936, 32768, tied=True),
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
        "mlx-community/Qwen2.5-0.5B-Instruct-4bit",
        None,
    ),
    (
        "Llama 3.2 1B Instruct",
        "Llama 3",
        1_236_000_000,
        "llama3.2",
        cfg("llama", 16, 2048, 32, 8, 8192, 128256, 131072, head_dim=64, tied=True),
        "bartowski/Llama-3.2-1B-Instruct-GGUF",
        "mlx-community/Llama-3.2-1B-Instruct-4bit",
        None,
    ),
    (
        "Qwen2.5 1.5B Instruct",
        "Qwen2.5",
        1_544_000_000,
        "apache-2.0",
        cfg("qwen2", 28, 1536, 12, 2, 8960, 151936, 32768, tied=True),
        "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
        "mlx-community/Qwen2.5-1.5B-Instruct-4bit",
        None,
    ),
    (
        "SmolLM2 1.7B Instruct",
        "SmolLM2",
        1_711_000_000,
        "apache-2.0",
        cfg("llama", 24, 2048, 32, 32, 8192, 49152, 8192, tied=True),
        "bartowski/SmolLM2-1.7B-Instruct-GGUF",
        "mlx-community/SmolLM2-1.7B-Instruct-4bit",
        None,
    ),
    (
        "Gemma 2 2B it",
        "Gemma 2",
        2_614_000_000,
        "gemma",
        cfg("gemma2", 26, 2304, 8, 4, 9216, 256000, 8192, head_dim=256, tied=True, sliding_window=4096),
        "bartowski/gemma-2-2b-it-GGUF",
        "mlx-community/gemma-2-2b-it-4bit",
        None,
    ),
    (
        "Llama 3.2 3B Instruct",
        "Llama 3",
        3_213_000_000,
        "llama3.2",
        cfg("llama", 28, 3072, 24, 8, 8192, 128256, 131072, head_dim=128, tied=True),
        "bartowski/Llama-3.2-3B-Instruct-GGUF",
        "mlx-community/Llama-3.2-3B-Instruct-4bit",
        "bartowski/Llama-3.2-3B-Instruct-exl2",
    ),
    (
        "Phi 3.5 mini instruct",
        "Phi",
        3_821_000_000,
        "mit",
        cfg("phi3", 32, 3072, 32, 32, 8192, 32064, 131072),
        "bartowski/Phi-3.5-mini-instruct-GGUF",
        "mlx-community/Phi-3.5-mini-instruct-4bit",
        None,
    ),
    (
        "Qwen3 4B",
        "Qwen3",
        4_022_000_000,
        "apache-2.0",
        cfg("qwen3", 36, 2560, 32, 8, 9728, 151936, 40960, head_dim=128, tied=True),
        "unsloth/Qwen3-4B-GGUF",
        "mlx-community/Qwen3-4B-4bit",
        None,
    ),
    (
        "Gemma 3 4B it",
        "Gemma 3",
        3_880_000_000,
        "gemma",
        cfg("gemma3_text", 34, 2560, 8, 4, 10240, 262144, 131072, head_dim=256, tied=True, sliding_window=1024),
        "bartowski/google_gemma-3-4b-it-GGUF",
        "mlx-community/gemma-3-4b-it-4bit",
        None,
    ),
    (
        "Mistral 7B Instruct v0.3",
        "Mistral",
        7_248_000_000,
        "apache-2.0",
        cfg("mistral", 32, 4096, 32, 8, 14336, 32768, 32768),
        "bartowski/Mistral-7B-Instruct-v0.3-GGUF",
        "mlx-community/Mistral-7B-Instruct-v0.3-4bit",
        "turboderp/Mistral-7B-instruct-v0.3-exl2",
    ),
    (
        "Qwen2.5 7B Instruct",
        "Qwen2.5",
        7_616_000_000,
        "apache-2.0",
        cfg("qwen2", 28, 3584, 28, 4, 18944, 152064, 32768),
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        "mlx-community/Qwen2.5-7B-Instruct-4bit",
        "bartowski/Qwen2.5-7B-Instruct-exl2",
    ),
    (
        "Llama 3.1 8B Instruct",
        "Llama 3",
        8_030_000_000,
        "llama3.1",
        cfg("llama", 32, 4096, 32, 8, 14336, 128256, 131072),
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
        "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit",
        "turboderp/Llama-3.1-8B-Instruct-exl2",
    ),
    (
        "Qwen3 8B",
        "Qwen3",
        8_191_000_000,
        "apache-2.0",
        cfg("qwen3", 36, 4096, 32, 8, 12288, 151936, 40960, head_dim=128),
        "unsloth/Qwen3-8B-GGUF",
        "mlx-community/Qwen3-8B-4bit",
        None,
    ),
    (
        "Gemma 2 9B it",
        "Gemma 2",
        9_242_000_000,
        "gemma",
        cfg("gemma2", 42, 3584, 16, 8, 14336, 256000, 8192, head_dim=256, tied=True, sliding_window=4096),
        "bartowski/gemma-2-9b-it-GGUF",
        "mlx-community/gemma-2-9b-it-4bit",
        None,
    ),
    (
        "Mistral Nemo Instruct 2407 (12B)",
        "Mistral",
        12_248_000_000,
        "apache-2.0",
        cfg("mistral", 40, 5120, 32, 8, 14336, 131072, 131072, head_dim=128),
        "bartowski/Mistral-Nemo-Instruct-2407-GGUF",
        "mlx-community/Mistral-Nemo-Instruct-2407-4bit",
        None,
    ),
    (
        "Gemma 3 12B it",
        "Gemma 3",
        11_770_000_000,
        "gemma",
        cfg("gemma3_text", 48, 3840, 16, 8, 15360, 262144, 131072, head_dim=256, tied=True, sliding_window=1024),
        "bartowski/google_gemma-3-12b-it-GGUF",
        "mlx-community/gemma-3-12b-it-4bit",
        None,
    ),
    (
        "Qwen2.5 14B Instruct",
        "Qwen2.5",
        14_770_000_000,
        "apache-2.0",
        cfg("qwen2", 48, 5120, 40, 8, 13824, 152064, 32768),
        "bartowski/Qwen2.5-14B-Instruct-GGUF",
        "mlx-community/Qwen2.5-14B-Instruct-4bit",
        None,
    ),
    (
        "Qwen3 30B A3B (MoE)",
        "Qwen3",
        30_530_000_000,
        "apache-2.0",
        cfg(
            "qwen3_moe",
            48,
            2048,
            32,
            4,
            768,
            151936,
            40960,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=8,
            moe_intermediate_size=768,
        ),
        "unsloth/Qwen3-30B-A3B-GGUF",
        "mlx-community/Qwen3-30B-A3B-4bit",
        None,
    ),
    (
        "Qwen2.5 32B Instruct",
        "Qwen2.5",
        32_760_000_000,
        "apache-2.0",
        cfg("qwen2", 64, 5120, 40, 8, 27648, 152064, 32768),
        "bartowski/Qwen2.5-32B-Instruct-GGUF",
        "mlx-community/Qwen2.5-32B-Instruct-4bit",
        None,
    ),
]


def main() -> None:
    ladder = {e["quant"]: e["bpw"] for e in json.loads((ROOT / "resources/quants.json").read_text())["ladder"]}
    entries = []
    for name, family, params, licence, config, gguf, mlx, exl2 in MODELS:
        variants = [
            {"format": "gguf", "repo": gguf, "label": q, "size_bytes": int(params * ladder[q] / 8)} for q in GGUF_QUANTS
        ]
        if mlx:
            variants.append(
                {"format": "mlx", "repo": mlx, "label": "4-bit g64", "bpw": 4.5, "size_bytes": int(params * 4.5 / 8)}
            )
        if exl2:
            for bpw in (4.0, 6.0, 8.0):
                variants.append(
                    {
                        "format": "exl2",
                        "repo": exl2,
                        "revision": f"{bpw:.1f}bpw",
                        "label": f"{bpw:g}bpw",
                        "bpw": bpw,
                        "size_bytes": int(params * (bpw + 0.2) / 8),
                    }
                )
        entries.append(
            {
                "name": name,
                "family": family,
                "params": params,
                "license": licence,
                "config": config,
                "variants": variants,
            }
        )
    out = {"about": "Shipped so Discover ranks offline; sizes are estimates from params × file bpw.", "models": entries}
    (ROOT / "resources/catalog.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
