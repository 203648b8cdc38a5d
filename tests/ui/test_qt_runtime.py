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
