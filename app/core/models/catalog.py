"""The shipped catalogue (resources/catalog.json) ranked for this machine: Discover's first screen."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.core.models.calibration import CalibrationStore
from app.core.models.devices import Machine
from app.core.models.hf_config import spec_from_hf_config
from app.core.models.recommend import COMFORTABLE_TOK_S, Assessment, Recommendation, Variant, assess
from app.core.resources import load_json


@dataclass
class CatalogModel:
    name: str
    family: str
    params: int
    license: str
    variants: list[Variant]


@dataclass
class CatalogPick:
    model: CatalogModel
    recommendation: Recommendation

    @property
    def best(self) -> Assessment | None:
        return self.recommendation.recommended


def load_catalog() -> list[CatalogModel]:
    out = []
    for m in load_json("catalog.json")["models"]:
        variants = []
        for v in m["variants"]:
            spec = spec_from_hf_config(
                m["config"], weight_bytes=v["size_bytes"], n_params=m["params"], file_type=v["label"], name=m["name"]
            )
            variants.append(
                Variant(
                    label=v["label"],
                    format=v["format"],
                    size_bytes=v["size_bytes"],
                    spec=spec,
                    bpw=v.get("bpw"),
                    repo_id=v["repo"],
                    revision=v.get("revision"),
                )
            )
        out.append(CatalogModel(m["name"], m["family"], m["params"], m["license"], variants))
    return out


def _rank(pick: CatalogPick) -> tuple:
    best = pick.best
    if best is None:
        return (3, pick.model.params)
    tok_s = best.speed.decode_tok_s if best.speed else 0.0
    if tok_s >= COMFORTABLE_TOK_S and best.plan is not None and not best.plan.ctx_reduced:
        # Most capable first: parameters, discounted by how much the quant loses.
        return (0, -math.log(pick.model.params) + (best.kld or 0) * 10)
    if tok_s >= COMFORTABLE_TOK_S:
        return (1, -pick.model.params)
    return (2, -tok_s)


def ranking_note(picks: list[CatalogPick]) -> str:
    """The Recommended list's status line: how many run here, and the rule `_rank` orders them by, so
    the order reads as a choice and not as chance. Keep it in step with `_rank`."""
    fits = sum(p.best is not None for p in picks)
    return (
        f"{fits} of {len(picks)} catalogue models run on this machine. Most capable first: the largest "
        f"model at good quality that runs at a comfortable speed (≥ {COMFORTABLE_TOK_S:.0f} tok/s) with the "
        "full context leads; then those that need a shorter context, then slower ones, fastest first; "
        "models that will not fit come last."
    )


def ranked_catalog(
    machine: Machine,
    *,
    n_ctx: int = 8192,
    calibration: CalibrationStore | None = None,
    models: list[CatalogModel] | None = None,
) -> list[CatalogPick]:
    """Every catalogue model with its recommended variant here, most useful first."""
    picks = [
        CatalogPick(m, assess(m.variants, machine, n_ctx=n_ctx, calibration=calibration))
        for m in (models if models is not None else load_catalog())
    ]
    return sorted(picks, key=_rank)
