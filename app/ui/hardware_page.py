"""The Hardware page: what this machine is, probed off the UI thread."""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.hardware.engines import MLX
from app.core.hardware.profile import AppleInfo, EngineAvailability, GpuInfo, HardwareProfile
from app.core.hardware.report import bandwidth_text
from app.core.runtime.doctor import DoctorReport
from app.core.units import fmt_bytes, fmt_gbps
from app.ui.tasks import TaskRunner
from app.ui.theme import restyle_by
from app.ui.widgets.memory_bar import MemoryBar
from app.ui.widgets.scroll import scrolling

logger = logging.getLogger(__name__)

ProbeFn = Callable[[bool], HardwareProfile]  # argument: re-measure the CPU bandwidth
DiagnoseFn = Callable[[HardwareProfile], DoctorReport]  # runs on the pool
ENGINE_NAMES = {MLX: "MLX"}  # as people write it; llama.cpp's own name is already right
MLX_NEEDS_A_MAC = "Installed, but MLX models need an Apple silicon Mac."


def plain_reason(reason: str) -> tuple[str, str]:
    """(what a person reads, the probe's own words for a tooltip) for why no GPU was found: "no AMD or
    Intel GPU (cannot list /sys/class/drm: No such file or directory)" reads "No AMD or Intel GPU found.",
    the path and the error in the tooltip; an NVML error reads as a driver that could not be asked."""
    reason = reason.strip()
    if reason.startswith("NVML error"):
        return "None found: the NVIDIA driver could not be asked.", sentence(reason)
    head, sep, rest = reason.partition(" (")
    if not sep or not rest.endswith(")") or not any(c in rest for c in "/:\\"):
        return sentence(reason), ""  # plain already ("none found (no NVIDIA driver is installed)")
    detail = sentence(rest[:-1])
    if head.lower().startswith("no ") and "found" not in head:
        head += " found"
    return sentence(head), detail


def sentence(text: str) -> str:
    """A note as a sentence: capitalised, with its full stop (the probes write lower-case fragments)."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?)" else text + "."


def engine_text(e: EngineAvailability, apple_silicon: bool) -> str:
    """What an engine row says: installed or not, and where it runs. MLX outside an Apple silicon Mac is
    installed but of no use (its models need Metal): "available — CPU" there misled people."""
    if not e.available:
        return f"Not available: {e.reason or 'unknown reason'}."
    if e.name == MLX and not apple_silicon:
        return MLX_NEEDS_A_MAC
    version = f"version {e.version}, " if e.version else ""
    if e.gpu_offload:
        where = f"runs on the GPU ({e.backend})" if e.backend else "runs on the GPU"
    else:
        where = "runs on the CPU"
    extra = f" ({e.reason})" if e.reason else ""
    return f"Installed: {version}{where}{extra}."


class Card(QFrame):
    """A titled box of label/value rows, optionally with a memory bar."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._layout = QVBoxLayout(self)
        heading = QLabel(title)
        heading.setObjectName("cardTitle")
        self._layout.addWidget(heading)
        self._grid = QGridLayout()
        self._grid.setColumnStretch(1, 1)
        self._layout.addLayout(self._grid)
        self.title = title

    def add_row(self, label: str, value: str) -> QLabel:
        row = self._grid.rowCount()
        key = QLabel(label)
        key.setObjectName("cardKey")
        val = QLabel(value)
        val.setWordWrap(True)
        val.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._grid.addWidget(key, row, 0, Qt.AlignmentFlag.AlignTop)
        self._grid.addWidget(val, row, 1)
        return val

    def add_bar(self, used: int, total: int, used_label: str = "used", free_label: str = "free") -> MemoryBar:
        bar = MemoryBar()
        bar.set_values(used, total)
        self._layout.addWidget(bar)
        caption = QLabel(f"{fmt_bytes(used)} {used_label} · {fmt_bytes(max(0, total - used))} {free_label}")
        caption.setObjectName("cardKey")
        self._layout.addWidget(caption)
        return bar

    def text(self) -> str:
        """All visible text, for tests and accessibility."""
        return "\n".join(w.text() for w in self.findChildren(QLabel))


class HardwarePage(QWidget):
    profile_ready = Signal(object)  # HardwareProfile, on the main thread
    probe_failed = Signal(str)

    def __init__(
        self,
        probe: ProbeFn,
        tasks: TaskRunner,
        parent: QWidget | None = None,
        *,
        diagnose: DiagnoseFn | None = None,
    ) -> None:
        """`diagnose` (run on the pool after each probe) gives `hearth doctor`'s report for the profile."""
        super().__init__(parent)
        self._probe = probe
        self._diagnose = diagnose
        self._tasks = tasks
        self.profile: HardwareProfile | None = None
        self.report: DoctorReport | None = None
        self.cards: list[Card] = []
        self._build_card: Card | None = None

        header = QHBoxLayout()
        title = QLabel("Hardware")
        title.setObjectName("pageTitle")
        header.addWidget(title)
        header.addStretch(1)
        self.status = QLabel("")
        header.addWidget(self.status)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(lambda: self.refresh())
        self.measure_button = QPushButton("Measure bandwidth again")
        self.measure_button.clicked.connect(lambda: self.refresh(refresh_bandwidth=True))
        header.addWidget(self.measure_button)
        header.addWidget(self.refresh_button)

        self._cards_host = QWidget()
        self._cards_layout = QVBoxLayout(self._cards_host)
        self._cards_layout.addStretch(1)
        scroll = scrolling(self._cards_host)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(scroll, 1)

    @property
    def probing(self) -> bool:
        return not self.refresh_button.isEnabled()

    def refresh(self, refresh_bandwidth: bool = False) -> None:
        if self.probing:
            return
        self.refresh_button.setEnabled(False)
        self.measure_button.setEnabled(False)
        self.status.setText("Measuring memory bandwidth…" if refresh_bandwidth else "Probing…")
        self._tasks.run(lambda: self._probe(refresh_bandwidth), self._on_profile, self._on_error, owner=self)

    def _on_profile(self, profile: HardwareProfile) -> None:
        """Main thread."""
        self._done()
        took = f" in {profile.probe_ms / 1000:.1f} s" if profile.probe_ms >= 100 else ""  # "0.0 s" reads as broken
        self.status.setText(f"Hardware checked{took}")
        self.show_profile(profile)
        self.profile_ready.emit(profile)
        if self._diagnose is not None:
            diagnose = self._diagnose
            self._tasks.run(lambda: diagnose(profile), self.show_report, self._on_report_error, owner=self)

    def _on_report_error(self, exc: BaseException) -> None:
        """Main thread."""
        logger.warning("the engine check failed", exc_info=exc)

    def _on_error(self, exc: BaseException) -> None:
        """Main thread."""
        logger.error("hardware probe failed", exc_info=exc)
        self._done()
        self.status.setText(f"Probe failed: {exc}")
        self.probe_failed.emit(str(exc))

    def _done(self) -> None:
        self.refresh_button.setEnabled(True)
        self.measure_button.setEnabled(True)

    def show_profile(self, profile: HardwareProfile) -> None:
        self.profile = profile
        for card in self.cards:
            self._cards_layout.removeWidget(card)
            card.deleteLater()
        self._build_card = None
        self.cards = [self._system_card(profile)]
        if profile.apple is not None:
            self.cards.append(self._apple_card(profile.apple))
        self.cards.extend(self._gpu_card(g, profile) for g in profile.gpus)
        if not profile.gpus:
            self.cards.append(self._no_gpu_card(profile))
        self.cards.append(self._engines_card(profile))
        if self.report is not None:
            self.cards.append(self._new_build_card(self.report))
        for i, card in enumerate(self.cards):
            self._cards_layout.insertWidget(i, card)

    def show_report(self, report: DoctorReport) -> None:
        """Main thread: the llama.cpp build's verdict for this machine, as a card after the Engines card."""
        self.report = report
        old = self._build_card
        if old is not None and old in self.cards:
            index = self.cards.index(old)
            self._cards_layout.removeWidget(old)
            old.deleteLater()
            self.cards[index] = self._new_build_card(report)
        else:
            index = len(self.cards)
            self.cards.append(self._new_build_card(report))
        self._cards_layout.insertWidget(index, self.cards[index])

    def _new_build_card(self, report: DoctorReport) -> Card:
        card = Card("llama.cpp build")
        b = report.build
        if b is not None:
            card.add_row("Build", f"{b.version or '?'} · {b.backend}")
            card.add_row("Compiled for", ", ".join(f.upper() for f in b.cpu_features) or "unknown CPU features")
        verdict = card.add_row("Verdict", report.verdict)
        verdict.setObjectName("buildVerdict")
        restyle_by(verdict, "level", "ok" if report.ok else "warn")
        for gain in report.gains:
            card.add_row("Would gain", gain)
        for fix in report.fixes:
            card.add_row("Fix", fix)
        for note in report.notes:
            card.add_row("Note", sentence(note))
        failed = [c for c in report.checks if not c["passed"]]
        passed = len(report.checks) - len(failed)
        if report.checks:
            summary = f"{passed} configuration{'s' if passed != 1 else ''} passed"
            if failed:
                summary += f"; {len(failed)} crashed and {'is' if len(failed) == 1 else 'are'} no longer used"
            card.add_row("Native checks", summary)
        self._build_card = card
        return card

    def text(self) -> str:
        return "\n\n".join(c.text() for c in self.cards)

    # -- cards ---------------------------------------------------------------------------------
    def _system_card(self, p: HardwareProfile) -> Card:
        card = Card("CPU and memory")
        card.add_row("System", f"{p.os} {p.os_version} ({p.arch})".strip())
        cores = f"{p.cpu.physical_cores or '?'} physical / {p.cpu.logical_cores or '?'} logical cores"
        card.add_row("CPU", f"{p.cpu.brand or 'unknown CPU'} — {cores}")
        card.add_row("Instruction sets", ", ".join(s.upper() for s in p.cpu.simd) or (p.cpu.note or "unknown"))
        m = p.memory
        card.add_row(
            "RAM",
            f"{fmt_bytes(m.total_bytes)} total, {fmt_bytes(m.available_bytes)} available",
        )
        card.add_bar(m.total_bytes - m.available_bytes, m.total_bytes)
        if m.swap_total_bytes:
            card.add_row("Swap", f"{fmt_bytes(m.swap_free_bytes)} free of {fmt_bytes(m.swap_total_bytes)}")
        card.add_row("Memory bandwidth", bandwidth_text(p))
        for w in p.warnings:
            card.add_row("Note", sentence(w))
        return card

    def _gpu_card(self, g: GpuInfo, p: HardwareProfile) -> Card:
        card = Card(f"GPU {g.index}: {g.name}")
        if g.integrated:
            kept = f", {fmt_bytes(g.memory_total_bytes)} set aside as VRAM" if g.memory_total_bytes else ""
            card.add_row("Memory", f"shared with the CPU{kept}")
        else:
            card.add_row(
                "VRAM",
                f"{fmt_bytes(g.memory_free_bytes)} free of {fmt_bytes(g.memory_total_bytes)} "
                f"({fmt_bytes(g.memory_used_bytes)} used)",
            )
            card.add_bar(g.memory_used_bytes, g.memory_total_bytes)
            card.add_row("Bandwidth", fmt_gbps(g.bandwidth_gbps))
        if g.compute_capability:
            card.add_row("Compute capability", g.compute_capability)
        if g.vendor == "nvidia":
            drv = p.nvidia.driver_version or "unknown"
            cuda = p.nvidia.cuda_version or "unknown"
            card.add_row("Driver", f"{drv} (CUDA {cuda})")
        else:
            card.add_row("Driver", g.driver or "unknown")
        if g.note:
            card.add_row("Note", sentence(g.note))
        return card

    def _no_gpu_card(self, p: HardwareProfile) -> Card:
        card = Card("GPU")
        for label, reason, fallback in (
            ("NVIDIA", p.nvidia.reason, "none found"),
            ("AMD / Intel", p.amd_intel.reason, "no AMD or Intel GPU"),
        ):
            plain, detail = plain_reason(reason or fallback)
            card.add_row(label, plain).setToolTip(detail)
        return card

    def _apple_card(self, a: AppleInfo) -> Card:
        card = Card(a.chip or "Apple Silicon")
        card.add_row("Unified memory", fmt_bytes(a.unified_memory_bytes))
        card.add_row("GPU may use", f"{fmt_bytes(a.gpu_working_set_bytes)} ({a.working_set_source})")
        card.add_bar(
            a.unified_memory_bytes - a.gpu_working_set_bytes,
            a.unified_memory_bytes,
            "kept for the system",
            "usable by the GPU",
        )
        if a.gpu_cores:
            card.add_row("GPU cores", str(a.gpu_cores))
        card.add_row("Bandwidth", fmt_gbps(a.bandwidth_gbps))
        return card

    def _engines_card(self, p: HardwareProfile) -> Card:
        card = Card("Engines")
        apple_silicon = p.os == "macOS" and p.apple is not None
        for e in p.engines:
            card.add_row(ENGINE_NAMES.get(e.name, e.name), engine_text(e, apple_silicon))
        if not p.engines:
            card.add_row("Engines", "Not checked yet.")
        return card
