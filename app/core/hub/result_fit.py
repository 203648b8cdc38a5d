"""A search result's size and fit, for its row in the results list: one repo listing and one GGUF
header (read by Range) per result, never the weights. The list asks for the first rows only."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.hub.metadata import gguf_variant
from app.core.hub.names import is_allowed_file
from app.core.hub.variants import VariantChoice, gguf_choices
from app.core.models.errors import ModelFileError
from app.core.models.quality import kld_for
from app.core.models.recommend import BALANCED_KLD, assess
from app.core.models.speed import has_weights

if TYPE_CHECKING:
    from app.core.hub.client import HubClient
    from app.core.models.devices import Machine

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResultFit:
    size_bytes: int  # the recommended quant's size; else the smallest GGUF, else the weight files'
    label: str = ""  # the quant that size is for ("" for a non-GGUF repo)
    verdict: str = ""  # the planner's verdict for it here (Plan.verdict); "" when not assessed
    fit_text: str = ""  # Plan.label, or why nothing fits


def result_fit(client: HubClient, repo_id: str, machine: Machine | None) -> ResultFit:
    """A pool thread: the listing gives every quant's size; one header (the quant nearest Q4_K_M, a
    usual pick) gives the spec the others are scaled from, as the model page does before it reads them all."""
    details = client.model(repo_id)
    allowed = [f for f in details.files if is_allowed_file(f.path)]
    choices = gguf_choices(repo_id, allowed, details.sha, gated=bool(details.gated))
    if not choices:
        weights = sum(f.size for f in allowed if f.path.lower().endswith(".safetensors"))
        return ResultFit(weights)
    if machine is None or details.gated:  # a gated header cannot be read without access: sizes only
        smallest = min(choices, key=lambda c: c.size)
        return ResultFit(smallest.size, smallest.label)

    def distance(c: VariantChoice) -> float:
        kld = kld_for(c.label, None)
        return abs(kld - BALANCED_KLD) if kld is not None else 1.0

    probe = min(choices, key=distance)
    smallest = min(choices, key=lambda c: c.size)
    try:
        read = gguf_variant(client, probe)
    except ModelFileError as exc:
        logger.info("%s %s: %s", repo_id, probe.label, exc)
        return ResultFit(smallest.size, smallest.label)
    variants = [read] + [c.to_variant() for c in choices if c is not probe]
    rec = assess(variants, machine)
    best = rec.recommended
    if best is None and read.spec is not None and not has_weights(read.spec):
        # Not "will not fit": there is nothing to fit (a vocabulary-only or broken upload).
        return ResultFit(smallest.size, smallest.label, "no_fit", "No model weights")
    if best is None or best.plan is None:
        return ResultFit(smallest.size, smallest.label, "no_fit", "Will not fit")
    return ResultFit(best.variant.size_bytes, best.variant.label, best.plan.verdict, best.plan.label)
