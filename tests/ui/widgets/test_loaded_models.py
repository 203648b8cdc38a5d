"""The Loaded models strip over a real ModelPool of FakeEngines (and over a plain EngineHost): its rows,
Pin (Unpin), Unload, the pool's notices and the idle countdown."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import shiboken6

from app.core.engines.base import LoadSpec
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.job_host import Resident
from app.core.runtime.jobs import HostState, LoadJob
from app.core.runtime.pool import ModelPool
from app.core.units import GiB, MiB
from app.ui.widgets.loaded_models import LoadedModelsStrip
from app.ui.widgets.resident_text import leaves_text, memory_text, status_text
from tests.core.runtime.test_pool import NameResolver  # name → <folder>/<name>.fake
from tests.fixtures.fake_engine import registry_with_fake
from tests.ui.chat_harness import no_preflight


@pytest.fixture
def make_pool(tmp_path):
    pools: list[ModelPool] = []

    def make(**kwargs) -> ModelPool:
        for name in ("a", "b", "c"):
            (tmp_path / f"{name}.fake").write_text(name)
        pool = ModelPool(registry_with_fake(), resolver=NameResolver(tmp_path), **kwargs)  # type: ignore[arg-type]
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        assert pool.shutdown(5.0)


def load(pool: ModelPool, *names: str) -> None:
    for name in names:
        handle = pool.submit(pool.resolver(name))
        assert handle.wait(5) and handle.error is None


def shown_strip(qtbot, host, **kwargs) -> LoadedModelsStrip:
    strip = LoadedModelsStrip(host, notice_ms=kwargs.pop("notice_ms", 10_000), **kwargs)
    qtbot.addWidget(strip)
    strip.resize(700, 200)
    strip.show()
    return strip


def names(strip: LoadedModelsStrip) -> list[str]:
    return [row.name.full_text() for row in strip.rows.values()]


def test_each_loaded_model_has_a_row_that_says_what_it_is(qtbot, make_pool):
    pool = make_pool()
    strip = shown_strip(qtbot, pool)
    assert strip.empty.isVisible() and strip.rows == {}
    load(pool, "a", "b")
    qtbot.waitUntil(lambda: sorted(names(strip)) == ["a.fake", "b.fake"], timeout=5_000)
    assert not strip.empty.isVisible()
    texts = {row[0]: row for row in strip.row_texts()}
    # The focus model (the last loaded) is marked; each is ready, its memory unknown, with no time-to-live.
    assert texts["a.fake"] == ["a.fake", "—", "Ready", "kept while there's room"]
    assert texts["b.fake"] == ["b.fake", "· in chat", "—", "Ready", "kept while there's room"]


def test_pin_asks_the_pool_and_the_row_says_pinned(qtbot, make_pool):
    pool = make_pool(idle_ttl_s=600)
    strip = shown_strip(qtbot, pool)
    load(pool, "a")
    qtbot.waitUntil(lambda: len(strip.rows) == 1, timeout=5_000)
    row = next(iter(strip.rows.values()))
    assert row.pin.isVisible() and not row.pin.isChecked()
    row.pin.click()
    assert pool.residents()[0].pinned
    qtbot.waitUntil(lambda: row.leaves.text() == "pinned", timeout=5_000)
    row.pin.click()
    assert not pool.residents()[0].pinned
    qtbot.waitUntil(lambda: row.leaves.text().startswith("unloads in"), timeout=5_000)


def test_eject_unloads_that_model_and_its_row_goes(qtbot, make_pool):
    pool = make_pool()
    strip = shown_strip(qtbot, pool)
    load(pool, "a", "b")
    qtbot.waitUntil(lambda: len(strip.rows) == 2, timeout=5_000)
    row_a = next(row for row in strip.rows.values() if row.name.full_text() == "a.fake")
    row_a.eject.click()
    qtbot.waitUntil(lambda: names(strip) == ["b.fake"], timeout=5_000)
    assert [Path(r.key).name for r in pool.residents()] == ["b.fake"]
    assert not strip.notice.isVisible()  # no failure to tell


def test_an_eject_that_fails_says_why_and_the_row_stays(qtbot, make_pool):
    pool = make_pool()
    strip = shown_strip(qtbot, pool)
    load(pool, "a")
    qtbot.waitUntil(lambda: len(strip.rows) == 1, timeout=5_000)
    strip.eject("/nowhere/x.gguf")  # a model the pool no longer holds: it fails the job through its sink
    qtbot.waitUntil(lambda: strip.notice.text().startswith("Could not unload"), timeout=5_000)
    assert names(strip) == ["a.fake"] and strip.row_texts()[0][-2] == "Ready"


def test_the_pools_notice_shows_for_a_while(qtbot, make_pool):
    pool = make_pool(max_models=2)
    strip = shown_strip(qtbot, pool, notice_ms=300)
    load(pool, "a", "b", "c")  # the cap: a, the least recently used, makes room for c
    qtbot.waitUntil(lambda: strip.notice.isVisible(), timeout=5_000)
    assert strip.notice.text() == "Unloaded a.fake to make room for c.fake"
    qtbot.waitUntil(lambda: sorted(names(strip)) == ["b.fake", "c.fake"], timeout=5_000)
    qtbot.waitUntil(lambda: not strip.notice.isVisible(), timeout=5_000)


def test_the_idle_countdown_ticks_then_the_model_goes(qtbot, make_pool):
    pool = make_pool(idle_ttl_s=5)
    strip = shown_strip(qtbot, pool)
    load(pool, "a")
    qtbot.waitUntil(lambda: len(strip.rows) == 1, timeout=5_000)
    row = next(iter(strip.rows.values()))
    first = row.leaves.text()
    assert re.fullmatch(r"unloads in [345] s", first)  # not 5 s on the dot: a busy machine is slow to show it
    qtbot.waitUntil(lambda: row.leaves.text() not in ("", first), timeout=3_000)
    assert int(row.leaves.text().split()[2]) < int(first.split()[2])
    # Idle past its time-to-live: the pool unloads it and says so.
    qtbot.waitUntil(lambda: strip.rows == {}, timeout=10_000)
    assert strip.empty.isVisible()
    assert strip.notice.text() == "Unloaded a.fake: idle past its time-to-live"


def test_the_countdown_does_not_tick_while_hidden(qtbot, make_pool):
    pool = make_pool(idle_ttl_s=60)
    strip = shown_strip(qtbot, pool)
    load(pool, "a")
    qtbot.waitUntil(lambda: strip._tick.isActive(), timeout=5_000)
    strip.hide()
    assert not strip._tick.isActive()
    strip.show()
    assert strip._tick.isActive()


def test_a_plain_engine_host_shows_its_one_model_and_ejects_it(qtbot, tmp_path):
    model = tmp_path / "solo.fake"
    model.write_text("solo")
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-strip-host")
    try:
        strip = shown_strip(qtbot, host)
        handle = host.submit(LoadJob(spec=LoadSpec(path=model, n_ctx=512), format="fake"))
        assert handle.wait(5) and handle.error is None
        qtbot.waitUntil(lambda: names(strip) == ["solo.fake"], timeout=5_000)
        row = strip.rows[str(model)]
        assert not row.pin.isVisible()  # one model, nothing to pin it against
        assert row.leaves.text() == "kept while there's room"
        row.eject.click()
        qtbot.waitUntil(lambda: strip.rows == {} and strip.empty.isVisible(), timeout=5_000)
        assert host.state.model is None
    finally:
        assert host.shutdown(5.0)


def test_compact_hides_while_nothing_is_loaded(qtbot, make_pool):
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    pool = make_pool()
    holder = QWidget()
    qtbot.addWidget(holder)
    strip = LoadedModelsStrip(pool, compact=True)
    QVBoxLayout(holder).addWidget(strip)
    holder.show()
    assert not strip.isVisible() and not strip.title.isVisible()
    load(pool, "a")
    qtbot.waitUntil(strip.isVisible, timeout=5_000)
    assert not strip.empty.isVisible()


def test_a_destroyed_strip_stops_listening(qtbot, make_pool):
    pool = make_pool()
    strip = LoadedModelsStrip(pool)
    assert pool.residents_changed._callbacks and pool.notice._callbacks
    shiboken6.delete(strip)
    assert pool.residents_changed._callbacks == [] and pool.notice._callbacks == []
    load(pool, "a")  # emits to no one, and nothing fails


def resident(**changes) -> Resident:
    base = Resident("/m/x.gguf", HostState(status="ready"), 0, False, 300.0, 250.0, 0.0, False)
    return dataclasses.replace(base, **changes)


def test_the_row_texts():
    assert memory_text(0) == "—"
    assert memory_text(350 * MiB) == "350 MiB"
    assert memory_text(int(1.2 * GiB)) == "1.2 GiB"
    assert leaves_text(resident()) == "unloads in 5 min"
    assert leaves_text(resident(idle_left_s=42.2)) == "unloads in 43 s"
    assert leaves_text(resident(idle_left_s=None)) == "unloads 5 min after use"
    assert leaves_text(resident(ttl_s=None, idle_left_s=None)) == "kept while there's room"
    assert leaves_text(resident(pinned=True, ttl_s=None, idle_left_s=None)) == "pinned"
    busy = HostState(status="generating", slots_total=4, slots_busy=2)
    assert status_text(resident(state=busy)) == "Generating 2 of 4"
    assert status_text(resident(state=HostState(status="loading"))) == "Loading…"


def test_my_models_and_the_chat_bar_list_the_loaded_models(qtbot, make_pool, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from app.core.library import Library
    from app.ui.chat.model_bar import ModelBar
    from app.ui.library_page import LibraryPage
    from app.ui.tasks import TaskRunner

    pool = make_pool()
    executor = ThreadPoolExecutor(2)
    tasks = TaskRunner(executor)
    (tmp_path / "models").mkdir()
    library = Library(tmp_path / "models", tmp_path / "library.db")
    try:
        page = LibraryPage(library, tasks, host=pool)
        bar = ModelBar(pool, library, tasks)
        for w in (page, bar):
            qtbot.addWidget(w)
            w.show()
        assert page.loaded_models is not None and page.loaded_models.empty.isVisible()
        assert not bar.loaded_models.isVisible()  # compact: nothing loaded, nothing shown
        load(pool, "a", "b")
        for strip in (page.loaded_models, bar.loaded_models):
            qtbot.waitUntil(lambda s=strip: sorted(names(s)) == ["a.fake", "b.fake"], timeout=5_000)
        assert bar.loaded_models.isVisible()
        bare = LibraryPage(library, tasks)
        qtbot.addWidget(bare)
        assert bare.loaded_models is None  # no host given: no such section
    finally:
        tasks.close()
        executor.shutdown(wait=True)
        library.close()


def test_a_name_that_fits_shows_whole_and_a_long_one_elides(qtbot, themed):
    from app.ui.widgets.loaded_models import ResidentRow

    row = ResidentRow("/m/Tiny-Llama-F16.gguf", can_pin=True, compact=True)
    qtbot.addWidget(row)
    row.resize(900, 40)
    row.show()
    row.show_resident(resident(key="/m/Tiny-Llama-F16.gguf"), unloading=False)
    qtbot.waitUntil(lambda: row.name.text() == "Tiny-Llama-F16.gguf")  # room for it: not "Tiny-Llama-F16.g…"
    long = "a-very-long-model-file-name-" * 6 + ".gguf"
    row.show_resident(resident(key=f"/m/{long}"), unloading=False)
    qtbot.waitUntil(lambda: row.name.text().endswith("…"))
    assert row.name.full_text() == long and row.name.toolTip() == long
    assert row.pin.geometry().right() <= row.width()  # the buttons stay inside the row
