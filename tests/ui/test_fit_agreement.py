"""One slot count, one KV figure: Discover's fit view and its Fit column's tooltip plan a variant for the same
slots (one conversation), and the chat is told whether the API server serves (then it plans its slots)."""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "models"))
from synthetic import GiB, llama3_8b_spec, profile

from app.core.models.devices import machine_from_profile
from app.core.models.recommend import Variant, assess
from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.core.units import fmt_bytes
from app.main import build_shell
from app.ui.widgets.fit_view import FitView


def test_the_fit_views_kv_is_the_fit_columns_kv(qtbot):
    """The Fit cell's tooltip is its assessment's explanation; the fit view below re-plans the same variant
    with the slots Discover is given: the KV on its bars is the KV the tooltip names."""
    machine = machine_from_profile(profile(gpus=[("NVIDIA GeForce RTX 4060 Ti", 16 * GiB, 15 * GiB, 288)]))
    spec = llama3_8b_spec()
    a = assess([Variant("Q4_K_M", "gguf", spec.weight_bytes, spec=spec)], machine).assessments[0]
    assert a.plan is not None and a.spec is not None
    view = FitView(a.spec, machine, n_ctx=a.plan.requested_ctx, options=a.plan.options, slots=1)
    qtbot.addWidget(view)
    bar_kv = sum(bar.parts["kv"] for bar in view.bars.values())
    tooltip_kv = re.findall(r"KV ([\d.]+ [KMG]iB)", a.plan.explanation)
    assert bar_kv > 0 and tooltip_kv == [fmt_bytes(bar_kv, 2)]
    assert view.plan is not None and view.plan.slots == a.plan.slots == 1


def test_the_shell_gives_discover_one_slot_and_the_chat_the_servers_state(qtbot):
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load().model_copy(update={"measure_bandwidth_on_start": False, "parallel_requests": 4})
    shell = build_shell(paths, store, settings)
    qtbot.addWidget(shell.window)
    try:
        assert shell.window.page("discover").model_view.slots == 1
        bar = shell.window.page("chat").model_bar
        assert bar.parallel() == 4 and bar.serving() is shell.api.status.running is False
    finally:
        shell.shutdown()


def test_the_fit_column_is_as_wide_as_its_header_and_verdicts(qtbot):
    from app.ui.discover.variants_table import VariantsTable

    machine = machine_from_profile(profile(ram_total=16 * GiB))
    spec = llama3_8b_spec()
    table = VariantsTable()
    qtbot.addWidget(table)
    table.set_assessments(assess([Variant("Q4_K_M", "gguf", spec.weight_bytes, spec=spec)], machine).assessments)
    table.resize(560, 200)  # narrower than the columns: the table scrolls, the Fit column is not squeezed
    table.show()
    qtbot.waitExposed(table)
    item = table.item(0, 3)
    assert item is not None and item.text() == "Runs on the CPU"
    needed = table.fontMetrics().horizontalAdvance(item.text())
    assert table.columnWidth(3) >= max(needed, table.horizontalHeader().sectionSizeHint(3))
