"""The file readers (app/core/documents/parsing.py): what each format gives, and that hostile files (zip bombs,
XML entities, binaries, huge or hanging inputs) end in a ParseError, quickly and within memory. Every fixture
is written here, by hand where the format allows, so each test shows the bytes it reads."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import pypdf
import pytest

from app.core.documents import parse_child, parsing
from app.core.documents.parse_child import parse_in_child
from app.core.documents.parsing import ParsedDocument, ParseError, Section, Unsupported, parse_file
from tests.fixtures.text_pdf import text_pdf

ROOT = Path(__file__).resolve().parents[3]

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
MC = 'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
R = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
A = 'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
P = 'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"'
S = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
DOC_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def texts(doc: ParsedDocument) -> list[tuple[str, str]]:
    return [(s.heading, s.text) for s in doc.sections]


def write_zip(path: Path, parts: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    return path


def rels(*items: tuple[str, str, str]) -> str:
    body = "".join(f'<Relationship Id="{i}" Type="{DOC_REL}/{kind}" Target="{target}"/>' for i, kind, target in items)
    return f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{RELS}">{body}</Relationships>'


def docx(path: Path, body: str, styles: str = "", document: str | bytes | None = None) -> Path:
    parts: dict[str, str | bytes] = {
        "_rels/.rels": rels(("rId1", "officeDocument", "word/document.xml")),
        "word/document.xml": document
        if document is not None
        else f'<?xml version="1.0" encoding="UTF-8"?><w:document {W} {MC}><w:body>{body}</w:body></w:document>',
    }
    if styles:
        parts["word/_rels/document.xml.rels"] = rels(("rId1", "styles", "styles.xml"))
        parts["word/styles.xml"] = f"<w:styles {W}>{styles}</w:styles>"
    return write_zip(path, parts)


def para(text: str, style: str = "") -> str:
    ppr = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{ppr}<w:r><w:t>{text}</w:t></w:r></w:p>"


# --- Text ------------------------------------------------------------------------------------------------


def test_markdown_headings_make_the_path_and_fenced_code_is_not_a_heading(tmp_path):
    md = tmp_path / "guide.md"
    md.write_text(
        "---\ntitle: front matter\n---\n"
        "Before any heading.\n\n"
        "# Install\n\nIntro words.\n\n"
        "## Linux ##\n\nRun the script:\n\n```sh\n# a comment, not a heading\n```\n\n"
        "~~~\nSetext in code\n===\n~~~\n\n"
        "Usage\n=====\n\nCall it.\n\nOptions\n-------\n\n- item\n---\n\nDone.\n",
        encoding="utf-8",
    )
    doc = parse_file(md)
    assert texts(doc) == [
        ("", "---\ntitle: front matter\n---\nBefore any heading."),
        ("Install", "Intro words."),
        (
            "Install › Linux",
            "Run the script:\n\n```sh\n# a comment, not a heading\n```\n\n~~~\nSetext in code\n===\n~~~",
        ),
        ("Usage", "Call it."),
        ("Usage › Options", "- item\n---\n\nDone."),
    ]
    assert doc.pages is None and doc.note is None


def test_code_and_plain_text_are_one_section_in_any_common_encoding(tmp_path):
    code = tmp_path / "main.py"
    code.write_text("def f():\n    # not a heading\n    return 1\n\n\n\n\nprint(f())\n")
    assert texts(parse_file(code)) == [("", "def f():\n    # not a heading\n    return 1\n\nprint(f())")]

    (tmp_path / "bom.txt").write_bytes("\ufeffcafé".encode())
    (tmp_path / "utf16.txt").write_bytes("héllo wörld".encode("utf-16"))  # with its BOM
    (tmp_path / "utf16le.txt").write_bytes("plain words, no byte order mark".encode("utf-16-le"))
    (tmp_path / "latin.txt").write_bytes("caf\xe9 cr\xe8me".encode("cp1252"))
    # UTF-8 for the first 8 KB, then a cp1252 byte: read again as cp1252, not cut or garbled by errors.
    (tmp_path / "late.txt").write_bytes(b"a" * 10_000 + b" na\xefve")
    assert parse_file(tmp_path / "bom.txt").sections[0].text == "café"
    assert parse_file(tmp_path / "utf16.txt").sections[0].text == "héllo wörld"
    assert parse_file(tmp_path / "utf16le.txt").sections[0].text == "plain words, no byte order mark"
    assert parse_file(tmp_path / "latin.txt").sections[0].text == "café crème"
    assert parse_file(tmp_path / "late.txt").sections[0].text.endswith(" naïve")


def test_a_binary_file_with_a_text_suffix_and_an_unknown_suffix_are_unsupported(tmp_path):
    binary = tmp_path / "notes.txt"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    with pytest.raises(Unsupported, match="a binary file"):
        parse_file(binary)
    other = tmp_path / "model.gguf"
    other.write_bytes(b"GGUF")
    with pytest.raises(Unsupported, match=r"\.gguf files are not read"):
        parse_file(other)
    assert ".py" in parsing.SUPPORTED_SUFFIXES and ".pdf" in parsing.SUPPORTED_SUFFIXES
    assert all(s == s.lower() and s.startswith(".") for s in parsing.SUPPORTED_SUFFIXES)


def test_an_empty_file_says_there_is_nothing_to_index(tmp_path):
    empty = tmp_path / "empty.md"
    empty.write_text("\n\n   \n")
    doc = parse_file(empty)
    assert doc.sections == [] and doc.note == "no text in the file: nothing to index"


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(parsing, "MAX_FILE_BYTES", 1024)
    big = tmp_path / "big.txt"
    big.write_text("x" * 3072)
    with pytest.raises(ParseError, match=r"the file is 3\.0 KiB, over the 1 KiB read"):
        parse_file(big)


def test_text_past_the_cap_is_cut_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(parsing, "MAX_TEXT_CHARS", 1000)
    long = tmp_path / "long.txt"
    long.write_text("word " * 2000)
    doc = parse_file(long)
    assert 900 < len(doc.sections[0].text) <= 1000
    assert doc.note == "only the first 1,000 characters were read"
    # The cap holds across formats: a Word file's paragraphs stop there too.
    doc = parse_file(docx(tmp_path / "long.docx", "".join(para(f"paragraph {i} " * 5) for i in range(200))))
    assert sum(len(s.text) for s in doc.sections) <= 1000 and doc.note == "only the first 1,000 characters were read"


def test_runs_of_blank_lines_and_spaces_collapse_in_one_fast_pass(tmp_path):
    blank = tmp_path / "blank.log"
    with open(blank, "wb") as f:
        f.write(b"start")
        for _ in range(64):
            f.write(b"\n" * (1 << 20))  # 64 MB of empty lines
        f.write(b"end\n")
        f.write(b" " * (16 << 20))  # and 16 MB of spaces on one line (a regex that backtracks is quadratic)
        f.write(b"x")
    t0 = time.monotonic()
    doc = parse_file(blank)
    assert time.monotonic() - t0 < 5
    assert texts(doc) == [("", "start\n\nend\n x")]
    blank.unlink()  # 80 MB: not left in the kept temporary folders


# --- HTML, CSV -------------------------------------------------------------------------------------------


def test_html_drops_scripts_breaks_blocks_and_heads_sections(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>Page title</title><style>p { color: red }</style>"
        '<script>var x = "<p>not text</p>";</script></head><body>\n'
        "<p>Intro &amp; more<br>second&nbsp;line</p>\n"
        '<h1>Main</h1><p title="a > b">Under   main</p><noscript>enable js</noscript>\n'
        "<h2>Sub</h2>\n<ul>\n  <li>one</li>\n  <li>two</li>\n</ul>\n"
        "<table>\n<tr><th>A</th><th>B</th></tr>\n<tr><td>1</td><td>2</td></tr>\n</table>\n"
        "<svg><text>svg text</text></svg><template><p>template text</p></template>\n"
        "<!-- a > b <p>commented out</p> -->"
        "<h1>Other</h1><div>Last</div></body></html>",
        encoding="utf-8",
    )
    assert texts(parse_file(page)) == [
        ("Page title", "Intro & more\nsecond\xa0line"),
        ("Main", "Under main"),
        ("Main › Sub", "one\ntwo\n\nA | B\n1 | 2"),
        ("Other", "Last"),
    ]


def test_unclosed_html_constructs_read_in_linear_time(tmp_path):
    # html.parser rescans to the end for each unclosed tag: this page took it over three minutes. With no
    # ">" after them, none of these can close: they are text.
    page = tmp_path / "broken.html"
    page.write_text("<p>Start</p>" + "<a" * 200_000 + "<!-- never closed")
    t0 = time.monotonic()
    doc = parse_file(page)
    assert time.monotonic() - t0 < 3
    assert doc.sections[0].text.startswith("Start\n\n<a<a") and doc.sections[0].text.endswith("<a<!-- never closed")


def test_html_in_a_legacy_charset_is_decoded_by_its_meta_tag(tmp_path):
    page = tmp_path / "old.htm"
    page.write_bytes('<meta charset="koi8-r"><p>привет</p>'.encode("koi8-r"))
    assert texts(parse_file(page)) == [("", "привет")]


def test_csv_rows_read_as_header_value_pairs_in_sections_of_fifty(tmp_path):
    table = tmp_path / "models.csv"
    lines = ["name,size,notes"] + [f"model-{i},{i} GB," for i in range(1, 121)]
    lines[3] = 'model-3,3 GB,"has, a comma\nand a newline"'
    table.write_text("\n".join(lines) + "\n")
    doc = parse_file(table)
    assert [s.heading for s in doc.sections] == ["rows 1–50", "rows 51–100", "rows 101–120"]
    first = doc.sections[0].text.split("\n")
    assert first[0] == "name: model-1; size: 1 GB"
    assert first[2] == "name: model-3; size: 3 GB; notes: has, a comma and a newline"
    assert doc.sections[2].text.split("\n")[-1] == "name: model-120; size: 120 GB"

    tsv = tmp_path / "t.tsv"
    tsv.write_text("a\tb\n1\t2,5\n")
    assert texts(parse_file(tsv)) == [("rows 1–1", "a: 1; b: 2,5")]
    semicolons = tmp_path / "europe.csv"
    semicolons.write_text("Preis;Menge\n2,50;3\n")
    assert texts(parse_file(semicolons)) == [("rows 1–1", "Preis: 2,50; Menge: 3")]


def test_csv_stops_at_the_row_cap_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(parsing, "MAX_TABLE_ROWS", 10)
    table = tmp_path / "many.csv"
    table.write_text("n\n" + "".join(f"{i}\n" for i in range(1, 1000)))
    doc = parse_file(table)
    assert texts(doc) == [("rows 1–10", "\n".join(f"n: {i}" for i in range(1, 11)))]
    assert doc.note == "only the first 10 rows were read"


# --- DOCX, PPTX, XLSX, EPUB ------------------------------------------------------------------------------


def test_docx_paragraphs_headings_tables_and_text_boxes(tmp_path):
    body = (
        para("Guide", "Title")
        + para("Opening words.")
        + para("Install", "berschrift1")  # a German style id: its name in styles.xml says heading 1
        + '<w:p><w:r><w:t xml:space="preserve">Step one</w:t><w:tab/><w:t>tabbed</w:t><w:br/>'
        "<w:t>next line</w:t></w:r></w:p>"
        + '<w:p><w:pPr><w:pStyle w:val="Heading2"/><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr>'
        "<w:r><w:t>Linux</w:t></w:r></w:p>"
        + "<w:p><w:r><w:t>Use apt.</w:t></w:r><w:del><w:r><w:delText>old words</w:delText></w:r></w:del></w:p>"
        + "<w:tbl><w:tr><w:tc>"
        + para("Name")
        + "</w:tc><w:tc>"
        + para("Size")
        + "</w:tc></w:tr><w:tr><w:tc>"
        + para("model.gguf")
        + "</w:tc><w:tc>"
        + para("4 GB")
        + "</w:tc></w:tr></w:tbl>"
        + '<w:p><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:txbxContent>'
        + para("Boxed note")
        + "</w:txbxContent></mc:Choice><mc:Fallback><w:pict><w:txbxContent>"
        + para("Boxed note")
        + "</w:txbxContent></w:pict></mc:Fallback></mc:AlternateContent></w:r></w:p>"
    )
    styles = '<w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>'
    doc = parse_file(docx(tmp_path / "guide.docx", body, styles))
    assert texts(doc) == [
        ("Guide", "Opening words."),
        ("Install", "Step one\ttabbed\nnext line"),
        ("Install › Linux", "Use apt.\n\nName | Size\nmodel.gguf | 4 GB\n\nBoxed note"),
    ]
    assert doc.pages is None


def test_pptx_slides_in_presentation_order_with_titles_tables_and_notes(tmp_path):
    def slide(title: str, body: str) -> str:
        title_shape = (
            '<p:sp><p:nvSpPr><p:cNvPr id="2" name="Title"/><p:cNvSpPr/><p:nvPr><p:ph type="title"/></p:nvPr>'
            f"</p:nvSpPr><p:txBody><a:p><a:r><a:t>{title}</a:t></a:r></a:p></p:txBody></p:sp>"
        )
        number = (
            '<p:sp><p:nvSpPr><p:cNvPr id="9" name="Num"/><p:cNvSpPr/><p:nvPr><p:ph type="sldNum"/></p:nvPr>'
            "</p:nvSpPr><p:txBody><a:p><a:fld><a:t>77</a:t></a:fld></a:p></p:txBody></p:sp>"
        )
        return f"<p:sld {P} {A} {R}><p:cSld><p:spTree>{title_shape}{body}{number}</p:spTree></p:cSld></p:sld>"

    bullets = (
        '<p:sp><p:nvSpPr><p:cNvPr id="3" name="Body"/><p:cNvSpPr/><p:nvPr><p:ph idx="1"/></p:nvPr></p:nvSpPr>'
        "<p:txBody><a:p><a:r><a:t>First </a:t></a:r><a:r><a:t>point</a:t></a:r></a:p>"
        "<a:p><a:r><a:t>Second point</a:t></a:r></a:p></p:txBody></p:sp>"
    )
    cells = "".join(
        "<a:tr>"
        + "".join(f"<a:tc><a:txBody><a:p><a:r><a:t>{c}</a:t></a:r></a:p></a:txBody></a:tc>" for c in row)
        + "</a:tr>"
        for row in (("Model", "Speed"), ("Qwen", "40 t/s"))
    )
    table = (
        f"<p:graphicFrame><a:graphic><a:graphicData><a:tbl>{cells}</a:tbl></a:graphicData></a:graphic></p:graphicFrame>"
    )
    notes = (
        f'<p:notes {P} {A}><p:cSld><p:spTree><p:sp><p:nvSpPr><p:cNvPr id="2" name="N"/><p:cNvSpPr/>'
        '<p:nvPr><p:ph type="body" idx="1"/></p:nvPr></p:nvSpPr><p:txBody><a:p><a:r><a:t>Say hello</a:t></a:r>'
        "</a:p></p:txBody></p:sp></p:spTree></p:cSld></p:notes>"
    )
    path = write_zip(
        tmp_path / "deck.pptx",
        {
            "_rels/.rels": rels(("rId1", "officeDocument", "ppt/presentation.xml")),
            # The second slide file is shown first: the order is the presentation's, not the file names'.
            "ppt/presentation.xml": f'<p:presentation {P} {R}><p:sldIdLst><p:sldId r:id="rId7" id="256"/>'
            '<p:sldId id="257" r:id="rId6"/></p:sldIdLst></p:presentation>',
            "ppt/_rels/presentation.xml.rels": rels(
                ("rId6", "slide", "slides/slide1.xml"), ("rId7", "slide", "slides/slide2.xml")
            ),
            "ppt/slides/slide2.xml": slide("Agenda", bullets),
            "ppt/slides/_rels/slide2.xml.rels": rels(("rId1", "notesSlide", "../notesSlides/notesSlide1.xml")),
            "ppt/notesSlides/notesSlide1.xml": notes,
            "ppt/slides/slide1.xml": slide("Numbers", table),
        },
    )
    doc = parse_file(path)
    assert doc.pages == 2
    assert doc.sections == [
        Section("First point\nSecond point\n\nNotes: Say hello", 1, "Agenda"),
        Section("Model | Speed\nQwen | 40 t/s", 2, "Numbers"),
    ]


def test_xlsx_sheets_by_name_with_shared_inline_and_number_cells(tmp_path):
    shared = (
        f"<sst {S}><si><t>Name</t></si><si><t>Score</t></si>"
        "<si><r><t>An</t></r><r><t>n</t></r><rPh><t>アン</t></rPh></si></sst>"
    )
    sheet1 = (
        f"<worksheet {S}><sheetData>"
        '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>'
        '<row r="2"><c r="A2" t="s"><v>2</v></c><c r="B2"><v>91.5</v></c><c r="D2" t="b"><v>1</v></c></row>'
        '<row r="3"><c r="A3" t="inlineStr"><is><t>Bo</t></is></c><c r="B3"><f>SUM(B1:B2)</f><v>12</v></c></row>'
        '<row r="4"><c r="A4" s="3"/></row>'
        "</sheetData></worksheet>"
    )
    sheet2 = f'<worksheet {S}><sheetData><row r="1"><c r="A1" t="str"><v>a note</v></c></row></sheetData></worksheet>'
    path = write_zip(
        tmp_path / "book.xlsx",
        {
            "_rels/.rels": rels(("rId1", "officeDocument", "xl/workbook.xml")),
            "xl/workbook.xml": f'<workbook {S} {R}><sheets><sheet name="Data" sheetId="1" r:id="rId1"/>'
            '<sheet name="Notes &amp; more" sheetId="2" r:id="rId2"/></sheets></workbook>',
            "xl/_rels/workbook.xml.rels": rels(
                ("rId1", "worksheet", "worksheets/sheet1.xml"),
                ("rId2", "worksheet", "worksheets/sheet2.xml"),
                ("rId3", "sharedStrings", "sharedStrings.xml"),
            ),
            "xl/sharedStrings.xml": shared,
            "xl/worksheets/sheet1.xml": sheet1,
            "xl/worksheets/sheet2.xml": sheet2,
        },
    )
    doc = parse_file(path)
    assert texts(doc) == [("Data", "Name | Score\nAnn | 91.5 |  | TRUE\nBo | 12"), ("Notes & more", "a note")]


def test_xlsx_stops_at_the_row_cap_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(parsing, "MAX_TABLE_ROWS", 5)
    rows = "".join(f'<row r="{i}"><c r="A{i}"><v>{i}</v></c></row>' for i in range(1, 50))
    path = write_zip(
        tmp_path / "rows.xlsx",
        {"xl/worksheets/sheet1.xml": f"<worksheet {S}><sheetData>{rows}</sheetData></worksheet>"},
    )
    doc = parse_file(path)
    assert texts(doc) == [("Sheet1", "1\n2\n3\n4\n5")]
    assert doc.note == "only the first 5 rows of Sheet1 were read"


def epub(path: Path, extra: dict[str, str | bytes] | None = None) -> Path:
    chapter2 = (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
        "<title>Second file</title></head><body><h1>Beginning</h1><p>Once upon a time.</p></body></html>"
    )
    chapter1 = "<html><head><title>Ending</title></head><body><p>Last words.</p></body></html>"
    parts: dict[str, str | bytes] = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
        "OEBPS/content.opf": '<package xmlns="http://www.idpf.org/2007/opf"><manifest>'
        '<item id="c1" href="text/ch1.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="c2" href="text/ch%202.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="css" href="style.css" media-type="text/css"/></manifest>'
        '<spine><itemref idref="c2"/><itemref idref="c1"/></spine></package>',
        "OEBPS/text/ch1.xhtml": chapter1,
        "OEBPS/text/ch 2.xhtml": chapter2,
        "OEBPS/style.css": "p { margin: 0 }",
    }
    return write_zip(path, parts | (extra or {}))


def test_epub_chapters_in_spine_order_headed_by_their_first_heading_or_title(tmp_path):
    doc = parse_file(epub(tmp_path / "book.epub"))
    assert texts(doc) == [("Beginning", "Once upon a time."), ("Ending", "Last words.")]


def test_an_epub_with_drm_is_refused(tmp_path):
    encryption = (
        '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
        '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
        '<enc:CipherData><enc:CipherReference URI="OEBPS/text/ch1.xhtml"/></enc:CipherData>'
        "</enc:EncryptedData></encryption>"
    )
    with pytest.raises(ParseError, match="DRM"):
        parse_file(epub(tmp_path / "drm.epub", {"META-INF/encryption.xml": encryption}))


# --- PDF -------------------------------------------------------------------------------------------------


def test_a_pdf_text_layer_reads_page_by_page(tmp_path):
    pdf = tmp_path / "hello.pdf"
    pdf.write_bytes(text_pdf(["Hello hearth", "Second page words"]))
    assert "Hello hearth" in pypdf.PdfReader(pdf).pages[0].extract_text()  # the fixture is a real PDF
    doc = parse_file(pdf)
    assert doc.pages == 2 and doc.note is None
    assert doc.sections == [Section("Hello hearth", 1, ""), Section("Second page words", 2, "")]


def test_a_pdf_without_text_says_it_may_be_scanned(tmp_path):
    writer = pypdf.PdfWriter()
    for _ in range(3):
        writer.add_blank_page(612, 792)
    pdf = tmp_path / "scan.pdf"
    with open(pdf, "wb") as f:
        writer.write(f)
    assert parse_file(pdf) == ParsedDocument([], 3, "no text layer (a scanned PDF?): nothing to index")


def test_an_encrypted_pdf_needs_its_password_and_one_with_an_empty_password_opens(tmp_path):
    def encrypted(user: str, owner: str) -> Path:
        writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(text_pdf(["Secret words"]))))
        writer.encrypt(user_password=user, owner_password=owner)
        path = tmp_path / f"enc-{user or 'open'}.pdf"
        with open(path, "wb") as f:
            writer.write(f)
        return path

    with pytest.raises(ParseError, match="the PDF is password-protected"):
        parse_file(encrypted("pw", "owner"))
    assert texts(parse_file(encrypted("", "owner"))) == [("", "Secret words")]


def test_a_damaged_pdf_is_a_parse_error(tmp_path):
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4\nthis is not a pdf at all\n")
    with pytest.raises(ParseError, match="not a readable PDF") as info:
        parse_file(bad)
    assert not isinstance(info.value, Unsupported)


# --- Hostile containers ----------------------------------------------------------------------------------


def test_a_zip_bomb_is_refused_by_its_declared_size_before_anything_is_unpacked(tmp_path):
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("_rels/.rels", rels(("rId1", "officeDocument", "word/document.xml")))
        with zf.open("word/document.xml", "w") as f:
            zeros = bytes(1 << 20)
            for _ in range(300):  # 300 MB of zeros, streamed: the test never holds them
                f.write(zeros)
    assert bomb.stat().st_size < 4 << 20
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ParseError, match=r"word/document\.xml\) would unpack to 300\.0 MiB, over the 256 MiB"):
            parse_file(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 2 and peak < 8 << 20


def test_a_part_packed_at_an_absurd_ratio_is_refused_even_under_the_size_cap(tmp_path):
    path = tmp_path / "ratio.xlsx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("xl/worksheets/sheet1.xml", bytes(20 << 20))  # 20 MB of zeros packs ~1000 to 1
    tracemalloc.start()
    try:
        with pytest.raises(ParseError, match=r"is packed [\d,]+ to 1: a zip bomb"):
            parse_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # refused by what the zip declares: nothing was unpacked


def test_a_part_that_unpacks_to_more_than_it_declares_is_a_parse_error(tmp_path):
    text = "a" * (2 << 20)
    path = docx(tmp_path / "liar.docx", para(text))
    data = bytearray(path.read_bytes())
    # Rewrite the part's uncompressed size to 1000 in its local header (offset 22) and directory entry (24).
    name = b"word/document.xml"
    local = data.find(b"PK\x03\x04" + b"\x00" * 0)
    while data[local + 30 : local + 30 + len(name)] != name:
        local = data.find(b"PK\x03\x04", local + 4)
    struct.pack_into("<I", data, local + 22, 1000)
    central = data.find(b"PK\x01\x02")
    while data[central + 46 : central + 46 + len(name)] != name:
        central = data.find(b"PK\x01\x02", central + 4)
    struct.pack_into("<I", data, central + 24, 1000)
    path.write_bytes(bytes(data))
    with pytest.raises(ParseError, match="damaged"):
        parse_file(path)


def test_the_parts_read_are_capped_together_and_their_count_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(parsing, "MAX_UNPACKED_BYTES", 4096)
    big = docx(tmp_path / "big.docx", para("x" * 5000))
    with pytest.raises(ParseError, match=r"\(word/document\.xml\) would unpack to 5\.1 KiB, over the 4 KiB allowed"):
        parse_file(big)
    two = docx(tmp_path / "two.docx", para("x" * 2500), styles="<w:style/>" + " " * 2500)
    with pytest.raises(ParseError, match="the parts of the file would unpack to over the 4 KiB allowed"):
        parse_file(two)

    monkeypatch.setattr(parsing, "MAX_ZIP_MEMBERS", 5)
    crowded = write_zip(tmp_path / "crowded.docx", {f"part{i}.xml": "<a/>" for i in range(10)})
    with pytest.raises(ParseError, match="too many parts"):
        parse_file(crowded)


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
    + f"]>\n<w:document {W}><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_xml_that_declares_entities_is_refused_in_any_encoding(tmp_path, encoding):
    document = BILLION_LAUGHS.replace('version="1.0"', f'version="1.0" encoding="{encoding}"').encode(encoding)
    with pytest.raises(ParseError, match="the file declares XML entities, which are not read"):
        parse_file(docx(tmp_path / "lol.docx", "", document=document))


def test_an_external_entity_is_refused_and_nothing_is_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me")
    document = (
        f'<?xml version="1.0"?><!DOCTYPE w [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>'
        f"<w:document {W}><w:body><w:p><w:r><w:t>&xxe;</w:t></w:r></w:p></w:body></w:document>"
    )
    with pytest.raises(ParseError, match="declares XML entities"):
        parse_file(docx(tmp_path / "xxe.docx", "", document=document))


def test_a_doctype_is_refused_even_without_entities(tmp_path):
    document = (
        '<?xml version="1.0"?><!DOCTYPE w:document SYSTEM "http://example.invalid/evil.dtd">'
        f"<w:document {W}><w:body>{para('text')}</w:body></w:document>"
    )
    with pytest.raises(ParseError, match="declares XML entities"):
        parse_file(docx(tmp_path / "dtd.docx", "", document=document))


def test_files_that_are_not_the_zip_they_claim_are_parse_errors(tmp_path):
    fake = tmp_path / "fake.pptx"
    fake.write_text("just text")
    with pytest.raises(ParseError, match="not a valid PowerPoint file"):
        parse_file(fake)
    protected = tmp_path / "locked.docx"
    protected.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(1024))  # what Word writes for a password
    with pytest.raises(ParseError, match="password-protected"):
        parse_file(protected)
    broken = tmp_path / "broken.docx"
    broken.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(ParseError, match="not a valid Word file"):
        parse_file(broken)


# --- In a child process ----------------------------------------------------------------------------------


def test_parse_in_child_gives_what_parse_file_gives(tmp_path):
    path = docx(tmp_path / "a.docx", para("Top", "Heading1") + para("Words in the child."))
    doc = parse_in_child(path)
    assert doc == parse_file(path) == ParsedDocument([Section("Words in the child.", None, "Top")], None, None)


def test_parse_in_child_reports_the_childs_errors_as_the_same_class(tmp_path):
    binary = tmp_path / "x.txt"
    binary.write_bytes(b"\0\1\2\3" * 100)
    with pytest.raises(Unsupported, match="a binary file"):
        parse_in_child(binary)
    lol = docx(tmp_path / "lol.docx", "", document=BILLION_LAUGHS)
    with pytest.raises(ParseError, match="declares XML entities") as info:
        parse_in_child(lol)
    assert type(info.value) is ParseError


def test_a_child_that_hangs_is_killed_at_the_timeout_and_the_next_file_still_reads(tmp_path, monkeypatch):
    good = tmp_path / "good.txt"
    good.write_text("fine")
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(parse_child, "child_command", lambda path: hang)
    t0 = time.monotonic()
    with pytest.raises(ParseError, match=r"took over 0\.5 s to read"):
        parse_in_child(good, timeout_s=0.5)
    assert time.monotonic() - t0 < 10
    monkeypatch.undo()
    assert texts(parse_in_child(good)) == [("", "fine")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_a_child_over_its_memory_limit_is_a_parse_error(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text(("words " * 20 + "\n") * 80_000)  # ~10 MB: reading it needs more than 1 MB of new memory
    with pytest.raises(ParseError, match=r"ran out of memory or crashed \(it needed more than 1 MB\)"):
        parse_in_child(big, memory_mb=1)
    assert parse_in_child(big).sections[0].text.startswith("words words")


def test_a_crashed_or_flooding_child_is_a_parse_error(tmp_path, monkeypatch):
    good = tmp_path / "good.txt"
    good.write_text("fine")
    monkeypatch.setattr(parse_child, "child_command", lambda path: [sys.executable, "-c", "raise SystemExit('boom')"])
    with pytest.raises(ParseError, match=r"ran out of memory or crashed \(boom\)"):
        parse_in_child(good)
    flood = "import sys; sys.stdout.write('x' * 5_000_000)"
    monkeypatch.setattr(parse_child, "child_command", lambda path: [sys.executable, "-c", flood])
    monkeypatch.setattr(parse_child, "MAX_CHILD_OUTPUT_BYTES", 100_000)
    with pytest.raises(ParseError, match="answer was over"):
        parse_in_child(good)


def test_a_bundle_runs_the_child_through_its_own_program(monkeypatch, tmp_path):
    path = tmp_path / "a.txt"
    assert parse_child.child_command(path)[1:] == ["-m", "app.core.documents.parse_child", str(path)]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert parse_child.child_command(path) == [sys.executable, "--hearth-parse-document", str(path)]


def test_the_documents_package_imports_neither_qt_nor_the_web_stack():
    code = (
        "import sys, app.core.documents.parsing, app.core.documents.parse_child;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'fastapi', 'starlette', 'uvicorn'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- One child for many files (an indexing run's) ----------------------------------------------------------


# The real served child, whose reader sleeps on a file named hang.txt (standing for a file that loops).
HANGING_CHILD = (
    "import time; from app.core.documents import parse_child as c; read = c.parse_file; "
    "c.parse_file = lambda p: time.sleep(60) if p.name == 'hang.txt' else read(p); c.main(['--serve'])"
)


def test_a_served_child_reads_many_files_and_one_that_hangs_costs_only_itself(tmp_path, monkeypatch):
    pdfs = []
    for i in range(3):
        pdfs.append(tmp_path / f"p{i}.pdf")
        pdfs[-1].write_bytes(text_pdf([f"page one of {i}", f"page two of {i}"]))
    reader = parse_child.ChildReader()
    try:
        for i, pdf in enumerate(pdfs):
            assert texts(reader.parse(pdf)) == [("", f"page one of {i}"), ("", f"page two of {i}")]
        assert reader.started == 1  # one child for all three
        if sys.platform.startswith("linux"):  # it reads in the engine's gaps, not in its place
            assert os.getpriority(os.PRIO_PROCESS, reader._proc.pid) == min(19, os.nice(0) + parse_child.READER_NICE)
        with pytest.raises(Unsupported):
            reader.parse(tmp_path / "image.png")  # an error answer keeps the child
        assert reader.started == 1
    finally:
        reader.close()
    monkeypatch.setattr(parse_child, "child_command", lambda path: [sys.executable, "-c", HANGING_CHILD])
    hang = tmp_path / "hang.txt"
    hang.write_text("never read")
    reader = parse_child.ChildReader(timeout_s=2)  # a start and a small PDF, on a busy machine, at low priority
    try:
        assert texts(reader.parse(pdfs[1]))[0] == ("", "page one of 1")
        t0 = time.monotonic()
        with pytest.raises(ParseError, match=r"took over 2 s to read"):
            reader.parse(hang)
        assert time.monotonic() - t0 < 10
        assert texts(reader.parse(pdfs[0]))[0] == ("", "page one of 0") and reader.started == 2
    finally:
        reader.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_a_served_child_over_its_memory_limit_fails_that_file_and_the_next_starts_afresh(tmp_path):
    big = tmp_path / "big.html"
    big.write_text("<p>" + ("words " * 20 + "\n") * 80_000 + "</p>")
    small = tmp_path / "small.html"
    small.write_text("<p>a small page</p>")
    reader = parse_child.ChildReader(memory_mb=48)  # enough to start, not to read 10 MB of HTML
    try:
        with pytest.raises(ParseError, match=r"ran out of memory or crashed \(it needed more than 48 MB\)"):
            reader.parse(big)
        assert texts(reader.parse(small)) == [("", "a small page")] and reader.started == 2
    finally:
        reader.close()


def test_a_served_child_that_floods_its_answer_or_crashes_is_a_parse_error(tmp_path, monkeypatch):
    good = tmp_path / "good.txt"
    good.write_text("fine")
    flood = "import sys; sys.stdin.readline(); sys.stdout.buffer.write((10**9).to_bytes(8, 'big')); sys.stdout.flush()"
    monkeypatch.setattr(parse_child, "child_command", lambda path: [sys.executable, "-c", flood])
    reader = parse_child.ChildReader()
    with pytest.raises(ParseError, match="answer was over"):
        reader.parse(good)
    monkeypatch.setattr(parse_child, "child_command", lambda path: [sys.executable, "-c", "raise SystemExit('boom')"])
    with pytest.raises(ParseError, match=r"ran out of memory or crashed \(boom\)"):
        reader.parse(good)
    monkeypatch.undo()
    assert texts(reader.parse(good)) == [("", "fine")]
    reader.close()
