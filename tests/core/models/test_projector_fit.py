"""Whether a projector fits a model, from the two headers as libmtmd reads them: the width its embeddings come
out at must be the model's embedding width. The legacy LLaVA converters wrote CLIP's own projection (768) as
clip.vision.projection_dim, so for their layouts the width is the projection tensor's, as libmtmd takes it."""

from __future__ import annotations

from typing import Any

from app.core.models.gguf import GGUFHeader, TensorInfo
from app.core.models.projector import model_width, projector_mismatch, projector_width


def header(metadata: dict[str, Any], tensors: dict[str, tuple[int, ...]] | None = None) -> GGUFHeader:
    infos = [TensorInfo(name, dims, 1, "F16", 0, 2) for name, dims in (tensors or {}).items()]
    return GGUFHeader(3, 32, metadata, infos, 0, 0, None)


MODEL = header({"general.architecture": "llama", "llama.embedding_length": 4096})
WIDTH = model_width(MODEL.metadata)


def clip(projector_type: str | None, tensors: dict[str, tuple[int, ...]], **keys: Any) -> GGUFHeader:
    meta: dict[str, Any] = {"general.architecture": "clip", "clip.has_vision_encoder": True, **keys}
    if projector_type is not None:
        meta["clip.projector_type"] = projector_type
    return header(meta, tensors)


def test_a_legacy_llava_projector_is_measured_by_its_tensor_not_its_projection_dim():
    legacy = clip(
        "mlp", {"mm.0.weight": (1024, 4096), "mm.2.weight": (4096, 4096)}, **{"clip.vision.projection_dim": 768}
    )
    assert projector_width(legacy) == 4096 and projector_mismatch(legacy, WIDTH) is None
    yi = clip(None, {"mm.2.weight": (4096, 7168), "mm.3.weight": (7168,), "mm.3.bias": (7168,)})
    assert projector_width(yi) == 7168  # no type named: LLaVA's MLP, with a norm after it (Yi's)
    assert "made for a model 7168 wide; this one is 4096 wide" in projector_mismatch(yi, WIDTH)


def test_a_newer_layout_is_measured_by_the_projection_dim_its_converter_wrote():
    gemma = clip("gemma3", {"mm.input_projection.weight": (2560, 1152)}, **{"clip.vision.projection_dim": 2560})
    assert "2560 wide" in projector_mismatch(gemma, WIDTH)
    silent = clip("gemma3", {})
    assert projector_width(silent) is None and projector_mismatch(silent, WIDTH) is None  # nothing to hold against it


def test_a_file_that_is_no_projector_or_reads_only_audio_does_not_fit():
    assert "not a vision projector" in projector_mismatch(MODEL, WIDTH)
    audio = clip("ultravox", {}, **{"clip.has_vision_encoder": False, "clip.has_audio_encoder": True})
    assert projector_mismatch(audio, WIDTH) == "it reads audio, not images"


def test_the_models_width_is_read_without_walking_its_vocabulary(tiny_gguf_f16):
    from app.core.models.gguf import read_gguf_header, read_gguf_metadata_until

    whole = read_gguf_header(tiny_gguf_f16).metadata
    leading = read_gguf_metadata_until(tiny_gguf_f16, lambda meta: model_width(meta) is not None)
    assert model_width(leading) == model_width(whole) == 256 and WIDTH == 4096
    assert "tokenizer.ggml.tokens" in whole and "tokenizer.ggml.tokens" not in leading  # stopped before it
    assert read_gguf_metadata_until(tiny_gguf_f16, lambda meta: False).keys() == whole.keys()
