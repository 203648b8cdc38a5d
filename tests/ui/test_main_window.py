import itertools
import threading
import time

import psutil
import pytest
from PySide6.QtCore import QTimer

from app.core.hardware import probe_hardware
from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.core.units import fmt_bytes
from app.main import build_shell


@pytest.fixture
def shell_factory(qtbot):
    shells = []

    def make(probe=None, settings=None):
        paths = app_paths().ensure()
        store = SettingsStore(paths.settings_file)
        settings = settings or store.load().model_copy(update={"measure_bandwidth_on_start": False})
        shell = build_shell(paths, store, settings, probe=probe)
        qtbot.addWidget(shell.window)
        shells.append(shell)
        return shell, store

    yield make
    for s in shells:
        s.shutdown()


def test_window_opens_with_all_pages(shell_factory, qtbot):
    shell, _ = shell_factory()
    w = shell.window
    w.show()
    qtbot.waitExposed(w)
    labels = [w.sidebar.item(i).text() for i in range(w.sidebar.count())]
    assert labels == ["Discover", "My Models", "Downloads", "Chat", "Server", "Hardware"]
    assert w.current_page_key == "hardware"
    w.show_page("server")
    assert "later version" in w.page("server").note.text()


def test_hardware_page_shows_this_machine(shell_factory, qtbot):
    shell, _ = shell_factory()
    page = shell.window.page("hardware")
    with qtbot.waitSignal(page.profile_ready, timeout=30_000) as blocker:
        page.refresh()
    profile = blocker.args[0]
    text = page.text()
    total = psutil.virtual_memory().total
    assert fmt_bytes(total) in text
    assert abs(profile.memory.total_bytes - total) / total < 0.01
    assert "no NVIDIA GPU" in text
    assert "AVX2" in text
    assert "llama.cpp" in text


def test_refresh_runs_off_the_ui_thread(shell_factory, qtbot):
    release = threading.Event()
    real = probe_hardware(measure_bandwidth=False)
    probe_threads = []

    def slow_probe(refresh_bandwidth=False):
        probe_threads.append(threading.current_thread())
        release.wait(10)
        return real

    shell, _ = shell_factory(probe=slow_probe)
    page = shell.window.page("hardware")
    page.refresh()
    assert page.probing and page.status.text() == "Probing…"

    # The event loop keeps turning while the probe is blocked: timers fire on time.
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=2_000)
    timer.stop()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.5
    assert page.probing
    page.refresh()  # a second click while probing is ignored, not queued
    assert len(probe_threads) == 1 and probe_threads[0] is not threading.main_thread()

    with qtbot.waitSignal(page.profile_ready, timeout=5_000):
        release.set()
    assert not page.probing
    assert "Probed in" in page.status.text()


def test_probe_failure_is_shown_and_page_stays_usable(shell_factory, qtbot):
    calls = []

    def failing(refresh_bandwidth=False):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("sensor exploded")
        return probe_hardware(measure_bandwidth=False)

    shell, _ = shell_factory(probe=failing)
    page = shell.window.page("hardware")
    with qtbot.waitSignal(page.probe_failed, timeout=5_000):
        page.refresh()
    assert "sensor exploded" in page.status.text()
    with qtbot.waitSignal(page.profile_ready, timeout=30_000):
        page.refresh()


def test_window_geometry_and_page_are_restored(shell_factory, qtbot):
    shell, store = shell_factory()
    w = shell.window
    w.show()
    w.resize(780, 560)
    w.show_page("server")
    qtbot.wait(50)
    w.close()
    saved = store.load()
    assert saved.window.geometry and saved.window.page == "server"

    shell2, _ = shell_factory(settings=saved)
    w2 = shell2.window
    assert w2.current_page_key == "server"
    assert (w2.width(), w2.height()) == (780, 560)


def test_settings_dialog_saves(shell_factory, qtbot):
    shell, store = shell_factory()
    dialog = shell.window.open_settings()
    dialog.log_level.setCurrentText("DEBUG")
    dialog.models_dir.setText("/srv/models")
    dialog.accept()
    saved = store.load()
    assert saved.log_level == "DEBUG" and saved.models_dir == "/srv/models"
    assert shell.window.settings.log_level == "DEBUG"


def test_gpu_and_apple_cards_render_from_a_profile(shell_factory):
    from app.core.hardware.profile import AppleInfo, EngineAvailability, GpuInfo, HardwareProfile, NvidiaInfo

    gib = 1024**3
    profile = HardwareProfile(
        os="Linux",
        arch="x86_64",
        nvidia=NvidiaInfo(
            available=True,
            driver_version="550.54",
            cuda_version="12.4",
            gpus=[
                GpuInfo(
                    index=0,
                    name="NVIDIA GeForce RTX 4090",
                    memory_total_bytes=24 * gib,
                    memory_free_bytes=20 * gib,
                    memory_used_bytes=4 * gib,
                    compute_capability="8.9",
                    bandwidth_gbps=1008,
                ),
                GpuInfo(
                    index=1,
                    name="NVIDIA GeForce RTX 3090",
                    memory_total_bytes=24 * gib,
                    memory_free_bytes=23 * gib,
                    memory_used_bytes=1 * gib,
                    bandwidth_gbps=936,
                ),
            ],
        ),
        apple=AppleInfo(
            chip="Apple M2 Max",
            unified_memory_bytes=64 * gib,
            gpu_working_set_bytes=48 * gib,
            working_set_source="estimate",
            bandwidth_gbps=400,
        ),
        engines=[EngineAvailability(name="llama.cpp", available=False, reason="llama-cpp-python is not installed")],
    )
    shell, _ = shell_factory()
    page = shell.window.page("hardware")
    page.show_profile(profile)
    titles = [c.title for c in page.cards]
    assert titles == [
        "CPU and memory",
        "Apple M2 Max",
        "GPU 0: NVIDIA GeForce RTX 4090",
        "GPU 1: NVIDIA GeForce RTX 3090",
        "Engines",
    ]
    text = page.text()
    assert "20.0 GiB free of 24.0 GiB" in text and "1,008 GB/s" in text and "CUDA 12.4" in text
    assert "48.0 GiB usable by the GPU" in text
    assert "not available — llama-cpp-python is not installed" in text


def test_damaged_chat_database_is_reported_at_start(qapp, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    import app.main

    paths = app_paths().ensure()
    (paths.data / "chats.sqlite3").write_bytes(b"this is not a database" * 100)
    shown = []
    monkeypatch.setattr(QMessageBox, "critical", staticmethod(lambda parent, title, text: shown.append(text)))
    assert app.main.main([]) == 1
    assert shown and "chats.sqlite3" in shown[0]


def test_sigterm_closes_the_app_cleanly(hearth_home):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HEARTH_HOME": str(hearth_home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app"], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log = hearth_home / "logs" / "hearth.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "engine host" in log.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    text = log.read_text()
    assert "engine host hearth-engine stopped" in text and "Hearth stopped" in text


def test_chat_model_picked_before_the_probe_is_planned_again_when_it_arrives(shell_factory, qtbot, tiny_gguf_f16):
    from app.core.library.store import ModelFile

    shell, _ = shell_factory(probe=lambda measure: probe_hardware(measure_bandwidth=False))
    bar = shell.window.page("chat").model_bar
    hardware = shell.window.page("hardware")
    shell.services.library.add(
        name="tiny", format="gguf", path=tiny_gguf_f16, files=[ModelFile(tiny_gguf_f16, tiny_gguf_f16.stat().st_size)]
    )
    qtbot.waitUntil(lambda: "not probed" in bar.defaults.note, timeout=10_000)  # picked, no machine yet
    with qtbot.waitSignal(hardware.profile_ready, timeout=30_000):
        hardware.refresh()
    qtbot.waitUntil(lambda: bar.defaults.offload != "", timeout=10_000)
    assert bar.defaults.note == "" and bar.defaults.predicted_tok_s > 0
    assert "layers on GPU" in bar.defaults.offload
