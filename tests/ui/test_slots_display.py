"""What the UI says about parallel slots and the prompt cache: the chat's stats line (cached tokens, draft
acceptance, from stats built here), the Server page's slots line, and the fit view's slot arithmetic."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path

from app.core.engines.base import GenerationStats, ModelInfo
from app.core.runtime.jobs import HostState
from app.ui.chat.messages_model import stats_line
from app.ui.server_model import slots_text

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "models"))


def test_the_stats_line_shows_cached_tokens_and_draft_acceptance():
    stats = GenerationStats(
        prompt_tokens=600,
        prompt_tokens_evaluated=88,
        time_to_first_token_s=0.25,
        decode_tok_s=41.0,
        generated_tokens=120,
        draft_tokens=100,
        draft_accepted=63,
    )
    line = stats_line(asdict(stats), "stop")  # as the chat stores them
    assert line == "TTFT 0.25 s · 41.0 tok/s · 120 tokens · 512 cached · guessed ahead: 63 % kept · finish: stop"


def test_nothing_cached_or_drafted_says_neither():
    fresh = asdict(GenerationStats(prompt_tokens=40, prompt_tokens_evaluated=40, generated_tokens=5))
    assert "cached" not in stats_line(fresh, "length") and "guessed" not in stats_line(fresh, "length")
    # A reply stored before the engine counted evaluated tokens claims no cache.
    assert "cached" not in stats_line({"prompt_tokens": 40, "generated_tokens": 5}, None)
    # Drafts all rejected is still a rate: 0 %.
    rejected = asdict(GenerationStats(prompt_tokens=4, prompt_tokens_evaluated=4, draft_tokens=8))
    assert "guessed ahead: 0 % kept" in stats_line(rejected, None)


def test_the_server_slots_line():
    model = ModelInfo(path=Path("m.gguf"), format="gguf", n_ctx=8192)
    state = HostState(status="generating", model=model, slots_total=4, slots_busy=2, queue_depth=0)
    assert slots_text(state) == "Replies at once: 2 of 4 in use · 0 waiting"
    assert slots_text(HostState(status="ready", model=model, slots_total=1, queue_depth=3)) == (
        "Replies at once: 0 of 1 in use · 3 waiting"
    )
    assert slots_text(HostState()) == ""  # nothing loaded: no slots to speak of
    drafting = ModelInfo(path=Path("m.gguf"), format="gguf", n_ctx=8192, extra={"draft_model": "small.gguf"})
    assert slots_text(HostState(status="ready", model=drafting, slots_total=4)) == (
        "Replies at once: 0 of 4 in use · 0 waiting · drafts with small.gguf"
    )


def test_the_fit_view_shows_the_slots_beside_the_context(qtbot):
    from synthetic import GiB, llama3_8b_spec, profile

    from app.core.models.devices import machine_from_profile
    from app.ui.widgets.fit_view import FitView

    gpu = machine_from_profile(profile(gpus=[("NVIDIA GeForce RTX 4060 Ti", 16 * GiB, 9 * GiB, 288)]))
    view = FitView(llama3_8b_spec(), gpu, n_ctx=8192, slots=4)
    qtbot.addWidget(view)
    text = view.explanation_label.text()
    assert "KV 2.00 GiB (2 × 8,192 ctx, f16)" in text  # 8 GiB usable: room for two slots of 1 GiB
    assert "2 parallel slots × 8,192 tokens: KV 2.00 GiB (room for 2 of the 4 asked)" in text
    assert view.bars["CUDA0"].parts["kv"] == 2 * GiB
    single = FitView(llama3_8b_spec(), gpu, n_ctx=8192)  # slots=1: the view as it was
    qtbot.addWidget(single)
    assert "parallel" not in single.explanation_label.text()


def test_settings_show_parallel_requests_and_keep_it(qtbot, tmp_path):
    """Edited on the Server page only (tests/ui/test_settings_access.py); Settings shows it and saves it as is."""
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.ui.settings_dialog import SettingsDialog

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load().model_copy(update={"parallel_requests": 1}), paths, env={})
    qtbot.addWidget(dialog)
    assert dialog.parallel_requests.text() == "1 at once"
    dialog.accept()
    assert store.load().parallel_requests == 1
    auto = SettingsDialog(store, store.load().model_copy(update={"parallel_requests": 0}), paths, env={})
    qtbot.addWidget(auto)
    assert auto.parallel_requests.text() == "Auto (by memory)"


def test_with_a_free_slot_nothing_waits_for_the_running_reply():
    from app.ui.server_model import engine_text

    model = ModelInfo(path=Path("m.gguf"), format="gguf", n_ctx=8192)
    chat = HostState(status="generating", model=model, source="chat", slots_total=4, slots_busy=1)
    assert engine_text(chat, True) == "Engine: writing a chat reply — room for 3 of 4 API requests beside it"
    full = HostState(status="generating", model=model, source="chat", slots_total=4, slots_busy=4, queue_depth=2)
    assert engine_text(full, True) == "Engine: busy with a chat reply — API requests wait their turn · 2 waiting"
    one = HostState(status="generating", model=model, source="chat", slots_total=1, slots_busy=1)
    assert "API requests wait their turn" in engine_text(one, True)


def test_settings_offer_speculative_decoding_and_save_it(qtbot, tmp_path):
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.ui.settings_dialog import SettingsDialog

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load(), paths, env={})
    qtbot.addWidget(dialog)
    box = dialog.speculative
    assert [box.itemData(i) for i in range(box.count())] == ["auto", "off"]
    assert box.currentData() == "auto"  # prompt lookup, where it measures faster
    box.setCurrentIndex(box.findData("off"))
    dialog.accept()
    assert store.load().speculative == "off"
    old = SettingsDialog(store, store.load().model_copy(update={"speculative": "on"}), paths, env={})
    qtbot.addWidget(old)
    assert old.speculative.currentData() == "auto"  # a setting saved as the old "On" means Automatic now
