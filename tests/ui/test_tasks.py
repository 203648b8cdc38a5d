"""TaskRunner delivers answers on the main thread, from the event loop, never inside run()."""

from __future__ import annotations

from concurrent.futures import Future

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
