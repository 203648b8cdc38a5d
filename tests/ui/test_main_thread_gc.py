"""The main-thread collector: start-up objects are frozen once, cycles made later are still freed."""

from __future__ import annotations

import gc
import weakref

from app.ui.main_thread_gc import MainThreadGC


class Node:
    pass


def cycle() -> weakref.ref:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_first_check_freezes_start_up_objects_and_later_cycles_are_collected(qapp):
    collector = MainThreadGC()
    try:
        assert not gc.isenabled()
        before = cycle()  # garbage already at start-up: collected before the freeze, not frozen
        collector.check()
        assert before() is None and gc.get_freeze_count() > 0
        later = cycle()
        keep = [[] for _ in range(gc.get_threshold()[0] + 100)]  # past the young generation's threshold
        assert later() is not None  # automatic GC is off: nothing freed it yet
        collector.check()
        assert later() is None and keep
    finally:
        collector.stop()
    assert gc.get_freeze_count() == 0 and gc.isenabled()
