"""A search result's size and fit: the listing's sizes, one header read, scaled to the other quants."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from synthetic import GiB, profile

from app.core.hub.client import HubClient
from app.core.hub.result_fit import ResultFit, result_fit
from app.core.models.devices import machine_from_profile
from tests.fakehub import gguf_repo, mlx_repo


@pytest.fixture
def client(hf_env, fake_hub) -> HubClient:
    return HubClient(fake_hub.url, None)


def test_a_gguf_repo_gets_its_pick_size_and_verdict_from_one_header(fake_hub, client, quant_files):
    fake_hub.add_repo(
        gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    machine = machine_from_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    fit = result_fit(client, "org/Tiny-GGUF", machine)
    assert fit == ResultFit(quant_files["Q8_0"].stat().st_size, "Q8_0", "cpu", "Runs on the CPU")
    headers = {r.path.rsplit("/", 1)[-1] for r in fake_hub.requests("GET", "/resolve/") if r.range}
    assert headers == {"Tiny-Q8_0.gguf"}  # one quant's header, the one nearest Q4_K_M


def test_without_a_machine_or_gguf_only_sizes(fake_hub, client):
    fake_hub.add_repo(gguf_repo("org/Sizes-GGUF", quants=("Q4_K_M", "Q8_0"), split=None))
    fake_hub.add_repo(mlx_repo("mlx-community/Small-mlx"))
    fit = result_fit(client, "org/Sizes-GGUF", None)
    sizes = {f.path: f.size for f in client.model("org/Sizes-GGUF").files}
    smallest = min(("Q4_K_M", "Q8_0"), key=lambda q: sizes[f"Sizes-{q}.gguf"])
    assert (fit.label, fit.size_bytes, fit.verdict) == (smallest, sizes[f"Sizes-{smallest}.gguf"], "")
    mlx = result_fit(client, "mlx-community/Small-mlx", None)
    assert mlx.label == "" and mlx.size_bytes > 0 and mlx.verdict == ""
    assert not fake_hub.requests("GET", "/resolve/")  # sizes come from the listing alone


def test_a_repo_whose_gguf_holds_no_weights_says_so_not_will_not_fit(fake_hub, client):
    fake_hub.add_repo(gguf_repo("org/Empty-GGUF", quants=("Q4_K_M",), split=None))  # a header, one tiny tensor
    machine = machine_from_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    fit = result_fit(client, "org/Empty-GGUF", machine)
    assert (fit.verdict, fit.fit_text) == ("no_fit", "No model weights")
