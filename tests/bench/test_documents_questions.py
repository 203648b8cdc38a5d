"""bench/data/documents_questions.json, the question set of bench/documents.py's retrieval quality: every
question still points at a passage of docs/*.md as Hearth cuts it for the bench's model (no model needed), so
a change to the docs that strands a question fails here, naming it, rather than as a lower recall."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("hearth_bench_documents", ROOT / "bench" / "documents.py")
assert _spec is not None and _spec.loader is not None
documents = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = documents
_spec.loader.exec_module(documents)


def test_every_question_points_at_one_or_a_few_passages_of_its_file() -> None:
    questions = documents.load_questions()
    targets = documents.question_targets(questions, ROOT, documents.QUALITY_CTX)  # raises, naming the stale ones
    assert len(targets) == len(questions)
    assert all(1 <= len(t) <= documents.MOST_TARGETS for t in targets)


def test_the_question_file_is_well_formed() -> None:
    raw = json.loads(documents.QUESTIONS.read_text(encoding="utf-8"))["questions"]
    assert len(raw) >= 40
    for q in raw:
        assert set(q) <= {"question", "file", "must_contain", "kind"}, q
        assert q["question"].strip() and q["file"].startswith("docs/") and q["file"].endswith(".md"), q
        phrases = q["must_contain"] if isinstance(q["must_contain"], list) else [q["must_contain"]]
        assert phrases and all(isinstance(p, str) and len(p) >= 6 for p in phrases), q
        assert q["kind"] in ("paraphrase", "name"), q
    assert len({q["question"] for q in raw}) == len(raw)
    kinds = [q["kind"] for q in raw]
    # Mostly in other words than the passage's, a few by an exact name or code.
    assert kinds.count("paraphrase") > 3 * kinds.count("name") > 0
    assert len({q["file"] for q in raw}) >= 8


def test_a_stale_or_vague_question_is_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\nThe kettle boils at noon.\n\n"
        + "\n\n".join(f"## Part {i}\n\nThe lamp is lit in room {i}." for i in range(5)),
        encoding="utf-8",
    )
    question = documents.Question
    fine = question("When does the kettle boil?", "docs/a.md", ("kettle boils at",), "paraphrase")
    assert documents.question_targets([fine], tmp_path) == [{0}]
    gone = question("Where is the bread?", "docs/a.md", ("bread is kept",), "paraphrase")
    vague = question("Which lamp?", "docs/a.md", ("The lamp is lit",), "paraphrase")
    moved = question("And the cat?", "docs/b.md", ("cat",), "paraphrase")
    half = question("Is it noon?", "docs/a.md", ("kettle boils at", "the clock strikes"), "paraphrase")
    with pytest.raises(documents.StaleQuestions) as caught:
        documents.question_targets([fine, gone, vague, moved, half], tmp_path)
    message = str(caught.value)
    assert "Where is the bread?" in message and "Which lamp?" in message and "And the cat?" in message
    assert "'the clock strikes'" in message and "'kettle boils at'" not in message
    assert "When does the kettle boil?" not in message


def test_a_phrase_across_a_reflowed_line_still_matches(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    text = "# T\n\nOne engine serves the chat\nwindow and the API.\n"
    (tmp_path / "docs" / "a.md").write_text(text, encoding="utf-8")
    q = documents.Question("Who serves the chat?", "docs/a.md", ("the chat window and",), "paraphrase")
    assert documents.question_targets([q], tmp_path) == [{0}]


def test_quality_is_on_by_default_and_can_be_insisted_on_or_left_out() -> None:
    parse = documents.build_parser().parse_args
    assert parse([]).quality is None
    assert parse(["--quality"]).quality is True
    assert parse(["--no-quality"]).quality is False
