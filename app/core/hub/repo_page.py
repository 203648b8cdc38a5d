"""Everything a Hub repo's page shows, gathered off the UI thread: details, the model card, the gated
notice, and every variant assessed for this machine (from remote metadata, or sizes only without access)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.core.errors import HearthError
from app.core.hub.client import HubClient
from app.core.hub.errors import HubGated
from app.core.hub.metadata import assessable_variants
from app.core.hub.variants import repo_variants
from app.core.models.devices import Machine
from app.core.models.recommend import Recommendation, Variant, assess

logger = logging.getLogger(__name__)


@dataclass
class HubModel:
    """Everything the model view needs for a Hub repo, gathered on a worker thread."""

    repo_id: str
    subtitle: str
    card: str
    recommendation: Recommendation
    machine: Machine
    notice: str = ""  # gated: what the user must do; or why variant details are missing
    page_url: str = ""  # the repo's page on the Hub (or the mirror), where a licence is accepted
    access_needed: bool = False  # gated, and this token (or no token) has no access: nothing can download


def load_hub_model(client: HubClient, repo_id: str, machine: Machine | None, n_ctx: int = 8192) -> HubModel:
    """A pool thread: details, card and variants with metadata read remotely (GGUF headers by Range)."""
    if machine is None:
        from app.core.hardware import probe_hardware
        from app.core.models.devices import machine_from_profile

        machine = machine_from_profile(probe_hardware(measure_bandwidth=False))
    details = client.model(repo_id)
    notice, card = "", ""
    denied = False
    try:
        card = client.model_card(repo_id, details.sha)
    except HubGated as exc:
        notice, denied = str(exc), True
    if details.gated and not notice:
        first = next((f for f in details.files if f.path.lower().endswith((".gguf", ".safetensors"))), None)
        if first is not None:
            try:
                client.file_metadata(repo_id, first.path, details.sha)
            except HubGated as exc:
                notice, denied = str(exc), True
    if notice:
        # Without access the headers cannot be read: list what the file listing says (sizes), fit estimated.
        variants = [c.to_variant() for c in repo_variants(client, repo_id)]
    else:
        try:
            variants = assessable_variants(client, repo_id, details.sha)
        except HearthError as exc:
            logger.info("reading %s remotely failed: %s", repo_id, exc)
            variants = [c.to_variant() for c in repo_variants(client, repo_id)]
            notice = f"Could not read the model files' details ({exc}); sizes only."
    lic = details.card_data.get("license") if isinstance(details.card_data, dict) else None
    bits = [f"by {repo_id.split('/')[0]}", f"↓ {details.downloads:,}", f"♥ {details.likes:,}"]
    if lic:
        bits.append(f"licence {lic}")
    if details.gated:
        bits.append("gated")
    return HubModel(
        repo_id,
        " · ".join(bits),
        card,
        assess(variants, machine, n_ctx=n_ctx),
        machine,
        notice,
        page_url=f"{client.endpoint}/{repo_id}",
        access_needed=denied,
    )


def with_hub_variants(estimated: list[Variant], hub: HubModel, n_ctx: int = 8192) -> Recommendation:
    """A catalogue model re-assessed once its repo answered: the repo's real variants (sizes and headers)
    replace the catalogue's estimates for that repo; variants in other repos (MLX, EXL2) stay estimated."""
    real = [a.variant for a in hub.recommendation.assessments]
    others = [v for v in estimated if v.repo_id != hub.repo_id]
    return assess(real + others, hub.machine, n_ctx=n_ctx)
