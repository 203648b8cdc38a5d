"""Passages follow the document's structure and fit the embedding model: never across a section or page,
paragraphs packed, long ones cut at sentences, then spaces, then anywhere; the same text cuts the same way."""

from __future__ import annotations

from app.core.documents.parsing import Section
from app.core.documents.passages import MIN_CHARS, TARGET_CHARS, cut_passages, passage_chars


def test_a_passage_never_spans_two_sections_and_keeps_its_page_and_heading():
    sections = [
        Section("Short intro.", 1, "Intro"),
        Section("Setup on Linux.\n\nInstall the package.", 2, "Install › Linux"),
    ]
    out = cut_passages(sections, 1000)
    assert [(p.ordinal, p.text, p.page, p.heading) for p in out] == [
        (0, "Short intro.", 1, "Intro"),
        (1, "Setup on Linux.\n\nInstall the package.", 2, "Install › Linux"),
    ]
    assert out[1].for_embedding() == "Install › Linux\nSetup on Linux.\n\nInstall the package."
    assert out[0].for_embedding().startswith("Intro\n")


def test_paragraphs_are_packed_up_to_the_limit_and_not_split_when_they_fit():
    paragraphs = [f"Paragraph {i} " + "word " * 30 for i in range(20)]  # ~170 chars each
    out = cut_passages([Section("\n\n".join(paragraphs), None, "")], 600)
    assert all(len(p.text) <= 600 for p in out)
    assert 5 <= len(out) <= 8  # three a passage, not one
    rejoined = [para.strip() for p in out for para in p.text.split("\n\n")]
    assert rejoined == [p.strip() for p in paragraphs]  # every paragraph whole, in order


def test_a_long_paragraph_is_cut_at_sentence_ends_then_spaces_then_anywhere():
    sentences = " ".join(f"Sentence number {i} says a thing about the hearth." for i in range(60))
    out = cut_passages([Section(sentences, None, "")], 300)
    assert all(len(p.text) <= 300 for p in out)
    assert all(p.text.endswith(".") for p in out)  # cut between sentences
    one_sentence = "word " * 200
    out = cut_passages([Section(one_sentence, None, "")], 300)
    assert all(len(p.text) <= 300 for p in out) and all(not p.text.startswith(" ") for p in out)
    assert sum(len(p.text.split()) for p in out) == 200  # no word lost or cut
    blob = "x" * 1000
    out = cut_passages([Section(blob, None, "")], 300)
    assert [len(p.text) for p in out] == [300, 300, 300, 100]


def test_the_same_text_cuts_the_same_way_and_blank_sections_give_nothing():
    text = "\n\n".join(f"Part {i}. " + "alpha beta. " * (i * 7) for i in range(30))
    a = cut_passages([Section(text, 3, "H")], 500)
    b = cut_passages([Section(text, 3, "H")], 500)
    assert a == b and [p.ordinal for p in a] == list(range(len(a)))
    assert cut_passages([Section("  \n\n \n", None, ""), Section("", 1, "x")]) == []


def test_passage_size_follows_the_models_context():
    assert passage_chars(8192) == TARGET_CHARS
    assert MIN_CHARS <= passage_chars(128) < passage_chars(512) <= TARGET_CHARS
    assert passage_chars(16) == MIN_CHARS
