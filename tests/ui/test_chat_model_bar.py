"""The model bar's load defaults are the preflight's planning step, presented."""

from __future__ import annotations

import shutil

from app.core.models.devices import Device, GiB, Machine
from app.core.runtime.preflight import check_model, default_context, plan_model
from app.ui.chat.model_bar_defaults import FALLBACK_CTX, plan_defaults


def test_load_defaults_show_the_preflights_plan_and_speed(tiny_gguf_f16):
    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    model = check_model(tiny_gguf_f16, "gguf")
    planned = plan_model(model, roomy, default_context(model))
    defaults = plan_defaults(tiny_gguf_f16, "gguf", lambda: roomy)
    assert defaults.n_ctx == planned.plan.options.n_ctx and defaults.n_gpu_layers == planned.plan.options.n_gpu_layers
    assert defaults.predicted_tok_s == planned.predicted_decode_tok_s > 0
    on_gpu = f"({planned.plan.layers_on_gpu}/{planned.plan.n_layers} layers on GPU)"
    assert defaults.note == "" and on_gpu in defaults.offload
    # Without a machine or a planner for the format: safe defaults, and why.
    waiting = plan_defaults(tiny_gguf_f16, "gguf", lambda: None)
    assert waiting.n_ctx == FALLBACK_CTX and "not probed" in waiting.note
    assert "no planner" in plan_defaults(tiny_gguf_f16, "fake", lambda: roomy).note


def test_the_model_bar_says_when_llama_cpp_cannot_use_the_planned_gpu(tiny_gguf_f16):
    """The machine note the planner adds for a CPU-only llama.cpp beside a GPU reaches the model bar's
    defaults (the sentence the Hardware page's build card gives too)."""
    from app.core.hardware.profile import (
        AmdIntelInfo,
        CpuInfo,
        EngineAvailability,
        GpuInfo,
        HardwareProfile,
        MemoryInfo,
    )
    from app.core.models.devices import machine_from_profile

    radeon = GpuInfo(0, "AMD Radeon RX 7900 XTX", "amd", 24 * GiB, 23 * GiB, GiB, bandwidth_gbps=960)
    profile = HardwareProfile(
        cpu=CpuInfo(brand="AMD Ryzen 9", simd=["avx2"], physical_cores=8),
        memory=MemoryInfo(total_bytes=64 * GiB, available_bytes=60 * GiB),
        amd_intel=AmdIntelInfo(gpus=[radeon]),
        engines=[EngineAvailability("llama.cpp", True, "0.3.36", "CPU", gpu_offload=False)],
    )
    defaults = plan_defaults(tiny_gguf_f16, "gguf", lambda: machine_from_profile(profile))
    assert "make engine BACKEND=vulkan" in defaults.engine_note and "RX 7900 XTX" in defaults.engine_note
    profile.engines = [EngineAvailability("llama.cpp", True, "0.3.36", "Vulkan", gpu_offload=True)]
    assert plan_defaults(tiny_gguf_f16, "gguf", lambda: machine_from_profile(profile)).engine_note == ""


def test_load_defaults_plan_slots_up_to_the_setting_never_a_smaller_context(tiny_gguf_f16):
    from app.core.models.memory import LoadOptions
    from app.core.models.planner import plan_load

    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    model = check_model(tiny_gguf_f16, "gguf")
    ctx = default_context(model)
    four = plan_defaults(tiny_gguf_f16, "gguf", lambda: roomy, 4)
    assert four.slots == 4 and four.n_ctx == plan_defaults(tiny_gguf_f16, "gguf", lambda: roomy).n_ctx
    # A machine with room for the load and one more slot's KV, not two more: two slots, the same context.
    one = plan_load(model, roomy, n_ctx=ctx, options=LoadOptions(n_ctx=ctx)).estimate
    two = plan_load(model, roomy, n_ctx=ctx, options=LoadOptions(n_ctx=ctx, n_seq=2, kv_unified=False)).estimate
    budget = two.total + (two.total - one.total) // 2
    tight = Machine("cpu", Device("CPU", "cpu", budget, budget, 20.0, "RAM"), cores=2, simd=("avx2",))
    assert (plan_defaults(tiny_gguf_f16, "gguf", lambda: tight, 4).slots, four.n_ctx) == (2, ctx)
    assert plan_defaults(tiny_gguf_f16, "gguf", lambda: tight, 4).n_ctx == ctx


def test_the_advanced_form_offers_the_draft_models_that_fit_and_loads_the_pick(qtbot, tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from app.core.library import Library, import_path
    from app.core.runtime.drafts import DraftFinder, DraftPrefs
    from app.core.runtime.engine_host import EngineHost
    from app.core.settings import Settings
    from app.ui.chat.model_bar import ModelBar
    from app.ui.tasks import TaskRunner
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf
    from tests.ui.chat_harness import no_preflight

    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    big = write_tiny_llama_gguf(tmp_path / "big.gguf", n_layer=6, n_ctx=4096)
    small = write_tiny_llama_gguf(tmp_path / "small.gguf", n_layer=1, n_embd=128, n_ff=256, n_ctx=4096)
    other = write_tiny_llama_gguf(tmp_path / "other.gguf", n_layer=1, n_embd=128, n_ff=256, vocab_size=330)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    ids = {p.stem: import_path(library, p).imported[0].id for p in (big, small, other)}
    settings = {"now": Settings()}
    prefs = DraftPrefs(DraftFinder(library), lambda: settings["now"], lambda s: settings.update(now=s))
    d = plan_defaults(big, "gguf", lambda: roomy, 1, library.get(ids["big"]), prefs)
    assert [name for _, name, _ in d.drafts] == ["small"] and d.draft == "" and d.speculative == "auto"
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-draft-bar")
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    library.touch(ids["big"])  # listed first: the picker stands on it from the start (the case CI met)
    bar = ModelBar(host, library, tasks, lambda: roomy, drafts=prefs)
    qtbot.addWidget(bar)
    try:
        bar.picker.setCurrentIndex(
            next(i for i in range(bar.picker.count()) if bar.picker.itemData(i).id == ids["big"])
        )
        bar.replan()  # it stood on it already: picking it again sends no signal, so nothing was planned
        combo = bar.advanced.speculative
        qtbot.waitUntil(lambda: combo.count() == 3, timeout=10_000)
        assert [combo.itemText(i) for i in range(3)] == ["Off", "Prompt lookup (n-gram)", "Draft model: small"]
        assert combo.currentText() == "Prompt lookup (n-gram)"  # as planned
        specs = []
        monkeypatch.setattr(bar, "load_spec", lambda spec, fmt, name=None: specs.append(spec) or True)
        combo.setCurrentIndex(2)
        bar.load_selected()
        assert (specs[0].speculative, specs[0].draft_model) == ("draft", small)
        qtbot.waitUntil(lambda: settings["now"].draft_models == {ids["big"]: ids["small"]}, timeout=10_000)
        # Planned again, the pick is the default; choosing prompt lookup instead forgets it.
        bar.replan()
        qtbot.waitUntil(lambda: combo.count() == 3 and combo.currentIndex() == 2, timeout=10_000)
        combo.setCurrentIndex(1)
        bar.load_selected()
        assert (specs[1].speculative, specs[1].draft_model) == ("auto", None)
        qtbot.waitUntil(lambda: settings["now"].draft_models == {}, timeout=10_000)
        # Speculative decoding off in Settings: planned off, and no pick offered as the default.
        settings["now"] = settings["now"].model_copy(
            update={"speculative": "off", "draft_models": {ids["big"]: ids["small"]}}
        )
        bar.replan()
        qtbot.waitUntil(lambda: combo.count() == 3 and combo.currentIndex() == 0, timeout=10_000)
    finally:
        tasks.close()
        assert host.shutdown(5.0)
        pool.shutdown(wait=True)
        library.close()


def test_the_status_line_says_how_the_model_drafts():
    from app.core.runtime.drafts import drafting_text

    assert drafting_text({"speculative": "draft", "draft_model": "small.gguf"}) == "drafts with small.gguf"
    assert drafting_text({"speculative": "auto", "draft_model": ""}) == "prompt-lookup drafts"
    assert drafting_text({"speculative": "off"}) == drafting_text({}) == ""


def test_an_mlx_model_is_offered_mlx_drafts_and_no_prompt_lookup(qtbot, tmp_path):
    import pytest

    pytest.importorskip("safetensors")
    from app.core.library import Library, import_path
    from app.core.runtime.drafts import DraftFinder, DraftPrefs
    from app.core.settings import Settings
    from app.ui.chat.model_bar import AdvancedForm
    from tests.fixtures.tiny_mlx import write_tiny_mlx_model

    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    big = write_tiny_mlx_model(tmp_path / "big", n_layer=6)
    write_tiny_mlx_model(tmp_path / "small", n_layer=1, n_embd=128, n_ff=256)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    try:
        entries = [import_path(library, tmp_path / n).imported[0] for n in ("big", "small")]
        prefs = DraftPrefs(DraftFinder(library), Settings, lambda s: None)
        d = plan_defaults(big, "mlx", lambda: roomy, 4, entries[0], prefs)
        assert [name for _, name, _ in d.drafts] == ["small"] and not d.ngram
        form = AdvancedForm()
        qtbot.addWidget(form)
        form.set_values(d)
        assert [form.speculative.itemText(i) for i in range(form.speculative.count())] == ["Off", "Draft model: small"]
    finally:
        library.close()


def test_a_slow_plan_for_the_model_picked_before_never_overwrites_the_latest(qtbot, tmp_path, monkeypatch):
    import time
    from concurrent.futures import ThreadPoolExecutor

    from app.core.library import Library, ModelFile
    from app.core.runtime.engine_host import EngineHost
    from app.ui.chat.model_bar import ModelBar
    from app.ui.chat.model_bar_defaults import LoadPlanDefaults
    from app.ui.tasks import TaskRunner
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.ui.chat_harness import no_preflight

    library = Library(tmp_path / "models", tmp_path / "library.db")
    for name in ("a", "b"):
        path = tmp_path / f"{name}.fake"
        path.write_bytes(b"fake")
        library.add(name=name, format="fake", path=path, files=[ModelFile(path, 4)])
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-plan-order")
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    bar = ModelBar(host, library, tasks)
    qtbot.addWidget(bar)
    try:

        def planner(model):
            if model.name == "a":  # the first pick plans slowly, the second at once
                return lambda: time.sleep(0.5) or LoadPlanDefaults(n_ctx=1111)
            return lambda: LoadPlanDefaults(n_ctx=2222)

        monkeypatch.setattr(bar, "planner_for", planner)
        names = [bar.picker.itemData(i).name for i in range(bar.picker.count())]
        bar.picker.setCurrentIndex(names.index("a"))
        bar.replan()
        bar.picker.setCurrentIndex(names.index("b"))
        qtbot.waitUntil(lambda: bar.advanced.n_ctx.value() == 2222, timeout=5_000)
        qtbot.wait(800)  # the slow plan for "a" has finished by now
        assert bar.advanced.n_ctx.value() == 2222 and bar.defaults.n_ctx == 2222
    finally:
        tasks.close()
        assert host.shutdown(5.0)
        pool.shutdown(wait=True)
        library.close()


def test_the_chat_plans_a_load_as_the_api_does_embedding_models_included(
    tiny_gguf_f16, tiny_reranker_gguf, tiny_mmproj, tmp_path
):
    """One planning step for both: the chat's defaults carry the spec the API's resolver would load."""
    from app.core.library import Library, import_path
    from app.core.runtime.resolve import ModelResolver

    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    library = Library(tmp_path / "models", tmp_path / "library.db")
    try:
        resolver = ModelResolver(library, machine=lambda: roomy, max_context=None, max_slots=1, speculative="auto")
        for path in (tiny_gguf_f16, tiny_reranker_gguf):
            entry = import_path(library, path).imported[0]
            defaults = plan_defaults(path, "gguf", lambda: roomy)
            assert defaults.spec == resolver.load_spec(entry)
        reranker = plan_defaults(tiny_reranker_gguf, "gguf", lambda: roomy)
        assert reranker.role == "rerank" and not reranker.ngram and reranker.speculative == "off"
        assert reranker.spec is not None and reranker.spec.embedding and reranker.spec.pooling == "rank"
        # A model with its vision projector beside it: both plan the load with the projector.
        seeing = tmp_path / "seeing"
        seeing.mkdir()
        shutil.copy(tiny_gguf_f16, seeing / "seeing-F16.gguf")
        shutil.copy(tiny_mmproj, seeing / "mmproj-seeing-F16.gguf")
        entry = import_path(library, seeing / "seeing-F16.gguf").imported[0]
        defaults = plan_defaults(entry.path, "gguf", lambda: roomy, entry=entry)
        assert defaults.spec == resolver.load_spec(entry)
        assert defaults.spec is not None and defaults.spec.projector == seeing / "mmproj-seeing-F16.gguf"
    finally:
        library.close()


def test_the_model_line_reads_as_a_sentence_with_the_details_in_its_tooltip():
    from app.ui.chat.model_line import LoadedFacts, model_details, model_line, where_it_runs

    facts = LoadedFacts(
        name="SmolLM2 1.7B",
        engine="llama.cpp",
        file_name="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
        n_ctx=8192,
        slots=4,
        place=where_it_runs(0, "cpu", 0),
        offload="Runs on the CPU (0/31 layers on GPU)",
        drafting="prompt-lookup drafts",
        predicted_tok_s=99,
        measured_tok_s=12.4,
    )
    assert model_line(facts) == "SmolLM2 1.7B · 8,192 tokens of context · on the CPU · ~12 tok/s"
    details = model_details(facts)
    for shown in ("4 replies at once", "0/31 layers on GPU", "prompt-lookup drafts", "Predicted speed: 99 tok/s"):
        assert shown in details
    assert "Measured speed: 12 tok/s" in details
    # No reply yet, or one too slow to round to a rate: no speed on the line, never "0 tok/s".
    for tok_s in (0.0, 0.01):
        unmeasured = LoadedFacts("m", "llama.cpp", "m.gguf", 4096, measured_tok_s=tok_s)
        assert "tok/s" not in model_line(unmeasured) and "0 tok/s" not in model_details(unmeasured)
    slow = LoadedFacts("m", "llama.cpp", "m.gguf", 4096, measured_tok_s=0.4)
    assert model_line(slow).endswith("~0.4 tok/s")
    # Where it runs follows the layers loaded when they differ from the plan's.
    assert where_it_runs(-1, "cpu", 0) == "on the GPU" and where_it_runs(10, "", None) == "partly on the GPU"
    assert where_it_runs(None, "", None) == ""


def test_load_is_the_accent_until_the_picked_model_is_loaded(qtbot, tmp_path, tiny_gguf_f16):
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from app.core.chat.store import ChatStore
    from app.core.engines.base import LoadSpec
    from app.core.library import Library, ModelFile
    from app.core.runtime.engine_host import EngineHost
    from app.ui.chat import ChatPage
    from app.ui.tasks import TaskRunner
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.ui.chat_harness import no_preflight

    library = Library(tmp_path / "models", tmp_path / "library.db")
    store = ChatStore(tmp_path / "chats.sqlite3")
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-load-accent")
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    page = ChatPage(host, store, library, tasks)
    qtbot.addWidget(page)
    try:
        fake = tmp_path / "model.fake"
        fake.write_bytes(b"x")
        library.add(name="Tiny Fake", format="fake", path=fake, files=[ModelFile(fake, 1)])
        library.add(name="Other", format="gguf", path=tiny_gguf_f16, files=[ModelFile(tiny_gguf_f16, 1)])
        bar = page.model_bar
        bar.refresh_models()
        bar.picker.setCurrentIndex(next(i for i in range(2) if bar.picker.itemData(i).name == "Tiny Fake"))
        assert bar.load_button.text() == "Load" and bar.load_button.property("role") == "primary"
        host.load_sync(LoadSpec(path=Path(fake), n_ctx=2048), "fake")
        qtbot.waitUntil(lambda: bar.load_button.text() == "Reload", timeout=5000)
        assert bar.load_button.property("role") != "primary"
        assert page.composer.send_button.property("role") == "primary"  # typing and sending is next
        assert bar.status.text().startswith("Tiny Fake · 2,048 tokens of context")
        assert "Engine: " in bar.status.toolTip() and "slots" not in bar.status.text()
        bar.picker.setCurrentIndex(next(i for i in range(2) if bar.picker.itemData(i).name == "Other"))
        assert bar.load_button.text() == "Load" and bar.load_button.property("role") == "primary"
    finally:
        page.shutdown()
        tasks.close()
        store.close()
        assert host.shutdown(5.0)
        pool.shutdown(wait=True)
        library.close()


def test_the_name_and_speed_shown_belong_to_the_model_loaded(make_chat, qtbot):
    from pathlib import Path

    from app.core.engines.base import LoadSpec

    _h, page = make_chat(load=False)
    bar = page.model_bar
    assert bar.load_spec(LoadSpec(path=Path("/nonexistent/model.fake"), n_ctx=2048), "fake", "Pretty Name")
    qtbot.waitUntil(lambda: bar.status.text().startswith("Pretty Name · 2,048 tokens of context"), timeout=5000)
    bar.set_measured(42.0)
    assert bar.status.text().endswith("~42 tok/s")
    page.model_bar.host.load_sync(LoadSpec(path=Path("/nonexistent/other.fake"), n_ctx=2048), "fake")  # the API's
    qtbot.waitUntil(lambda: bar.status.text().startswith("other.fake · "), timeout=5000)
    assert "tok/s" not in bar.status.text() and "Measured speed: after the first reply" in bar.status.toolTip()


def test_the_picker_says_which_models_can_see_images(qtbot, tiny_gguf_f16, tiny_mmproj, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from app.core.library import Library, import_path
    from app.core.runtime.engine_host import EngineHost
    from app.ui.chat.model_bar import ModelBar
    from app.ui.tasks import TaskRunner
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.ui.chat_harness import no_preflight

    library = Library(tmp_path / "models", tmp_path / "library.db")
    seeing = tmp_path / "seeing"
    seeing.mkdir()
    shutil.copy(tiny_gguf_f16, seeing / "seeing-F16.gguf")
    shutil.copy(tiny_mmproj, seeing / "mmproj-seeing-F16.gguf")
    import_path(library, seeing / "seeing-F16.gguf")
    import_path(library, tiny_gguf_f16)
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-picker-vision")
    pool = ThreadPoolExecutor(1)
    tasks = TaskRunner(pool)
    bar = ModelBar(host, library, tasks)
    qtbot.addWidget(bar)
    try:
        shown = {bar.picker.itemData(i).path.name: bar.picker.itemText(i) for i in range(bar.picker.count())}
        assert shown["seeing-F16.gguf"].endswith(" · gguf · vision")
        assert shown[tiny_gguf_f16.name].endswith(" · gguf")
    finally:
        tasks.close()
        assert host.shutdown(5.0)
        pool.shutdown(wait=True)
        library.close()
