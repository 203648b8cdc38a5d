"""What the chat's model bar says about the loaded model, in the words a person reads (Qt-free): one short
line (its name, its context, where it runs, the speed measured) and the details behind it for a tooltip."""

from __future__ import annotations

from dataclasses import dataclass

PLACES = {"full_gpu": "on the GPU", "partial": "partly on the GPU", "cpu": "on the CPU"}


@dataclass(frozen=True)
class LoadedFacts:
    name: str  # the library's name for it (else its file's)
    engine: str
    file_name: str
    n_ctx: int
    slots: int = 1
    place: str = ""  # "on the CPU"; "" when not known
    offload: str = ""  # the planner's words: "Runs on the CPU (0/31 layers on GPU)"
    drafting: str = ""  # "prompt-lookup drafts"
    predicted_tok_s: float = 0.0
    measured_tok_s: float = 0.0  # the last reply's decode speed; 0: none measured yet


def fmt_rate(tok_s: float) -> str:
    """12 → "12", 0.43 → "0.4": a slow model's speed is never shown as "0"."""
    return f"{tok_s:,.0f}" if tok_s >= 10 else f"{tok_s:.1f}"


def where_it_runs(n_gpu_layers: object, planned_verdict: str, planned_layers: int | None) -> str:
    """Where the loaded model runs, in words: the plan's verdict when it loaded as planned, else what its
    GPU layers say (0: CPU, -1: all); "" when the engine does not say."""
    if planned_verdict in PLACES and (planned_layers is None or n_gpu_layers == planned_layers):
        return PLACES[planned_verdict]
    if not isinstance(n_gpu_layers, int):
        return ""
    if n_gpu_layers == 0:
        return PLACES["cpu"]
    return PLACES["full_gpu"] if n_gpu_layers < 0 else PLACES["partial"]


def measured(tok_s: float) -> bool:
    """A real measurement: a reply that decoded at all (a rate that rounds to 0.0 says nothing)."""
    return tok_s >= 0.05


def model_line(f: LoadedFacts) -> str:
    """ "SmolLM2 1.7B · 8,192 tokens of context · on the CPU · ~12 tok/s" """
    parts = [f.name, f"{f.n_ctx:,} tokens of context"]
    if f.place:
        parts.append(f.place)
    if measured(f.measured_tok_s):
        parts.append(f"~{fmt_rate(f.measured_tok_s)} tok/s")
    return " · ".join(parts)


def model_details(f: LoadedFacts) -> str:
    """The tooltip: engine, file, slots, layers, drafting, and the predicted against the measured speed."""
    lines = [f"Engine: {f.engine}", f"File: {f.file_name}", f"Context: {f.n_ctx:,} tokens per reply"]
    slots = "one reply at a time" if f.slots <= 1 else f"{f.slots} replies at once (chat and API)"
    lines.append(f"Replies at once (parallel slots): {slots}")
    if f.offload:
        lines.append(f"Placement: {f.offload}")
    if f.drafting:
        lines.append(f"Speculative decoding: {f.drafting}")
    if f.predicted_tok_s > 0:
        lines.append(f"Predicted speed: {fmt_rate(f.predicted_tok_s)} tok/s")
    if measured(f.measured_tok_s):
        lines.append(f"Measured speed: {fmt_rate(f.measured_tok_s)} tok/s (the last reply)")
    else:
        lines.append("Measured speed: after the first reply")
    return "\n".join(lines)
