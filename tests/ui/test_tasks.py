"""TaskRunner delivers answers on the main thread, from the event loop, never inside run(); it also
watches futures run elsewhere (the chat writer thread)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import shiboken6
from PySide6.QtCore import QObject

from app.ui.tasks import TaskRunner


class Immediate:
    """An executor whose jobs are done before submit() returns (a fast op on an idle pool)."""

    def submit(self, fn, *args):
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as exc:
            fut.set_exception(exc)
        return fut


def test_an_op_done_before_run_returns_still_answers_from_the_event_loop(qtbot):
    runner = TaskRunner(Immediate())
    got: list[object] = []
    runner.run(lambda: 42, got.append)
    runner.run(lambda: 1 / 0, None, got.append)
    assert got == []  # the caller finishes its own bookkeeping first
    qtbot.waitUntil(lambda: len(got) == 2, timeout=2000)
    assert got[0] == 42 and isinstance(got[1], ZeroDivisionError)


def test_watch_answers_on_the_main_thread_for_a_future_run_elsewhere(qtbot):
    runner = TaskRunner()  # no pool: it only watches
    other = ThreadPoolExecutor(1, thread_name_prefix="elsewhere")
    try:
        got: list[tuple[object, threading.Thread]] = []
        release = threading.Event()
        runner.watch(
            other.submit(lambda: release.wait(5) and threading.current_thread().name),
            lambda v: got.append((v, threading.current_thread())),
        )
        gone = QObject()
        runner.watch(other.submit(lambda: "for a deleted widget"), lambda v: got.append((v, None)), owner=gone)
        gone.deleteLater()
        qtbot.waitUntil(lambda: not shiboken6.isValid(gone), timeout=2000)
        assert runner.busy and got == []
        release.set()
        qtbot.waitUntil(lambda: not runner.busy, timeout=2000)
        # The answer of the deleted widget's future was skipped; the other came on the main thread.
        assert got == [("elsewhere_0", threading.main_thread())]
        with pytest.raises(RuntimeError, match="only watches"):
            runner.run(lambda: 1)
    finally:
        other.shutdown(wait=True)


def test_work_asked_for_after_the_pool_shut_down_is_dropped_not_raised(qtbot):
    pool = ThreadPoolExecutor(1)
    runner = TaskRunner(pool)
    pool.shutdown(wait=True)  # quitting: a library change can still arrive and ask for a reload
    answered: list[object] = []
    future = runner.run(lambda: 1, answered.append, answered.append)
    assert future.cancelled()
    qtbot.wait(50)  # give a wrong answer the chance to arrive
    assert answered == []
