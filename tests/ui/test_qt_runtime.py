"""Guards against Qt runtime bugs that would crash Hearth in the field, not just in a test."""

import sys

from PySide6.QtCore import QObject, Signal


class _Emitter(QObject):
    ping = Signal(object)


def test_signal_emit_keeps_reference_counts():
    # PySide6 6.12.0 dropped a reference to True on every emit; Python 3.11 then aborts (bool_dealloc).
    emitter = _Emitter()
    before = sys.getrefcount(True)
    for i in range(500):
        emitter.ping.emit(i)
    assert abs(sys.getrefcount(True) - before) < 10


def test_void_qt_calls_keep_none_reference_count():
    # PySide6 6.12.0 also dropped a reference to None on most void calls (none_dealloc after a few thousand).
    emitter = _Emitter()
    before = sys.getrefcount(None)
    for _ in range(500):
        emitter.setObjectName("x")
    assert abs(sys.getrefcount(None) - before) < 10
