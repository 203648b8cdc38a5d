"""The pieces under the vector store API that need no server: upload names reduced to one safe component
(T56), the upload cap while copying and 0600 storage (T57), and attribute filters as OpenAI defines them."""

from __future__ import annotations

import io
import os
import stat

import pytest

from app.core.documents.filters import FilterError, checked_attributes, compile_filter
from app.core.documents.uploads import MAX_NAME_BYTES, UploadRefused, Uploads, UploadTooLarge, safe_name


@pytest.mark.parametrize(
    "name, safe",
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("C:\\Users\\x\\notes.md", "notes.md"),
        ("a\x00b\x1fc.md", "a_b_c.md"),
        ("...hidden.txt", "hidden.txt"),
        ("trailing. ", "trailing"),
        ("what?<>.md", "what___.md"),
    ],
)
def test_t56_a_name_becomes_one_safe_component(name, safe):
    assert safe_name(name) == safe


@pytest.mark.parametrize("name", ["", "..", ".", "/", "a/", "\\", " . "])
def test_t56_a_name_of_nothing_is_refused(name):
    with pytest.raises(UploadRefused):
        safe_name(name)


def test_a_long_name_keeps_its_extension_within_the_limit():
    name = safe_name("é" * 300 + ".md")
    assert name.endswith(".md") and len(name.encode()) <= MAX_NAME_BYTES
    name.encode().decode()  # never a split character


def test_t57_uploads_are_0600_and_the_cap_holds_while_copying(tmp_path):
    uploads = Uploads(tmp_path / "documents.sqlite3", tmp_path / "uploads")
    kept = uploads.save(io.BytesIO(b"x" * 100), "../a.md", "assistants", cap=100)
    assert kept.path.parent.parent == (tmp_path / "uploads") and kept.path.read_bytes() == b"x" * 100
    if os.name == "posix":
        assert stat.S_IMODE(kept.path.stat().st_mode) == 0o600
    with pytest.raises(UploadTooLarge):
        uploads.save(io.BytesIO(b"x" * 101), "b.md", "assistants", cap=100)
    assert [f.filename for f in uploads.list()] == ["a.md"]
    assert sorted(p.name for p in (tmp_path / "uploads").iterdir()) == [kept.id]  # nothing left of b.md
    with pytest.raises(UploadRefused):
        uploads.save(io.BytesIO(b"x"), "c.md", "secrets")
    assert uploads.delete(kept.id) == kept and not kept.path.parent.exists() and uploads.get(kept.id) is None


ATTRS = {"year": 2024, "kind": "home", "draft": False, "score": 0.5}


@pytest.mark.parametrize(
    "spec, matches",
    [
        ({"type": "eq", "key": "kind", "value": "home"}, True),
        ({"type": "eq", "key": "year", "value": "2024"}, False),  # a string is not a number
        ({"type": "eq", "key": "draft", "value": False}, True),
        ({"type": "eq", "key": "draft", "value": 0}, False),  # a boolean is not a number
        ({"type": "ne", "key": "kind", "value": "work"}, True),
        ({"type": "ne", "key": "missing", "value": "work"}, False),
        ({"type": "gt", "key": "year", "value": 2023}, True),
        ({"type": "gte", "key": "year", "value": 2024}, True),
        ({"type": "lt", "key": "score", "value": 0.5}, False),
        ({"type": "lte", "key": "score", "value": 0.5}, True),
        ({"type": "gt", "key": "kind", "value": 3}, False),  # a string against a number
        ({"type": "gt", "key": "kind", "value": "apple"}, True),  # strings compare as strings
        ({"type": "in", "key": "kind", "value": ["work", "home"]}, True),
        ({"type": "nin", "key": "kind", "value": ["work", "home"]}, False),
        (
            {
                "type": "and",
                "filters": [
                    {"type": "eq", "key": "kind", "value": "home"},
                    {"type": "lt", "key": "year", "value": 2000},
                ],
            },
            False,
        ),
        (
            {
                "type": "or",
                "filters": [{"type": "eq", "key": "kind", "value": "x"}, {"type": "gt", "key": "year", "value": 2000}],
            },
            True,
        ),
    ],
)
def test_filters_compare_as_openai_defines(spec, matches):
    assert compile_filter(spec)(ATTRS) is matches


@pytest.mark.parametrize(
    "spec, param",
    [
        ("eq", "filters"),
        ({"type": "near", "key": "a", "value": 1}, "filters.type"),
        ({"type": "eq", "value": 1}, "filters.key"),
        ({"type": "eq", "key": "a", "value": {"b": 1}}, "filters.value"),
        ({"type": "gt", "key": "a", "value": True}, "filters.value"),
        ({"type": "in", "key": "a", "value": []}, "filters.value"),
        ({"type": "and", "filters": []}, "filters.filters"),
        ({"type": "or", "filters": [{"type": "and", "filters": [{"type": "eq"}]}]}, "filters.filters.0.filters.0.key"),
    ],
)
def test_a_bad_filter_names_where(spec, param):
    with pytest.raises(FilterError) as info:
        compile_filter(spec)
    assert info.value.param == param


def test_a_deep_filter_is_refused():
    spec: dict = {"type": "eq", "key": "a", "value": 1}
    for _ in range(20):
        spec = {"type": "and", "filters": [spec]}
    with pytest.raises(FilterError, match="deeper"):
        compile_filter(spec)


def test_attributes_are_bounded():
    assert checked_attributes({"a": 1, "b": "x", "c": True}) == {"a": 1, "b": "x", "c": True}
    for bad in ({f"k{i}": 1 for i in range(17)}, {"a": [1]}, {"a": None}, {"": 1}, {"a": "x" * 513}, [1]):
        with pytest.raises(FilterError):
            checked_attributes(bad)
