"""Qt tests collect garbage on the main thread only, as the app does (see app/ui/main_thread_gc.py)."""

import gc

import pytest


@pytest.fixture(autouse=True)
def main_thread_gc(qapp):
    gc.disable()
    yield
    gc.collect()  # here, on the main thread, while Qt is alive
    gc.enable()
