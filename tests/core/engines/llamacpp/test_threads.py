"""The CPU threads a llama.cpp load gets unless told: HEARTH_THREADS where set, else the physical cores."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.llamacpp import options
from app.core.engines.llamacpp.options import THREADS_ENV, default_threads, llama_kwargs, physical_cores

LIB = SimpleNamespace(GGML_TYPE_F16=1)  # what llama_kwargs reads of the module for an f16 cache


def test_without_the_variable_a_load_takes_the_physical_cores(monkeypatch, tmp_path):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr(options, "physical_cores", lambda: 6)
    kwargs = llama_kwargs(LIB, LoadSpec(path=tmp_path / "m.gguf", n_ctx=512))
    assert default_threads() == 6 and kwargs["n_threads"] == kwargs["n_threads_batch"] == 6


def test_the_variable_sets_them_and_a_spec_still_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(THREADS_ENV, " 3 ")
    assert default_threads() == 3
    assert llama_kwargs(LIB, LoadSpec(path=tmp_path / "m.gguf", n_ctx=512))["n_threads"] == 3
    assert llama_kwargs(LIB, LoadSpec(path=tmp_path / "m.gguf", n_ctx=512, n_threads=5))["n_threads"] == 5
    monkeypatch.setenv(THREADS_ENV, "0")
    assert default_threads() == 1  # never none


@pytest.mark.parametrize("value", ["many", "2.5", "-"])
def test_a_value_that_is_not_a_whole_number_is_named_and_the_cores_used(monkeypatch, caplog, value):
    monkeypatch.setenv(THREADS_ENV, value)
    with caplog.at_level(logging.WARNING, logger=options.__name__):
        assert default_threads() == physical_cores()
    assert THREADS_ENV in caplog.text and repr(value) in caplog.text
