"""Issue 46 item 17, the window's part: Pin turns into Unpin; unloading is one action under one word; plain
words (with tooltips) for drafts, "stays loaded", slots and JIT; an edited first message names its chat again
(list, header and export); drop-down lists show a useful number of entries; the Hardware page says "no GPU
found" with the probe's words in a tooltip; the count of catalogue models that run here does not move with
free memory."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QPushButton, QToolButton

from app.core.chat.export import export_markdown
from app.core.hardware.profile import AmdIntelInfo, GpuInfo, HardwareProfile, MemoryInfo, NvidiaInfo
from app.core.runtime.jobs import HostState, ModelInfo
from app.core.units import GiB
from app.ui.chat.messages_model import stats_line
from app.ui.hardware_page import plain_reason
from app.ui.server_model import SLOTS_TOOLTIP, slots_text
from app.ui.server_settings import ServerSettingsForm
from app.ui.widgets.resident_text import leaves_text, leaves_tooltip
from tests.ui.chat_harness import limit_tokens, send_and_wait
from tests.ui.widgets.test_loaded_models import load, make_pool, shown_strip  # noqa: F401


def test_pin_becomes_unpin_and_unload_is_one_word(qtbot, make_pool):  # noqa: F811
    pool = make_pool(idle_ttl_s=600)
    strip = shown_strip(qtbot, pool)
    load(pool, "a")
    qtbot.waitUntil(lambda: len(strip.rows) == 1, timeout=5_000)
    row = next(iter(strip.rows.values()))
    assert row.pin.text() == "Pin" and "Keep it loaded" in row.pin.toolTip()
    row.pin.click()
    assert row.pin.text() == "Unpin" and pool.residents()[0].pinned
    qtbot.waitUntil(lambda: row.leaves.text() == "pinned", timeout=5_000)
    assert "until you unpin" in row.leaves.toolTip()
    row.pin.click()
    assert row.pin.text() == "Pin" and not pool.residents()[0].pinned
    assert row.eject.text() == "Unload"


def test_the_chat_bar_has_no_second_unload_beside_the_rows(make_chat):
    _h, page = make_chat()
    bar = page.model_bar
    words = [b.text() for b in bar.findChildren(QPushButton) + bar.findChildren(QToolButton) if b.isVisibleTo(page)]
    assert words.count("Unload") == 1 and "Eject" not in words  # the row of the model in chat


def test_plain_words_with_tooltips(qtbot, make_pool):  # noqa: F811
    from app.core.runtime.job_host import Resident

    kept = Resident("k", HostState(), 0, pinned=False, ttl_s=None, idle_left_s=None, last_used=0.0, focus=False)
    assert leaves_text(kept) == "kept while there's room" and "only when another model needs" in leaves_tooltip(kept)
    line = stats_line({"decode_tok_s": 40.0, "draft_tokens": 100, "draft_accepted": 23}, None)
    assert "guessed ahead: 23 % kept" in line and "accepted" not in line
    model = ModelInfo(path=Path("m.gguf"), format="gguf", n_ctx=8192)
    text = slots_text(HostState(status="generating", model=model, slots_total=4, slots_busy=2, queue_depth=1))
    assert text == "Replies at once: 2 of 4 in use · 1 waiting" and "Slots" not in text and "parallel" in SLOTS_TOOLTIP
    from app.core.settings import ServerSettings

    form = ServerSettingsForm(ServerSettings())
    qtbot.addWidget(form)
    assert "JIT" not in form.jit.text() and "Just-in-time (JIT)" in form.jit.toolTip()


def test_editing_the_first_message_names_the_chat_again(make_chat, qtbot):
    _h, page = make_chat()
    limit_tokens(page, 5)
    send_and_wait(qtbot, page, "How do I reverse a string?")
    conv_id = page.conv_id

    def listed() -> str:
        return page.conversations.list.currentItem().text()

    assert page.store.get_conversation(conv_id).title == "How do I reverse a string?" == listed()
    page.thread_view.begin_edit(page.thread_view.messages.rows[0].id)
    page.composer.set_text("How do I sort a list?")
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.store.get_conversation(conv_id).title == "How do I sort a list?", timeout=5_000)
    qtbot.waitUntil(lambda: listed() == "How do I sort a list?", timeout=5_000)
    assert page.header.title.full_text() == "How do I sort a list?"
    assert export_markdown(page.store, conv_id).startswith("# How do I sort a list?")
    # A title the user gave it stays, whatever the first message becomes.
    page.edits.rename(conv_id, "Strings and lists")
    qtbot.waitUntil(lambda: page.store.get_conversation(conv_id).title == "Strings and lists", timeout=5_000)
    page.thread_view.begin_edit(page.thread_view.messages.rows[0].id)
    page.composer.set_text("How do I join a list?")
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Return)
    assert page.store.get_conversation(conv_id).title == "Strings and lists"


def test_a_drop_down_list_opens_beside_its_box_with_ten_entries_in_view(qtbot, themed):
    """Fusion's menu-like popup put the current entry over the box and was cut by the screen's edges (a few
    entries, with scroll arrows, on a small screen); a list under (or over) the box shows maxVisibleItems."""
    for y, current in ((20, 29), (740, 0)):  # near the top with the last entry picked; near the bottom
        box = QComboBox()
        qtbot.addWidget(box)
        box.addItems([f"Entry {i}" for i in range(30)])
        box.setCurrentIndex(current)
        box.setGeometry(100, y, 200, 30)
        box.show()
        qtbot.waitExposed(box)
        box.showPopup()
        view = box.view()
        qtbot.waitUntil(view.isVisible, timeout=5_000)
        popup, rows = view.window().geometry(), view.viewport().height() // max(1, view.sizeHintForRow(0))
        box.hidePopup()
        assert box.maxVisibleItems() >= 10 and rows == box.maxVisibleItems(), (y, rows)
        assert popup.top() >= box.geometry().bottom() or popup.bottom() <= box.geometry().top(), (y, popup)


def test_no_gpu_found_is_said_plainly_with_the_probes_words_in_a_tooltip():
    plain, detail = plain_reason("no AMD or Intel GPU (cannot list /sys/class/drm: No such file or directory)")
    assert plain == "No AMD or Intel GPU found." and "/sys/class/drm" not in plain
    assert detail == "Cannot list /sys/class/drm: No such file or directory."
    already_plain = "none found (no NVIDIA driver is installed)"
    assert plain_reason(already_plain) == ("None found (no NVIDIA driver is installed)", "")
    assert plain_reason("NVML error: Unknown Error")[1] == "NVML error: Unknown Error."


def test_the_count_of_models_that_run_here_does_not_move_with_free_memory():
    from app.core.models.catalog import ranked_catalog
    from app.core.models.devices import machine_from_profile
    from app.ui.discover.discover_page import at_rest_note

    def with_free(free: int) -> HardwareProfile:
        return HardwareProfile(
            memory=MemoryInfo(total_bytes=16 * GiB, available_bytes=free),
            nvidia=NvidiaInfo(gpus=[GpuInfo(0, "RTX", memory_total_bytes=8 * GiB, memory_free_bytes=free // 4)]),
            amd_intel=AmdIntelInfo(),
        )

    def runs(profile: HardwareProfile) -> int:
        return sum(p.best is not None for p in ranked_catalog(machine_from_profile(profile)))

    busy, quiet = with_free(3 * GiB), with_free(12 * GiB)
    assert runs(busy) < runs(quiet)  # the cause: live free memory
    assert runs(busy.at_rest()) == runs(quiet.at_rest())  # what Discover ranks against now
    assert busy.at_rest().memory.available_bytes == 16 * GiB and busy.memory.available_bytes == 3 * GiB
    note = at_rest_note(busy)
    assert "16.0 GiB of RAM" in note and "with nothing else running" in note and "3.0 GiB is free now" in note
