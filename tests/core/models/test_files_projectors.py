"""A repo's GGUF quants each carry the one vision projector they load with: their own precision where the
repo has one per precision, else F16, else the only one; a text-only repo carries none."""

from __future__ import annotations

from app.core.models.files import RepoFile, group_gguf, matching_projector

REPO = [
    RepoFile("gemma-3-4b-it-Q4_K_M.gguf", 2_500),
    RepoFile("gemma-3-4b-it-Q8_0.gguf", 4_100),
    RepoFile("mmproj-gemma-3-4b-it-F16.gguf", 800),
    RepoFile("mmproj-gemma-3-4b-it-Q8_0.gguf", 450),
    RepoFile("README.md", 1),
]


def test_each_quant_carries_its_own_projector_or_f16():
    by_label = {v.label: [f.path for f in v.mmproj] for v in group_gguf(REPO)}
    assert by_label == {"Q8_0": ["mmproj-gemma-3-4b-it-Q8_0.gguf"], "Q4_K_M": ["mmproj-gemma-3-4b-it-F16.gguf"]}


def test_a_text_only_repo_carries_no_projector():
    assert all(v.mmproj == [] for v in group_gguf([RepoFile("m-Q4_K_M.gguf", 1), RepoFile("m-Q8_0.gguf", 2)]))


def test_f16_is_not_bf16_and_the_first_is_the_last_resort():
    assert matching_projector(["mmproj-BF16.gguf", "mmproj-F16.gguf"], "Q4_K_M") == 1
    assert matching_projector(["mmproj-model.gguf"], "Q4_K_M") == 0
    assert matching_projector([], "Q4_K_M") is None
