"""The real SmolLM2 GGUF through the host: default registry, live preflight, calibration."""

from __future__ import annotations

import pytest

from app.core.engines.base import LoadSpec
from app.core.models.calibration import CalibrationStore
from app.core.runtime.engine_host import EngineHost
from tests.core.engines.fixtures import chat_request
from tests.helpers import require_llama_cpp

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_host(smollm2_gguf, tmp_path_factory):
    require_llama_cpp()
    from app.core.engines import default_registry
    from app.core.engines.llamacpp.options import default_threads

    store = CalibrationStore(tmp_path_factory.mktemp("calib") / "calibration.json")
    host = EngineHost(default_registry(), calibration=store, name="real-engine-host")
    host.load_sync(LoadSpec(path=smollm2_gguf, n_ctx=2048, n_threads=default_threads()))
    host.generate_sync(chat_request("Hi", max_tokens=2), source="warm-up")  # first run in a process is slow
    yield host, store
    assert host.shutdown(30)


def test_capital_of_france_through_the_host(real_host):
    host, store = real_host
    before = len(store.runs())
    chunks = []
    text, final = host.generate_sync(
        chat_request("What is the capital of France?", max_tokens=48), source="test", on_chunk=chunks.append
    )
    assert "Paris" in text
    assert "".join(c.text for c in chunks) == text
    assert final.finish_reason == "stop" and final.stats.generated_tokens >= 4
    assert host.state.status == "ready" and host.state.model.format == "gguf"
    runs = store.runs()
    assert len(runs) == before + 1
    assert runs[-1].model == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert runs[-1].predicted_decode > 0 and runs[-1].measured_decode == pytest.approx(final.stats.decode_tok_s)
