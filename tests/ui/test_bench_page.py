"""The Benchmark page: a run on a model through the engine host (the FakeEngine) with progress and Cancel,
its report plotted against the prediction, two saved runs compared on the same axes, exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCharts import QValueAxis
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QScrollArea

from app.core.bench.report import BenchReport, Prediction
from app.core.bench.store import BenchStore
from app.core.bench.workload import Workload
from app.core.engines.base import LoadSpec
from app.core.library import ModelFile
from app.core.runtime.jobs import LoadJob
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.ui.bench.bench_page import BenchPage
from app.ui.bench.charts import label_format, tick_labels
from app.ui.bench.run_setup import ENDPOINT
from app.ui.bench.series import legend_labels, single_user_cells, speed_series, table_rows, ttft_bars
from tests.fixtures.fake_engine import registry_with_fake
from tests.server.conftest import fake_library
from tests.ui.hub_gui_fixtures import pool_tasks  # noqa: F401

TINY = Workload(prompt_lens=[40, 80], gen_len=6, concurrency=[1, 2], runs=2, warmup=1, shared_prefix=30)


@pytest.fixture
def make_page(qtbot, tmp_path, pool_tasks):  # noqa: F811
    """The page over the app's kind of model pool, its resolver reading the page's library."""
    libraries, pools = [], []

    def make(exports: list[str] | None = None, names: tuple[str, ...] = ("alpha", "beta")) -> BenchPage:
        library = fake_library(tmp_path / f"lib{len(libraries)}", names)
        libraries.append(library)
        resolver = ModelResolver(library, machine=lambda: None)
        pool = ModelPool(registry_with_fake(tok_s=400), resolver=resolver, queue_size=8, name="test-bench-page")
        pools.append(pool)
        answers = list(exports or [])
        page = BenchPage(
            pool,
            library,
            BenchStore(tmp_path / "bench"),
            pool_tasks,
            save_dialog=lambda _title, _name: answers.pop(0) if answers else "",
        )
        qtbot.addWidget(page)
        qtbot.waitUntil(lambda: page.source.count() == len(names) + 1, timeout=5_000)  # the models, an endpoint
        return page

    yield make
    for pool in pools:
        assert pool.shutdown(5)
    for library in libraries:
        library.close()


def run(qtbot, page: BenchPage, workload: Workload = TINY) -> BenchReport:
    with qtbot.waitSignal(page.run_finished, timeout=30_000) as got:
        page.start(workload)
    return got.args[0]


def test_a_run_shows_progress_then_its_charts_table_and_saved_entry(qtbot, make_page, tmp_path):
    page = make_page()
    assert page.source.itemData(page.source.count() - 1) == ENDPOINT
    assert not page.url.isVisibleTo(page)  # the endpoint's fields only for an endpoint
    seen = []
    page.progress.valueChanged.connect(seen.append)
    report = run(qtbot, page)
    assert seen and max(seen) > 0  # the bar moved while it ran
    assert not page.running and page.run_button.isEnabled() and not page.progress.isVisible()
    saved = list((tmp_path / "bench").glob("*.json"))
    assert len(saved) == 1 and BenchReport.from_json(saved[0].read_text()) == report
    qtbot.waitUntil(lambda: page.runs.list.count() == 1 and page.runs.shown == [report], timeout=5_000)
    assert page.runs.checked_paths() == saved  # the run just made is the one shown
    # The table: one row per (prompt length, users), as `hearth bench` prints it.
    assert page.results.table.rowCount() == len(report.cells) == 4
    assert [page.results.table.item(r, 0).text() for r in range(4)] == ["40", "40", "80", "80"]
    assert page.results.table.item(0, 6).text() == table_rows(report)[0][6]
    chosen = page.source.currentData().name  # the library's name for it, not the one inside the file
    assert report.model.name == chosen and page.results.heading.text().startswith(chosen + " · ")
    assert "prompts 40, 80" in page.results.details.text()
    assert "cached" in page.results.prefix_note.text()  # the shared prefix's benefit, in words
    # The charts: measured decode and prefill at both prompt lengths; TTFT bars per prompt length.
    decode = page.results.charts.decode.series_shown[0]
    assert [round(x) for x, _ in decode.measured] == [c.prompt_len for c in single_user_cells(report)]
    assert all(y > 0 for _, y in decode.measured)
    assert [s.name() for s in page.results.charts.decode.chart().series() if s.name().startswith("Measured")]
    assert [b.label() for b in page.results.charts.ttft.bar_sets] == ["p50", "p95", "p99"]
    p50, p95, p99 = ([b.at(i) for i in range(b.count())] for b in page.results.charts.ttft.bar_sets)
    assert all(a <= b <= c for a, b, c in zip(p50, p95, p99))
    assert p50 == pytest.approx(ttft_bars(report).p50)


def test_cancel_keeps_a_partial_report_marked_partial(qtbot, make_page, tmp_path):
    page = make_page()
    slow = Workload(prompt_lens=[40], gen_len=200, concurrency=[1], runs=50, warmup=1)
    done = []
    page._progress.fired.connect(lambda p: done.append(p.done))
    with qtbot.waitSignal(page.run_failed, timeout=30_000) as got:
        page.start(slow)
        qtbot.waitUntil(lambda: max(done, default=0) >= 3, timeout=20_000)  # the warm-up and two measured
        assert page.cancel_button.isEnabled()
        page.cancel_button.click()
    assert "saved as a partial run" in got.args[0] and page.status.text().startswith(got.args[0])
    saved = list((tmp_path / "bench").glob("*.json"))
    assert len(saved) == 1 and not page.running and page.run_button.isEnabled()
    partial = BenchReport.from_json(saved[0].read_text())
    assert partial.partial and partial.cells[0].completed >= 2 and partial.notes[0].startswith("partial:")
    qtbot.waitUntil(lambda: page.runs.list.count() == 1 and page.runs.shown == [partial], timeout=5_000)
    assert "partial" in page.runs.list.item(0).text()
    assert page.results.heading.text().startswith("Partial run (cancelled): ")


def test_cancel_before_anything_is_measured_saves_nothing(qtbot, make_page, tmp_path):
    page = make_page()
    with qtbot.waitSignal(page.run_failed, timeout=30_000) as got:
        page.start(Workload(prompt_lens=[40], gen_len=200, concurrency=[1], runs=50, warmup=1))
        page.cancel()
    assert got.args[0] == "Cancelled before anything was measured; no report was saved."
    assert not list((tmp_path / "bench").glob("*.json")) and not page.running


def loaded(page: BenchPage) -> dict[str, tuple[int, int, bool]]:
    """Each loaded model's file name: its context, the slots its load asked for, whether it is in focus."""
    return {
        Path(r.key).name: (r.state.model.n_ctx, r.state.load.slots, r.focus)
        for r in page.host.residents()
        if r.state.model is not None and r.state.load is not None
    }


def chat_loads(page: BenchPage, name: str, n_ctx: int, slots: int) -> None:
    """The chat loads `name` (taking the focus), as its model bar does."""
    path = Path(page.library.find(name).path)
    page.host.wait_for(page.host.submit(LoadJob(spec=LoadSpec(path=path, n_ctx=n_ctx, slots=slots), format="fake")), 10)


def pick(page: BenchPage, name: str) -> None:
    page.source.setCurrentIndex(next(i for i in range(page.source.count()) if page.source.itemText(i).startswith(name)))


def test_benchmark_the_chats_load_is_unchanged_after_a_run(qtbot, make_page):
    page = make_page()
    chat_loads(page, "alpha", 8192, 4)
    pick(page, "alpha")  # the chat's own model, with context to spare
    report = run(qtbot, page)
    assert loaded(page) == {"alpha.fake": (8192, 4, True)}
    assert report.engine.flags.n_ctx == 8192 and "Restored" not in page.status.text()
    pick(page, "beta")  # loaded for the run beside alpha, then unloaded
    run(qtbot, page)
    assert loaded(page) == {"alpha.fake": (8192, 4, True)}


def test_a_run_that_had_to_reload_the_chats_model_puts_it_back_and_says_so(qtbot, make_page):
    page = make_page()
    chat_loads(page, "alpha", 100, 4)  # short of the 80-token prompts, their replies and the template's room
    pick(page, "alpha")
    report = run(qtbot, page)
    assert report.engine.flags.n_ctx == TINY.target_ctx  # measured at a load of its own
    assert loaded(page) == {"alpha.fake": (100, 4, True)}
    assert "Restored the chat's model: 100 context, 1 slot." in page.status.text()


def test_run_and_cancel_keep_the_progress_on_screen(qtbot, make_page):
    page = make_page()
    run(qtbot, page, Workload(prompt_lens=[40], gen_len=6, concurrency=[1], runs=1, warmup=0))
    qtbot.waitUntil(lambda: len(page.runs.shown) == 1, timeout=5_000)  # its charts make the page tall
    page.resize(680, 540)  # what a 900x600 window leaves the page beside the sidebar
    page.show()
    qtbot.waitExposed(page)
    page.activateWindow()
    scroll = page.findChild(QScrollArea).verticalScrollBar()
    qtbot.waitUntil(lambda: scroll.maximum() > 0)  # the page is taller than the window: a jump would show
    page.run_button.setFocus()
    qtbot.waitUntil(page.run_button.hasFocus)
    done = []
    page._progress.fired.connect(lambda p: done.append(p.done))
    with qtbot.waitSignal(page.run_failed, timeout=30_000):
        page.run_button.click()
        assert page.cancel_button.hasFocus() and scroll.value() == 0
        qtbot.waitUntil(lambda: max(done, default=0) >= 1, timeout=20_000)
        page.cancel_button.click()
        assert page.progress.hasFocus() and scroll.value() == 0 and page.phase.text().startswith("Cancelling")
    assert page.run_button.hasFocus() and scroll.value() == 0


def test_the_picker_prefers_a_local_model_once_one_is_imported(qtbot, make_page, tmp_path):
    page = make_page(names=())
    assert page.source.currentData() == ENDPOINT  # nothing else to offer yet
    model = tmp_path / "gamma.fake"
    model.write_bytes(b"fake")
    page.library.add(name="gamma", format="fake", path=model, files=[ModelFile(model, 4)])
    page.refresh_models()  # as the window does when the library changes
    qtbot.waitUntil(lambda: page.source.count() == 2, timeout=5_000)
    assert page.source.currentData().name == "gamma"
    page.source.setCurrentIndex(1)
    page.source.activated.emit(1)  # the user picks the server: a later refresh keeps it
    with qtbot.waitSignal(page.models_listed, timeout=5_000):
        page.refresh_models()
    assert page.source.currentData() == ENDPOINT


def test_two_saved_runs_are_compared_on_the_same_axes_and_exported(qtbot, make_page, tmp_path):
    png, out_json = tmp_path / "charts.png", tmp_path / "out" / "report.json"
    out_json.parent.mkdir()
    page = make_page(exports=[str(out_json), str(png)])
    first = run(qtbot, page, Workload(prompt_lens=[40], gen_len=6, concurrency=[1], runs=2, warmup=1))
    page.source.setCurrentIndex(1)  # the other model
    second = run(qtbot, page, Workload(prompt_lens=[40, 80], gen_len=6, concurrency=[1], runs=2, warmup=1))
    qtbot.waitUntil(lambda: page.runs.list.count() == 2, timeout=5_000)
    page.runs.set_checked([Path(page.runs.list.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(2)])
    qtbot.waitUntil(lambda: len(page.runs.shown) == 2, timeout=5_000)
    assert {r.id for r in page.runs.shown} == {first.id, second.id}
    labels = [s.label for s in page.results.charts.decode.series_shown]
    assert len(labels) == 2 and labels[0] != labels[1]
    lines = [s for s in page.results.charts.decode.chart().series() if s.name().startswith("Measured")]
    assert len(lines) == 2
    x_axis = page.results.charts.decode.chart().axes(Qt.Orientation.Horizontal)[0]
    assert x_axis.max() >= max(x for s in page.results.charts.decode.series_shown for x, _ in s.measured)  # shared axes
    assert len(page.results.charts.ttft.bar_sets) == 6  # p50/p95/p99 for each run
    assert "compared with 1 more" in page.results.heading.text()
    # Exports: the described run's JSON (a valid report) and a PNG of the charts.
    page.runs.export_json_button.click()
    qtbot.waitUntil(lambda: page.status.text() == f"Exported {out_json}.", timeout=5_000)
    assert BenchReport.from_json(out_json.read_text()).id == page.runs.shown[0].id
    assert json.loads(out_json.read_text())["schema_version"] == 1
    page.resize(1100, 900)
    page.show()
    page.runs.export_png_button.click()
    qtbot.waitUntil(lambda: page.status.text().startswith(("Exported", "Could not")), timeout=5_000)
    assert page.status.text() == f"Exported {png}."
    image = QImage(str(png))
    assert not image.isNull() and image.width() > 300


def test_a_run_that_cannot_start_says_why_and_loses_nothing(qtbot, make_page, tmp_path):
    page = make_page()
    page.source.setCurrentIndex(page.source.count() - 1)  # an endpoint, with no URL
    assert page.url.isVisibleTo(page)
    page.start(TINY)
    assert "server's URL" in page.status.text() and not page.running
    page.url.setText("http://127.0.0.1:9")  # nothing listens there
    with qtbot.waitSignal(page.run_failed, timeout=30_000) as got:
        page.start(Workload(prompt_lens=[40], gen_len=4, concurrency=[1], runs=1, warmup=0))
    assert got.args[0].startswith("The benchmark could not run:")
    assert not list((tmp_path / "bench").glob("*.json"))


def test_the_series_take_the_least_concurrent_cell_per_prompt_length(qtbot, make_page):
    page = make_page()
    report = run(qtbot, page)
    cells = single_user_cells(report)
    assert [(c.prompt_len, c.concurrency) for c in cells] == [(40, 1), (80, 1)]
    with pytest.raises(ValueError):
        speed_series(report, "latency")


def test_the_charts_are_drawn_in_the_themes_colours_and_follow_it(qtbot, make_page, themed):
    from app.ui.theme import load_palettes

    page = make_page()
    run(qtbot, page, Workload(prompt_lens=[40], gen_len=6, concurrency=[1], runs=1, warmup=0))
    qtbot.waitUntil(lambda: len(page.runs.shown) == 1, timeout=5_000)

    def measured_pen() -> str:
        line = next(s for s in page.results.charts.decode.chart().series() if s.name().startswith("Measured"))
        return line.pen().color().name()

    assert measured_pen() == load_palettes()["light"]["accent"]
    themed.apply("dark")
    page.restyle()
    assert measured_pen() == load_palettes()["dark"]["accent"]
    assert page.results.charts.decode.chart().backgroundBrush().color().name() == load_palettes()["dark"]["surface"]


def test_runs_a_hundredfold_apart_share_a_log_scale(qtbot, make_page, tmp_path):
    page = make_page()
    slow = run(qtbot, page, Workload(prompt_lens=[40, 80], gen_len=6, concurrency=[1], runs=1, warmup=0))
    cells = [c.model_copy(update={"decode_tok_s": (c.decode_tok_s or 1) * 300}) for c in slow.cells]
    fast = slow.model_copy(update={"id": slow.id + "-fast", "cells": cells})
    fast_path = BenchStore(tmp_path / "bench").save(fast)
    page.runs.refresh()
    qtbot.waitUntil(lambda: page.runs.list.count() == 2, timeout=5_000)
    page.runs.set_checked([fast_path, *page.runs.checked_paths()])
    qtbot.waitUntil(lambda: len(page.runs.shown) == 2, timeout=5_000)
    decode = page.results.charts.decode
    assert decode.log_scale and "log" in decode.chart().axes(Qt.Orientation.Vertical)[0].titleText()
    assert not page.results.charts.prefill.log_scale  # prefill did not change: a plain axis


def test_legends_lead_with_what_a_line_or_bar_shows(qtbot, make_page, tmp_path):
    """Two runs of one long-named model: each legend entry starts with measured / predicted / the percentile,
    the part a legend that cuts long labels must keep, and no two entries read the same."""
    page = make_page()
    first = run(qtbot, page, Workload(prompt_lens=[40], gen_len=6, concurrency=[1], runs=1, warmup=0))
    long = first.model.model_copy(update={"name": "Smollm2 135M 8k Lc100K Mix1 Ep2"})
    predicted = Prediction(decode_tok_s=300.0, prefill_tok_s=900.0)
    cells = [c.model_copy(update={"predicted": predicted}) for c in first.cells]
    paths = [
        BenchStore(tmp_path / "bench").save(
            first.model_copy(
                update={"id": f"long-{i}", "model": long, "cells": cells, "created_at": f"2026-12-0{i + 1}T10:00:00"}
            )
        )
        for i in range(2)
    ]
    page.runs.refresh()
    qtbot.waitUntil(lambda: page.runs.list.count() == 3, timeout=5_000)
    page.runs.set_checked(paths)
    qtbot.waitUntil(lambda: len(page.runs.shown) == 2, timeout=5_000)
    names = [s.name() for s in page.results.charts.decode.chart().series() if s.name()]
    assert len(names) == 4 and all(n.startswith(("Measured · ", "Predicted · ")) for n in names)
    assert len(set(names)) == len(names)
    legend = page.results.charts.legend  # what the reader sees: every run's whole label, and the key
    assert legend.isVisibleTo(page) and legend.wordWrap()
    assert all(label in legend.text() for label in legend_labels(page.runs.shown))
    assert "measured" in legend.text() and "predicted" in legend.text()
    bars = [b.label() for b in page.results.charts.ttft.bar_sets]
    assert len(bars) == 6 and all(b.startswith(("p50 · ", "p95 · ", "p99 · ")) for b in bars)
    assert len(set(bars)) == 6


def test_no_run_shows_a_sentence_not_empty_axes(qtbot, make_page):
    page = make_page()
    charts = page.results.charts
    assert charts.empty.isVisibleTo(page) and "No runs yet" in charts.empty.text()
    assert not any(c.isVisibleTo(page) for c in (charts.decode, charts.prefill, charts.ttft))
    run(qtbot, page, Workload(prompt_lens=[40], gen_len=6, concurrency=[1], runs=1, warmup=0))
    qtbot.waitUntil(lambda: len(page.runs.shown) == 1, timeout=5_000)
    assert charts.decode.isVisibleTo(page) and not charts.empty.isVisibleTo(page)


def test_axis_ticks_are_all_different_even_below_one_token_a_second(qtbot, make_page, tmp_path):
    page = make_page()
    slow = run(qtbot, page, Workload(prompt_lens=[40, 80], gen_len=6, concurrency=[1], runs=1, warmup=0))
    cells = [
        c.model_copy(update={"decode_tok_s": 0.3 + 0.1 * i, "prefill_tok_s": 0.8}) for i, c in enumerate(slow.cells)
    ]
    tiny = slow.model_copy(update={"id": "tiny", "cells": cells})
    page.results.show_reports([tiny])
    for chart in (page.results.charts.decode, page.results.charts.prefill, page.results.charts.ttft):
        for axis in chart.chart().axes():
            if isinstance(axis, QValueAxis):
                labels = tick_labels(axis)
                assert len(set(labels)) == len(labels), labels
    assert label_format(0, 1, 6) == "%.1f" and label_format(0, 1, 5) == "%.2f" and label_format(0, 600, 7) == "%.0f"


def test_legend_labels_tell_every_run_apart_and_mark_a_partial_one(qtbot, make_page):
    page = make_page()
    report = run(qtbot, page, Workload(prompt_lens=[40], gen_len=6, concurrency=[1], runs=1, warmup=0))
    same_minute = report.model_copy(update={"created_at": report.created_at[:17] + "59+00:00"})
    same_second = report.model_copy(update={"id": "again"})
    partial = report.model_copy(update={"partial": True, "created_at": "2026-01-01T00:00:00+00:00"})
    labels = legend_labels([report, same_minute, same_second, partial])
    assert len(set(labels)) == 4 and labels[3].endswith("(partial)")
    assert all(label.startswith(report.model.name) for label in labels)
    named = report.model_copy(update={"model": report.model.model_copy(update={"name": "SmolLM2-135M.Q4_1"})})
    quant = named.model_copy(update={"weights": named.weights.model_copy(update={"quant_type": "Q4_1"})})
    assert legend_labels([quant]) == ["SmolLM2-135M.Q4_1"]  # the quant not said twice
