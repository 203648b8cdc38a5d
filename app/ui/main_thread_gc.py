"""Collect garbage only on the Qt main thread (after Anki's GarbageCollector).

Python's cyclic GC runs on whichever thread happens to allocate. If it frees a cycle holding a Qt
widget from a worker thread, the C++ destructor runs there and Qt crashes (seen here: a segfault in a
probe thread while "Garbage-collecting"). So automatic GC is off and a main-thread timer collects.

A full collection walks every object, which froze the UI for 25 ms and more mid-reply; so at the first
check everything alive after start-up (modules, widgets, caches) is frozen out of later collections.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 1000


class MainThreadGC(QObject):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._threshold = gc.get_threshold()
        self._frozen = False
        gc.disable()
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.check)
        self._timer.start(INTERVAL_MS)

    def check(self) -> None:
        """Main thread: collect each generation whose allocation count passed its threshold."""
        if not self._frozen:
            gc.collect()
            gc.freeze()  # start-up objects live as long as the app; later ones are collected as usual
            self._frozen = True
            return
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self._threshold[generation]:
                gc.collect(generation)
                break

    def stop(self) -> None:
        self._timer.stop()
        gc.unfreeze()
        gc.collect()
        gc.enable()
