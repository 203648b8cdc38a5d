"""Reading a user's files into plain text: sections of text with the page and heading path they sit under.

Only the standard library and pypdf: every format read here is text, HTML, a zip of XML (DOCX, PPTX, XLSX,
EPUB) or a PDF, and each reader walks only the parts it needs, so a heavier library would add weight and
attack surface for nothing. Files are hostile until read: every reader is bounded (file size, zip members
and their packing ratio, XML entity declarations, extracted text, rows, pages), and `parse_in_child` runs
the reader in a child process under a memory limit and a timeout, for what the bounds cannot foresee
(pypdf's own worst cases). HTML is tokenized here rather than by html.parser, whose handling of unclosed
tags is quadratic: 400 KB of "<a<a<a…" took it over three minutes.

A section's text is paragraphs separated by blank lines; its heading is the path of headings above it
("Install › Linux"), which is not repeated in the text (the passages put it before the text themselves).
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import itertools
import logging
import os
import posixpath
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import unquote
from xml.parsers import expat

from app.core.units import MiB, fmt_bytes

logger = logging.getLogger(__name__)

# Bounds. Module constants, read at call time, so a test can lower one.
MAX_FILE_BYTES = 256 * MiB  # any file larger is refused unread
MAX_MARKUP_BYTES = 64 * MiB  # HTML is read whole
MAX_TEXT_CHARS = 20_000_000  # extracted text kept per file (headings included); reading stops there
MAX_UNPACKED_BYTES = 256 * MiB  # a zip part, and all the parts read from one file together, unpacked
MAX_PACKING_RATIO = 200  # a part this many times smaller packed than unpacked ...
RATIO_FLOOR_BYTES = 10 * MiB  # ... and unpacking to more than this is a zip bomb
MAX_ZIP_MEMBERS = 20_000  # more parts than any office file or book has; zipfile keeps an object per part
MAX_TABLE_ROWS = 100_000  # rows per CSV file or spreadsheet sheet
MAX_COLUMNS = 200  # cells per row kept
MAX_CELL_CHARS = 10_000
MAX_ROW_CHARS = 20_000
MAX_LINE_CHARS = 1_000_000  # a CSV line longer than this is cut (csv would split it into that many cells)
MAX_PDF_PAGES = 5_000
MAX_SHARED_STRINGS = 4_000_000  # an XLSX's string table
MAX_HEADING_CHARS = 300  # one heading; longer is a paragraph that was styled as a heading

ROWS_PER_SECTION = 50  # CSV rows per section: a section is what a citation names ("rows 51–100")
SCANNED_CHARS_PER_PAGE = 3  # fewer visible characters a page than this: a PDF without a text layer
HEADING_SEPARATOR = " › "

_CHUNK_CHARS = 1 << 20
_CHUNK_BYTES = 1 << 20

_MARKDOWN = frozenset({".md", ".markdown", ".mdown", ".mkd"})
_HTML = frozenset({".html", ".htm", ".xhtml"})
_CSV = {".csv": ",", ".tsv": "\t"}
_PLAIN = frozenset(
    ".txt .text .rst .adoc .org .tex .bib .log .json .jsonl .ndjson .yaml .yml .toml .ini .cfg .conf "
    ".properties .xml .srt .vtt "
    ".py .pyi .js .mjs .cjs .ts .tsx .jsx .java .c .h .cc .cpp .cxx .hpp .hh .cs .go .rs .rb .php .swift "
    ".kt .kts .scala .sh .bash .zsh .fish .ps1 .bat .sql .css .scss .sass .less .lua .r .m .mm .pl .pm .hs "
    ".ex .exs .erl .clj .dart .jl .vue .svelte .gradle .cmake .proto .graphql .zig .nim .ml .fs .vb .asm".split()
)
_DOCX = frozenset({".docx", ".docm"})
_PPTX = frozenset({".pptx", ".pptm"})
_XLSX = frozenset({".xlsx", ".xlsm"})

SUPPORTED_SUFFIXES: frozenset[str] = (
    _MARKDOWN | _HTML | frozenset(_CSV) | _PLAIN | _DOCX | _PPTX | _XLSX | frozenset({".epub", ".pdf"})
)


@dataclass(frozen=True)
class Section:
    text: str  # plain text of this part: paragraphs separated by blank lines
    page: int | None  # 1-based PDF page or PPTX slide; None where the format has no pages
    heading: str  # the heading path it sits under ("Install › Linux"), a sheet name, a chapter; "" if none


@dataclass(frozen=True)
class ParsedDocument:
    sections: list[Section]
    pages: int | None  # page or slide count where the format has pages, else None
    note: str | None = None  # what the user should know: nothing came out, or only part was read


class ParseError(Exception):
    """The file could not be read; str() is the reason in plain words for the user."""


class Unsupported(ParseError):
    """Not a type of file that is read (or a binary file with a text suffix)."""


class _Full(Exception):
    """The text cap was reached: reading stops and what came so far is kept."""


class _Stop(Exception):
    """An XML walk has all it wants (a row cap): the rest of the part is not read."""


def parse_file(path: Path) -> ParsedDocument:
    """Read `path` in this process, with every bound above (but no memory limit or timeout)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise Unsupported(f"{suffix} files are not read" if suffix else "files without a suffix are not read")
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ParseError("the file is missing") from None
    except OSError as exc:
        raise ParseError(f"the file could not be read ({exc.strerror or exc})") from None
    if not path.is_file():
        raise ParseError("not a regular file")
    cap = MAX_MARKUP_BYTES if suffix in _HTML else MAX_FILE_BYTES
    if st.st_size > cap:
        raise ParseError(f"the file is {fmt_bytes(st.st_size)}, over the {fmt_bytes(cap, 0)} read")
    b = _Builder()
    try:
        _reader_for(suffix)(path, b)
    except _Full:
        pass
    except OSError as exc:
        raise ParseError(f"the file could not be read ({exc.strerror or exc})") from None
    return b.result()


def _reader_for(suffix: str) -> Callable[[Path, _Builder], None]:
    if suffix in _MARKDOWN:
        return _read_markdown
    if suffix in _HTML:
        return _read_html
    if suffix in _CSV:
        return _read_csv
    if suffix in _DOCX:
        return _read_docx
    if suffix in _PPTX:
        return _read_pptx
    if suffix in _XLSX:
        return _read_xlsx
    if suffix == ".epub":
        return _read_epub
    if suffix == ".pdf":
        return _read_pdf
    return _read_plain


# --- Text: tidying and the section builder ---------------------------------------------------------------

_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufeff\r]")  # \r: newlines are \n by now, a lone \r is noise
_ASCII_BREAK = re.compile("[\x0b\x0c]")
_BREAK = re.compile("[\x0b\x0c\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one cannot be written as UTF-8 (the child's JSON)
_LONG_SPACE = re.compile(r"[^\S\n]{200,}")  # a run this long is layout, not indentation
_SPACE_LINE = re.compile(r"\n[^\S\n]+(?=\n)")  # linear: it can only start at a newline


def _squeeze(text: str) -> str:
    # str.replace runs at memchr speed: a million blank lines shrink in a few passes, before any regex.
    while "\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n").replace("\n\n\n", "\n\n")
    return text


def _clean(text: str) -> str:
    """Control characters dropped, blank lines (and lines of only spaces) collapsed to one blank line, very
    long runs of spaces to one space. About 20 ms a megabyte; each step is linear in the text."""
    if text.isprintable():  # no line breaks, controls or surrogates: most headings, cells and short lines
        return _LONG_SPACE.sub(" ", text) if " " * 200 in text else text
    text = _squeeze(text)
    if " " * 200 in text or "\t" * 200 in text:
        text = _LONG_SPACE.sub(" ", text)
    text = _CONTROL.sub("", text)
    if text.isascii():
        text = _ASCII_BREAK.sub("\n", text)
    else:
        text = _BREAK.sub("\n", text)
        text = _SURROGATE.sub("\ufffd", text)
    return _squeeze(_SPACE_LINE.sub("\n", text))


def _tidy(text: str) -> str:
    return _clean(text).rstrip().lstrip("\n")


def _one_line(text: str) -> str:
    return " ".join(_clean(text).split())


class _Builder:
    """Collects sections within MAX_TEXT_CHARS: `add` raises _Full once the cap is reached, having kept what
    fits, and the readers let that end their reading."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start again empty (after a wrong guess at the encoding, or a PDF found to have no text)."""
        self.pages: int | None = None
        self.notes: list[str] = []
        self.truncated = False
        self._sections: list[Section] = []
        self._parts: list[str] = []  # separator, text, separator, text ...
        self._heading = ""
        self._page: int | None = None
        self._stack: list[tuple[int, str]] = []
        self._used = 0

    @property
    def room(self) -> int:
        return MAX_TEXT_CHARS - self._used

    def section(self, heading: str = "", page: int | None = None) -> None:
        self._flush()
        self._heading, self._page = heading, page
        self._charge(len(heading) + 16)  # a section's own weight: its heading and the JSON around it

    def heading(self, level: int, title: str) -> None:
        """A heading of `level` (1 is the top): the sections after it sit under its path."""
        title = _one_line(title)
        if len(title) > MAX_HEADING_CHARS:
            title = title[: MAX_HEADING_CHARS - 1] + "…"
        if not title:
            return
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self.section(HEADING_SEPARATOR.join(t for _, t in self._stack), self._page)

    def reset_headings(self) -> None:
        self._stack.clear()

    def add(self, text: str, *, same_block: bool = False) -> None:
        """A paragraph (or, `same_block`, a line of the paragraph before: a table's next row)."""
        text = _tidy(text)
        if not text:
            return
        self._charge(len(text) + 2, text, same_block)

    def _charge(self, n: int, text: str = "", same_block: bool = False) -> None:
        if n > self.room:
            text = text[: max(0, self.room - 2)].rstrip()
            if text:
                self._parts += ["\n" if same_block else "\n\n", text]
            self._used = MAX_TEXT_CHARS
            self.truncated = True
            raise _Full
        self._used += n
        if text:
            self._parts += ["\n" if same_block else "\n\n", text]

    def _flush(self) -> None:
        if self._parts:
            self._sections.append(Section("".join(self._parts[1:]), self._page, self._heading))
            self._parts.clear()

    def result(self) -> ParsedDocument:
        self._flush()
        notes = list(self.notes)
        if self.truncated:
            notes.append(f"only the first {MAX_TEXT_CHARS:,} characters were read")
        if not self._sections and not notes:
            notes.append("no text in the file: nothing to index")
        return ParsedDocument(self._sections, self.pages, "; ".join(notes) or None)


# --- Plain text, Markdown, CSV ---------------------------------------------------------------------------


def _text_codec(path: Path) -> str:
    """The codec a text file is in, from its first 8 KB; Unsupported for a binary file."""
    with open(path, "rb") as f:
        head = f.read(8192)
    codec = _codec_from_head(head)
    if codec is None:
        raise Unsupported("a binary file")
    return codec


def _codec_from_head(head: bytes) -> str | None:
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # before UTF-16: FF FE starts both
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if b"\0" in head:
        # UTF-16 without a BOM: text in Latin script has a NUL in every other byte, and only there.
        even, odd = head[0::2], head[1::2]
        if len(head) >= 16:
            if odd.count(0) >= 0.9 * len(odd) and even.count(0) <= 0.1 * len(even):
                return "utf-16-le"
            if even.count(0) >= 0.9 * len(even) and odd.count(0) <= 0.1 * len(odd):
                return "utf-16-be"
        return None
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the end is fine
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _chunks(path: Path, codec: str) -> Iterator[str]:
    """The file decoded in chunks, newlines as \\n; UTF-8 strictly (the caller falls back to cp1252)."""
    errors = "strict" if codec.startswith("utf-8") else "replace"
    with open(path, encoding=codec, errors=errors, newline=None) as f:
        while chunk := f.read(_CHUNK_CHARS):
            yield chunk


def _collapsed(chunks: Iterable[str]) -> Iterator[str]:
    """`chunks` cleaned, with runs of blank lines (and of spaces) collapsed across chunk edges too, so a
    file of a billion blank lines costs one pass and yields almost nothing."""
    carry = ""
    for chunk in chunks:
        raw = carry + chunk
        kept = raw.rstrip()
        carry = raw[len(kept) :]  # trailing whitespace waits to merge with the next chunk's
        if len(carry) > 400:  # bounded, and still as many line breaks and as long a run as _clean keeps
            carry = "\n" * min(2, carry.count("\n")) + " " * 200
        if kept:
            yield _clean(kept)


def _read_text(path: Path, limit: int) -> tuple[str, bool]:
    """The whole file's cleaned text up to `limit` characters, and whether it was cut there."""
    codec = _text_codec(path)
    try:
        return _gather(_collapsed(_chunks(path, codec)), limit)
    except UnicodeDecodeError:
        return _gather(_collapsed(_chunks(path, "cp1252")), limit)  # not UTF-8 after all, past the head


def _gather(pieces: Iterable[str], limit: int) -> tuple[str, bool]:
    out: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > limit:
            out.append(piece[: limit - used])
            return "".join(out), True
        out.append(piece)
        used += len(piece)
    return "".join(out), False


def _read_plain(path: Path, b: _Builder) -> None:
    text, cut = _read_text(path, MAX_TEXT_CHARS)
    b.truncated = cut
    b.section("")
    b.add(text)


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")  # greedy, the closing #s stripped after: linear
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-*+>]|\d{1,9}[.)])(?:[ \t]|$)")  # a list item or quote: no setext
_MAX_HEADING_LINE = 1000  # longer lines are not tried as headings (and keep the regexes linear)


def _read_markdown(path: Path, b: _Builder) -> None:
    text, cut = _read_text(path, MAX_TEXT_CHARS)
    b.truncated = cut
    _markdown_into(text, b)


def _markdown_into(text: str, b: _Builder) -> None:
    """Headings (ATX `#` and setext underlines) start sections; fenced code is text whatever it holds."""
    lines = text.split("\n")
    body: list[str] = []
    start = 0
    if lines and lines[0].rstrip() == "---":  # YAML front matter: its closing --- is no setext underline
        end = next((i for i in range(1, min(len(lines), 1000)) if lines[i].rstrip() in ("---", "...")), 0)
        body.extend(lines[: end + 1])
        start = end + 1
    b.section("")
    fence: tuple[str, int] | None = None
    after_text = False  # the line before was paragraph text: a setext underline makes it a heading

    def flush() -> None:
        if body:
            b.add("\n".join(body))
            body.clear()

    for line in itertools.islice(lines, start, None):
        if fence is not None:
            body.append(line)
            m = _FENCE.fullmatch(line) if len(line) < _MAX_HEADING_LINE else None
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not m.group(2).strip():
                fence = None
            continue
        lead = line[:4].lstrip(" ")[:1]
        if lead and lead in "#`~=-" and len(line) < _MAX_HEADING_LINE:
            m = _FENCE.fullmatch(line)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = (m.group(1)[0], len(m.group(1)))
                body.append(line)
                after_text = False
                continue
            m = _ATX.fullmatch(line)
            if m:
                flush()
                b.heading(len(m.group(1)), _atx_title(m.group(2) or ""))
                after_text = False
                continue
            m = _SETEXT.fullmatch(line)
            if m and after_text:
                title = body.pop()
                flush()
                b.heading(1 if m.group(1)[0] == "=" else 2, title)
                after_text = False
                continue
        body.append(line)
        after_text = bool(line.strip()) and not _NOT_PARAGRAPH.match(line)
    flush()


def _atx_title(text: str) -> str:
    """An ATX heading's text without its closing #s ("Linux ##" → "Linux", but "C#" stays)."""
    text = text.rstrip()
    bare = text.rstrip("#")
    return bare.rstrip() if bare != text and (not bare or bare[-1] in " \t") else text


def _read_csv(path: Path, b: _Builder) -> None:
    codec = _text_codec(path)
    try:
        _csv_into(path, b, codec)
    except UnicodeDecodeError:
        b.reset()
        _csv_into(path, b, "cp1252")


def _csv_into(path: Path, b: _Builder, codec: str) -> None:
    pieces = _collapsed(_chunks(path, codec))
    first = next(pieces, "")
    delimiter = _CSV[path.suffix.lower()]
    head = first.split("\n", 1)[0]
    if delimiter == "," and head.count(";") > head.count(","):
        delimiter = ";"  # a spreadsheet in a locale whose decimal mark is the comma writes ;-separated CSV
    rows = csv.reader(_lines(itertools.chain([first], pieces)), delimiter=delimiter)
    header: list[str] | None = None
    group: list[str] = []
    group_start = 1
    row_no = 0

    def emit() -> None:
        nonlocal group_start
        if group:
            b.section(f"rows {group_start:,}–{row_no:,}")
            b.add("\n".join(group))
            group.clear()
        group_start = row_no + 1

    try:
        for row in rows:
            if header is None:
                if any(cell.strip() for cell in row):
                    header = [_cell(h)[:100] or f"column {i + 1}" for i, h in enumerate(row[:MAX_COLUMNS])]
                continue
            if row_no >= MAX_TABLE_ROWS:
                b.notes.append(f"only the first {MAX_TABLE_ROWS:,} rows were read")
                break
            row_no += 1
            pairs = []
            for i, value in enumerate(row[:MAX_COLUMNS]):
                value = _cell(value)
                if value:
                    pairs.append(f"{header[i] if i < len(header) else f'column {i + 1}'}: {value}")
            if pairs:
                group.append("; ".join(pairs)[:MAX_ROW_CHARS])
            if row_no % ROWS_PER_SECTION == 0:
                emit()
    except csv.Error as exc:
        if header is None:
            raise ParseError(f"not a readable CSV file ({exc})") from None
        b.notes.append(f"the file could not be read past row {row_no:,} ({exc})")
    emit()
    if header is not None and row_no == 0:
        b.section("")
        b.add(" | ".join(header))  # only a header row: its names are still words someone may search for


def _cell(value: str) -> str:
    return " ".join(value[: MAX_CELL_CHARS * 2].split())[:MAX_CELL_CHARS]


def _lines(pieces: Iterable[str]) -> Iterator[str]:
    """Lines (with their \\n) for csv, each at most MAX_LINE_CHARS: the rest of a longer line is dropped."""
    rest = ""
    skipping = False
    for piece in pieces:
        data = rest + piece
        start = 0
        while (nl := data.find("\n", start)) >= 0:
            if skipping:
                skipping = False
            elif nl - start > MAX_LINE_CHARS:
                yield data[start : start + MAX_LINE_CHARS] + "\n"
            else:
                yield data[start : nl + 1]
            start = nl + 1
        rest = data[start:]
        if len(rest) > MAX_LINE_CHARS:
            if not skipping:
                yield rest[:MAX_LINE_CHARS] + "\n"
                skipping = True
            rest = ""
    if rest and not skipping:
        yield rest


# --- HTML (and EPUB chapters) ----------------------------------------------------------------------------

_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "math", "select"})
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BLOCK_TAGS = frozenset(
    "p div section article header footer nav aside main blockquote pre ul ol dl table thead tbody tfoot "
    "figure figcaption hr form fieldset address details summary caption body html center".split()
)
_LINE_TAGS = frozenset({"br", "li", "tr", "dt", "dd", "option"})
_CELL_TAGS = frozenset({"td", "th"})
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")  # HTML's whitespace: a no-break space is not collapsed


def _read_html(path: Path, b: _Builder) -> None:
    text = _decode_markup(path.read_bytes())
    _HtmlReader(b).run(text)


def _decode_markup(data: bytes) -> str:
    """HTML's text: by its BOM, as UTF-8 if it is, else by its declared charset, else cp1252."""
    head = data[:8192]
    codec = _codec_from_head(head)
    if codec is None:
        raise Unsupported("a binary file")
    if codec in ("cp1252", "utf-8"):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            m = re.search(rb"""charset\s*=\s*["']?([A-Za-z0-9_.:-]{1,40})""", head, re.IGNORECASE)
            codec = "cp1252"
            if m:
                with contextlib.suppress(LookupError):
                    codec = codecs.lookup(m.group(1).decode("ascii")).name
    return data.decode(codec, errors="replace")


_TAG_OPEN = re.compile(r"<(/?)([A-Za-z][^\s/>]*)")
# The rest of a tag up to its ">", quoted attribute values allowed to hold ">". Possessive: a tag that
# never closes fails in one pass, with no backtracking.
_TAG_REST = re.compile(r"""(?:[^>"']++|"[^"]*+"|'[^']*+')*+>""")
_RAW_TEXT = frozenset({"script", "style", "title", "textarea"})  # their content is text, not markup
_RAW_END = {name: re.compile(rf"</{name}(?=[\s/>])", re.IGNORECASE) for name in _RAW_TEXT}


def _html_tokens(text: str) -> Iterator[tuple[str, str]]:
    """("start" | "end" | "data", tag name or text) for an HTML document, in one linear pass: each search
    either moves past what it found or ends the document (a "<" with no ">" after it anywhere cannot open
    a tag, so the rest is text). Attributes are not read. Data is unescaped."""
    i = data_from = 0
    n = len(text)
    quotes_ok = True  # cleared after a tag whose quotes never close: from then on a tag ends at its first ">"
    while (lt := text.find("<", i)) >= 0:
        m = _TAG_OPEN.match(text, lt)
        if m is None and not text.startswith(("<!", "<?"), lt):
            i = lt + 1  # a lone "<" is text: it stays in the data run
            continue
        if lt > data_from:
            yield "data", unescape(text[data_from:lt])
        if m is None:
            if text.startswith("<!--", lt):
                end, skip = text.find("-->", lt + 4), 3
            elif text.startswith("<![CDATA[", lt):
                end, skip = text.find("]]>", lt + 9), 3
                yield "data", text[lt + 9 : n if end < 0 else end]
            else:  # a doctype or processing instruction
                end, skip = text.find(">", lt + 2), 1
            if end < 0:
                return  # unclosed: it runs to the end
            i = data_from = end + skip
            continue
        rest = _TAG_REST.match(text, m.end()) if quotes_ok else None
        if rest is not None:
            gt = rest.end() - 1
        else:
            gt = text.find(">", m.end())
            if gt < 0:
                data_from = lt
                break  # no ">" anywhere after: no tag can close, the rest is text
            quotes_ok = False
        name = m.group(2).lower()
        i = data_from = gt + 1
        if m.group(1):
            yield "end", name
            continue
        yield "start", name
        if text[gt - 1] == "/" and gt > m.end():
            yield "end", name  # <p/>, <br/>
        elif name in _RAW_TEXT:
            close = _RAW_END[name].search(text, i)
            stop = n if close is None else close.start()
            raw = text[i:stop]
            yield "data", raw if name in ("script", "style") else unescape(raw)
            yield "end", name
            gt = -1 if close is None else text.find(">", close.end())
            i = data_from = n if gt < 0 else gt + 1
    if data_from < n:
        yield "data", unescape(text[data_from:])


class _HtmlReader:
    """Text of an HTML document: scripts, styles and the like dropped, block elements breaking paragraphs,
    h1–h6 starting sections under their heading path, and the <title> as the heading of text before any."""

    def __init__(self, b: _Builder) -> None:
        self._b = b
        self._skip = 0
        self._pre = 0
        self._title: list[str] | None = None
        self.title = ""
        self._heading: tuple[int, list[str]] | None = None
        self._caption_len = 0  # of the title or heading being read: capped, however many pieces it comes in
        self._para: list[str] = []
        self._para_len = 0
        self._had_pre = False
        self._line_has_text = False
        self._started = False

    def run(self, text: str) -> None:
        self._b.reset_headings()
        for kind, value in _html_tokens(text):
            if kind == "data":
                self.handle_data(value)
            elif kind == "start":
                self.handle_starttag(value)
            else:
                self.handle_endtag(value)
        self._end_heading()
        self._flush()

    def handle_starttag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
            return
        if self._skip:
            return
        if tag == "title":
            self._title = []
            self._caption_len = 0
        elif tag in _HEADINGS:
            self._end_heading()
            self._flush()
            self._heading = (int(tag[1]), [])
            self._caption_len = 0
        elif tag in _BLOCK_TAGS:
            self._end_heading()
            self._flush()
            if tag == "pre":
                self._pre += 1
        elif tag in _LINE_TAGS:
            self._newline(force=tag == "br")
        elif tag in _CELL_TAGS and self._line_has_text:
            self._append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag == "title" and self._title is not None:
            self.title = _one_line("".join(self._title))[:MAX_HEADING_CHARS]
            self._title = None
        elif tag in _HEADINGS:
            self._end_heading()
        elif tag in _BLOCK_TAGS:
            self._flush()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)
        elif tag in _LINE_TAGS:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        caption = self._title if self._title is not None else self._heading[1] if self._heading else None
        if caption is not None:
            if self._caption_len < MAX_HEADING_CHARS * 2:
                caption.append(data[: MAX_HEADING_CHARS * 2])
                self._caption_len += len(data)
        elif self._pre:
            self._had_pre = True
            self._append(data)
        else:
            self._append(_HTML_SPACE.sub(" ", data))

    def _append(self, text: str) -> None:
        if not text:
            return
        self._para.append(text)
        self._para_len += len(text)
        if not text.isspace():
            self._line_has_text = True
        if self._para_len > self._b.room:
            self._flush()  # a paragraph over what is left: the builder keeps what fits and stops the read

    def _newline(self, force: bool = False) -> None:
        """End the line: a <br> always (two make a blank line, a paragraph break in old HTML), a list item
        or table row only after text, so the markup's own whitespace adds no blank lines."""
        if self._para and (force or self._line_has_text):
            self._para.append("\n")
        self._line_has_text = False

    def _end_heading(self) -> None:
        if self._heading is not None:
            level, parts = self._heading
            self._heading = None
            title = "".join(parts)
            if title.strip():
                self._started = True
                self._b.heading(level, title)

    def _flush(self) -> None:
        self._line_has_text = False
        if not self._para:
            return
        text = "".join(self._para)
        self._para.clear()
        self._para_len = 0
        if not self._had_pre:
            text = "\n".join(line.strip() for line in text.split("\n"))
        self._had_pre = False
        if not text.strip():
            return
        if not self._started:
            self._started = True
            self._b.section(self.title)
        self._b.add(text)


# --- Zip containers and their XML ------------------------------------------------------------------------

_CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # OLE compound file: an encrypted Office file, or a .doc


class _Zip:
    """A zip read without trusting it: the directory's size is checked before zipfile parses it, each part's
    declared size and packing ratio before it is unpacked, and the bytes actually unpacked as they come.
    Part names are only ever keys here, never paths on disk."""

    def __init__(self, path: Path, what: str) -> None:
        with open(path, "rb") as f:
            magic = f.read(8)
        if magic == _CFB_MAGIC:
            raise ParseError("the file is password-protected (or an older Office format under a new name)")
        if not magic.startswith(b"PK"):
            raise ParseError(f"not a valid {what} file (it is not a zip)")
        entries, directory = _zip_directory(path)
        # zipfile builds an object for each entry of the directory (whatever the count says): bound both.
        if entries > MAX_ZIP_MEMBERS or directory > MAX_ZIP_MEMBERS * 1024:
            raise ParseError(f"the file holds too many parts (over the {MAX_ZIP_MEMBERS:,} read)")
        try:
            self._zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, zlib.error, ValueError, EOFError, struct.error) as exc:
            raise ParseError(f"not a valid {what} file ({exc})") from None
        infos = self._zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            self._zf.close()
            raise ParseError(f"the file holds {len(infos):,} parts, over the {MAX_ZIP_MEMBERS:,} read")
        self._infos = {info.filename: info for info in infos}
        self._unpacked = 0  # bytes admitted for unpacking so far, all parts together

    def close(self) -> None:
        self._zf.close()

    def __enter__(self) -> _Zip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def names(self) -> list[str]:
        return list(self._infos)

    def has(self, name: str) -> bool:
        return name in self._infos

    def read(self, name: str) -> bytes:
        return b"".join(self.chunks(name))

    def chunks(self, name: str) -> Iterator[bytes]:
        info = self._infos[name]
        self._admit(info)
        got = 0
        try:
            with self._zf.open(info) as f:
                while chunk := f.read(_CHUNK_BYTES):
                    got += len(chunk)
                    if got > info.file_size:  # zipfile stops at the declared size too; a second lock
                        raise ParseError(f"a part of the file ({_short(name)}) unpacks to more than it declares")
                    yield chunk
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
            raise ParseError(f"the file is damaged ({_short(name)}: {exc})") from None
        except NotImplementedError:
            raise ParseError("the file uses a zip compression method that is not read") from None
        except RuntimeError as exc:  # zipfile's "password required" among others
            raise ParseError(f"the file could not be unpacked ({exc})") from None

    def _admit(self, info: zipfile.ZipInfo) -> None:
        """Refuse a part before unpacking it, by what the zip declares."""
        name = _short(info.filename)
        if info.flag_bits & 0x1:
            raise ParseError("the file is encrypted")
        if info.file_size > MAX_UNPACKED_BYTES:
            raise ParseError(
                f"a part of the file ({name}) would unpack to {fmt_bytes(info.file_size)}, "
                f"over the {fmt_bytes(MAX_UNPACKED_BYTES, 0)} allowed"
            )
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_PACKING_RATIO * max(info.compress_size, 1):
            ratio = info.file_size / max(info.compress_size, 1)
            raise ParseError(f"a part of the file ({name}) is packed {ratio:,.0f} to 1: a zip bomb")
        if self._unpacked + info.file_size > MAX_UNPACKED_BYTES:
            raise ParseError(
                f"the parts of the file would unpack to over the {fmt_bytes(MAX_UNPACKED_BYTES, 0)} allowed"
            )
        self._unpacked += info.file_size  # declared: reading never gets more (chunks checks)


def _short(name: str) -> str:
    return name if len(name) <= 80 else name[:79] + "…"


def _zip_directory(path: Path) -> tuple[int, int]:
    """The number of parts and the size of the directory that the zip's end record declares (zip64 too),
    read before zipfile parses the directory; (0, 0) where there is no end record (zipfile then says what
    is wrong)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        tail_len = min(size, 65535 + 22)
        f.seek(size - tail_len)
        tail = f.read(tail_len)
        pos = tail.rfind(b"PK\x05\x06")
        if pos < 0 or len(tail) - pos < 22:
            return 0, 0
        entries, cd_size = struct.unpack_from("<HI", tail, pos + 10)
        if entries == 0xFFFF or cd_size == 0xFFFFFFFF:
            loc = pos - 20
            if loc >= 0 and tail[loc : loc + 4] == b"PK\x06\x07":
                (offset,) = struct.unpack_from("<Q", tail, loc + 8)
                if offset < size:
                    f.seek(offset)
                    record = f.read(56)
                    if len(record) == 56 and record[:4] == b"PK\x06\x06":
                        entries, cd_size = struct.unpack_from("<QQ", record, 32)
        return entries, cd_size


class _Xml:
    """Receives an XML part's events by local name (namespaces dropped: OOXML's strict and transitional
    namespaces then read alike), attributes too except a relationship's, which keep an "r:" (a slide's
    `id` and `r:id` are different things). `skip` names elements whose whole content is ignored."""

    skip: frozenset[str] = frozenset()

    def start(self, name: str, attrs: dict[str, str]) -> None:
        pass

    def end(self, name: str) -> None:
        pass

    def text(self, data: str) -> None:
        pass


# mc:Fallback repeats its mc:Choice (a text box as DrawingML and again as VML): read it once.
_ALWAYS_SKIP = frozenset({"Fallback"})


def _attr_name(name: str) -> str:
    space, _, local = name.rpartition(" ")
    return "r:" + local if space.endswith("relationships") else local


def _refuse_entities(*_args: object) -> None:
    raise ParseError("the file declares XML entities, which are not read")


def _walk_xml(zf: _Zip, name: str, handler: _Xml) -> None:
    """Stream part `name` through expat into `handler`. A DOCTYPE (and so any entity declaration: billion
    laughs, external entities) is refused the moment expat meets it, whatever the part's encoding."""
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse_entities
    parser.EntityDeclHandler = _refuse_entities
    skip = _ALWAYS_SKIP | handler.skip
    depth = 0  # inside a skipped element

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal depth
        local = tag.rpartition(" ")[2]
        if depth or local in skip:
            depth += 1
            return
        handler.start(local, {_attr_name(k): v for k, v in attrs.items()} if attrs else {})

    def end(tag: str) -> None:
        nonlocal depth
        if depth:
            depth -= 1
            return
        handler.end(tag.rpartition(" ")[2])

    def text(data: str) -> None:
        if not depth:
            handler.text(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        for chunk in zf.chunks(name):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except _Stop:
        pass
    except expat.ExpatError as exc:
        raise ParseError(f"the file is damaged ({_short(name)}: {expat.ErrorString(exc.code)})") from None


class _Rels(_Xml):
    def __init__(self) -> None:
        self.rels: dict[str, tuple[str, str, bool]] = {}  # id → (type, target, external)

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "Relationship" and "Id" in attrs:
            external = attrs.get("TargetMode", "") == "External"
            self.rels[attrs["Id"]] = (attrs.get("Type", ""), attrs.get("Target", ""), external)


def _rels(zf: _Zip, part: str) -> dict[str, tuple[str, str]]:
    """Part `part`'s relationships: id → (type, the target's part name)."""
    folder, base = posixpath.split(part)
    name = posixpath.join(folder, "_rels", base + ".rels")
    if not zf.has(name):
        return {}
    handler = _Rels()
    _walk_xml(zf, name, handler)
    out = {}
    for rid, (kind, target, external) in handler.rels.items():
        if external or not target:
            continue
        target = unquote(target)
        resolved = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
        out[rid] = (kind, resolved)
    return out


def _main_part(zf: _Zip, default: str) -> str:
    for kind, target in _rels(zf, "").values():
        if kind.endswith("/officeDocument") and zf.has(target):
            return target
    return default


def _numbered(zf: _Zip, pattern: str) -> list[str]:
    """Parts named like `pattern` (a regex with one number group), in numeric order."""
    found = [(int(m.group(1)), n) for n in zf.names() if (m := re.fullmatch(pattern, n))]
    return [n for _, n in sorted(found)]


# --- DOCX ------------------------------------------------------------------------------------------------


def _read_docx(path: Path, b: _Builder) -> None:
    with _Zip(path, "Word") as zf:
        main = _main_part(zf, "word/document.xml")
        if not zf.has(main):
            raise ParseError("not a valid Word file (it has no document part)")
        rels = _rels(zf, main)
        styles_part = next((t for k, t in rels.values() if k.endswith("/styles")), "word/styles.xml")
        styles = _DocxStyles()
        if zf.has(styles_part):
            _walk_xml(zf, styles_part, styles)
        b.section("")
        _walk_xml(zf, main, _DocxBody(b, styles.levels()))


_HEADING_NAME = re.compile(r"heading\s*([1-9])", re.IGNORECASE)


def _style_level(style_id: str, name: str) -> int | None:
    for label in (name, style_id):
        if label.strip().lower() == "title":
            return 1  # the document's title heads the text before the first Heading 1, which then replaces it
        if m := _HEADING_NAME.fullmatch(label.strip()):
            return int(m.group(1))
    return None


class _DocxStyles(_Xml):
    """Which paragraph styles are headings, and of what level: by the style's name ("heading 1", the same
    in every language, where the style id is localised: "berschrift1"), its outline level, or the style it
    is based on."""

    def __init__(self) -> None:
        self._styles: dict[str, tuple[int | None, str]] = {}  # id → (own level, based on)
        self._id: str | None = None
        self._name = ""
        self._outline: int | None = None
        self._based = ""

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "style":
            self._id = attrs.get("styleId") if attrs.get("type", "paragraph") == "paragraph" else None
            self._name, self._outline, self._based = "", None, ""
        elif self._id is not None:
            if name == "name":
                self._name = attrs.get("val", "")
            elif name == "basedOn":
                self._based = attrs.get("val", "")
            elif name == "outlineLvl":
                self._outline = _outline_level(attrs.get("val", ""))

    def end(self, name: str) -> None:
        if name == "style" and self._id is not None:
            level = _style_level(self._id, self._name)
            self._styles[self._id] = (level if level is not None else self._outline, self._based)
            self._id = None

    def levels(self) -> dict[str, int]:
        out = {}
        for sid in self._styles:
            seen, cur = 0, sid
            while cur in self._styles and seen < 16:
                level, based = self._styles[cur]
                if level is not None:
                    out[sid] = level
                    break
                cur, seen = based, seen + 1
        return out


def _outline_level(val: str) -> int | None:
    try:
        level = int(val)
    except ValueError:
        return None
    return level + 1 if 0 <= level < 9 else None  # 9 is body text


class _DocxBody(_Xml):
    """Paragraphs of word/document.xml: text from w:t (w:tab a tab, w:br a newline), heading paragraphs
    starting sections, tables as rows of cells joined by " | " (a nested table's rows inside its cell)."""

    # Tracked changes' old formatting and moved-away text: not the document as it reads now.
    # w:tabs holds tab stops (w:tab elements too), not tabs in the text.
    skip = frozenset({"pPrChange", "rPrChange", "moveFrom", "del", "tabs"})

    def __init__(self, b: _Builder, styles: dict[str, int]) -> None:
        self._b = b
        self._styles = styles
        self._paras: list[list[Any]] = []  # [parts, length, level]; nested: a text box inside a paragraph
        self._in_text = False
        self._tables: list[list[Any]] = []  # [row cells, cell paragraphs, no row written yet]

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "p":
            self._paras.append([[], 0, None])
        elif not self._paras and name not in ("tbl", "tr", "tc"):
            return
        elif name == "t":
            self._in_text = True
        elif name == "tab" and self._paras:
            self._put("\t")
        elif name in ("br", "cr") and self._paras:
            self._put("\n")
        elif name == "pStyle" and self._paras:
            level = self._styles.get(attrs.get("val", ""))
            if level is None:
                level = _style_level(attrs.get("val", ""), "")
            if level is not None and self._paras[-1][2] is None:
                self._paras[-1][2] = level
        elif name == "outlineLvl" and self._paras:
            self._paras[-1][2] = _outline_level(attrs.get("val", ""))
        elif name == "tbl":
            self._tables.append([[], [], True])
        elif name == "tr" and self._tables:
            self._tables[-1][0] = []
        elif name == "tc" and self._tables:
            self._tables[-1][1] = []

    def text(self, data: str) -> None:
        if self._in_text and self._paras:
            self._put(data)

    def _put(self, text: str) -> None:
        para = self._paras[-1]
        para[0].append(text)
        para[1] += len(text)
        if para[1] > self._b.room + 2:
            # Over what is left: the builder keeps what fits and stops the read (or the tidied text fitted).
            self._b.add("".join(para[0]))
            para[0], para[1] = [], 0

    def end(self, name: str) -> None:
        if name == "t":
            self._in_text = False
        elif name == "p" and self._paras:
            parts, _, level = self._paras.pop()
            text = "".join(parts)
            if self._tables:
                self._tables[-1][1].append(_one_line(text))
            elif level is not None and text.strip() and len(text) <= MAX_HEADING_CHARS * 2:
                self._b.heading(level, text)
            else:
                self._b.add(text)
        elif name == "tc" and self._tables:
            table = self._tables[-1]
            table[0].append(" ".join(p for p in table[1] if p))
            table[1] = []
        elif name == "tr" and self._tables:
            cells = self._tables[-1][0]
            line = " | ".join(cells).strip(" |")
            self._tables[-1][0] = []
            if not line:
                return
            if len(self._tables) > 1:
                self._tables[-2][1].append(line)  # a nested table's row reads inside its outer cell
            else:
                self._b.add(line[:MAX_ROW_CHARS], same_block=not self._tables[-1][2])
                self._tables[-1][2] = False
        elif name == "tbl" and self._tables:
            self._tables.pop()


# --- PPTX ------------------------------------------------------------------------------------------------

_TITLE_PLACEHOLDERS = frozenset({"title", "ctrTitle"})
# Slide numbers, dates, footers and the notes page's picture of the slide: furniture, not content.
_FURNITURE_PLACEHOLDERS = frozenset({"sldNum", "dt", "ftr", "hdr", "sldImg"})


def _read_pptx(path: Path, b: _Builder) -> None:
    with _Zip(path, "PowerPoint") as zf:
        main = _main_part(zf, "ppt/presentation.xml")
        slides = _pptx_slide_order(zf, main)
        b.pages = len(slides)
        for number, slide in enumerate(slides, 1):
            text = _SlideText()
            _walk_xml(zf, slide, text)
            notes = _SlideText()
            for kind, target in _rels(zf, slide).values():
                if kind.endswith("/notesSlide") and zf.has(target):
                    _walk_xml(zf, target, notes)
                    break
            b.section(text.title, number)
            for block in text.blocks:
                b.add(block)
            notes_text = "\n".join(notes.blocks).strip()
            if notes_text:
                b.add("Notes: " + notes_text)


class _SlideIds(_Xml):
    def __init__(self) -> None:
        self.ids: list[str] = []

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "sldId" and "r:id" in attrs:
            self.ids.append(attrs["r:id"])


def _pptx_slide_order(zf: _Zip, main: str) -> list[str]:
    """The slides in the order the presentation shows them, else by their part numbers."""
    if zf.has(main):
        ids = _SlideIds()
        _walk_xml(zf, main, ids)
        rels = _rels(zf, main)
        order = [rels[i][1] for i in ids.ids if i in rels and zf.has(rels[i][1])]
        if order:
            return list(dict.fromkeys(order))
    return _numbered(zf, r"ppt/slides/slide(\d+)\.xml")


class _SlideText(_Xml):
    """A slide's (or notes page's) text: the title placeholder's text, and each other shape's paragraphs
    as a block; tables as rows of cells joined by " | "."""

    def __init__(self) -> None:
        self.title = ""
        self.blocks: list[str] = []
        self._shapes: list[list[Any]] = []  # [placeholder type, lines]
        self._para: list[str] | None = None
        self._in_text = False
        self._table: list[str] | None = None  # rows so far
        self._row: list[str] = []
        self._cell: list[str] | None = None
        self._size = 0

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "sp":
            self._shapes.append([None, []])
        elif name == "ph" and self._shapes:
            self._shapes[-1][0] = attrs.get("type", "body")
        elif name == "p":
            self._para = []
        elif name == "t":
            self._in_text = True
        elif name == "br" and self._para is not None:
            self._para.append("\n")
        elif name == "tbl":
            self._table = []
        elif name == "tr":
            self._row = []
        elif name == "tc":
            self._cell = []

    def text(self, data: str) -> None:
        if self._in_text and self._para is not None and self._size < MAX_TEXT_CHARS:
            self._para.append(data)
            self._size += len(data)

    def end(self, name: str) -> None:
        if name == "t":
            self._in_text = False
        elif name == "p" and self._para is not None:
            line = "".join(self._para).strip()
            self._para = None
            if not line:
                return
            if self._cell is not None:
                self._cell.append(line)
            elif self._shapes:
                self._shapes[-1][1].append(line)
            else:
                self.blocks.append(line)
        elif name == "tc" and self._cell is not None:
            self._row.append(_one_line(" ".join(self._cell)))
            self._cell = None
        elif name == "tr" and self._table is not None:
            line = " | ".join(self._row).strip(" |")
            if line:
                self._table.append(line[:MAX_ROW_CHARS])
            self._row = []
        elif name == "tbl" and self._table is not None:
            if self._table:
                self.blocks.append("\n".join(self._table))
            self._table = None
        elif name == "sp" and self._shapes:
            kind, lines = self._shapes.pop()
            if not lines or kind in _FURNITURE_PLACEHOLDERS:
                return
            if kind in _TITLE_PLACEHOLDERS and not self.title:
                self.title = _one_line(" ".join(lines))[:MAX_HEADING_CHARS]
            else:
                self.blocks.append("\n".join(lines))


# --- XLSX ------------------------------------------------------------------------------------------------


def _read_xlsx(path: Path, b: _Builder) -> None:
    with _Zip(path, "Excel") as zf:
        main = _main_part(zf, "xl/workbook.xml")
        rels = _rels(zf, main)
        shared_part = next((t for k, t in rels.values() if k.endswith("/sharedStrings")), "xl/sharedStrings.xml")
        shared = _SharedStrings()
        if zf.has(shared_part):
            _walk_xml(zf, shared_part, shared)
            if shared.cut:
                b.notes.append("only part of the workbook's text table was read")
        sheets: list[tuple[str, str]] = []
        if zf.has(main):
            book = _Workbook()
            _walk_xml(zf, main, book)
            for sheet_name, rid in book.sheets:
                kind, target = rels.get(rid, ("", ""))
                if kind.endswith("/worksheet") and zf.has(target):
                    sheets.append((sheet_name, target))
        if not sheets:
            found = _numbered(zf, r"xl/worksheets/sheet(\d+)\.xml")
            sheets = [(f"Sheet{i}", part) for i, part in enumerate(found, 1)]
        for sheet_name, part in sheets:
            heading = _one_line(sheet_name)[:MAX_HEADING_CHARS]
            b.section(heading)
            rows = _SheetRows(b, shared.strings)
            _walk_xml(zf, part, rows)
            if rows.cut:
                b.notes.append(f"only the first {MAX_TABLE_ROWS:,} rows of {heading} were read")


class _Workbook(_Xml):
    def __init__(self) -> None:
        self.sheets: list[tuple[str, str]] = []  # (name, relationship id)

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "sheet":
            self.sheets.append((attrs.get("name", ""), attrs.get("r:id", "")))


class _SharedStrings(_Xml):
    """The workbook's string table (a cell of type "s" holds an index into it); phonetic guides skipped."""

    skip = frozenset({"rPh"})

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.cut = False
        self._parts: list[str] | None = None
        self._in_text = False
        self._size = 0

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "si":
            self._parts = []
        elif name == "t":
            self._in_text = True

    def text(self, data: str) -> None:
        if self._in_text and self._parts is not None:
            self._parts.append(data)

    def end(self, name: str) -> None:
        if name == "t":
            self._in_text = False
        elif name == "si" and self._parts is not None:
            value = _cell("".join(self._parts))
            self._parts = None
            self._size += len(value)
            if len(self.strings) >= MAX_SHARED_STRINGS or self._size > MAX_TEXT_CHARS:
                self.cut = True
                raise _Stop
            self.strings.append(value)


def _column(ref: str) -> int | None:
    """0-based column of a cell reference ("C7" → 2)."""
    n = 0
    for ch in ref:
        if "A" <= ch <= "Z":
            n = n * 26 + ord(ch) - 64
        else:
            break
    return n - 1 if n else None


class _SheetRows(_Xml):
    """A worksheet's rows, each its non-empty cells' values joined by " | " (gaps kept as empty cells, so
    columns line up): strings from the table or inline, numbers and formulas' results as written."""

    skip = frozenset({"rPh", "f", "extLst"})

    def __init__(self, b: _Builder, shared: list[str]) -> None:
        self._b = b
        self._shared = shared
        self._rows = 0
        self.cut = False
        self._cells: dict[int, str] = {}
        self._next_col = 0
        self._col: int | None = None
        self._type = ""
        self._value: list[str] | None = None
        self._size = 0
        self._first = True

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "row":
            self._cells = {}
            self._next_col = 0
        elif name == "c":
            col = _column(attrs.get("r", ""))
            self._col = self._next_col if col is None else col
            self._next_col = self._col + 1
            self._type = attrs.get("t", "n")
            self._value = []
            self._size = 0

    def text(self, data: str) -> None:
        if self._value is not None and self._size < MAX_CELL_CHARS:
            self._value.append(data)
            self._size += len(data)

    def end(self, name: str) -> None:
        if name == "c" and self._value is not None and self._col is not None:
            raw = "".join(self._value)
            self._value = None
            if self._col >= MAX_COLUMNS:
                return
            if self._type == "s":
                try:
                    raw = self._shared[int(raw)]
                except (ValueError, IndexError):
                    raw = ""
            elif self._type == "b":
                raw = {"1": "TRUE", "0": "FALSE"}.get(raw.strip(), raw)
            value = _cell(raw)
            if value:
                self._cells[self._col] = value
        elif name == "row":
            self._rows += 1
            if self._cells:
                width = max(self._cells) + 1
                line = " | ".join(self._cells.get(i, "") for i in range(width))
                self._b.add(line[:MAX_ROW_CHARS], same_block=not self._first)
                self._first = False
            if self._rows >= MAX_TABLE_ROWS:
                self.cut = True
                raise _Stop


# --- EPUB ------------------------------------------------------------------------------------------------

# Font obfuscation (IDPF, Adobe) "encrypts" only fonts; any other algorithm on a chapter is DRM.
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
_HTML_TYPES = frozenset({"application/xhtml+xml", "text/html"})


def _read_epub(path: Path, b: _Builder) -> None:
    with _Zip(path, "EPUB") as zf:
        container = _Container()
        if zf.has("META-INF/container.xml"):
            _walk_xml(zf, "META-INF/container.xml", container)
        chapters: list[str] = []
        opf = container.rootfile
        if opf and zf.has(opf):
            package = _Package()
            _walk_xml(zf, opf, package)
            folder = posixpath.dirname(opf)
            for idref in package.spine:
                href, media = package.manifest.get(idref, ("", ""))
                part = posixpath.normpath(posixpath.join(folder, unquote(href.split("#", 1)[0]))) if href else ""
                if part and zf.has(part) and (media in _HTML_TYPES or part.lower().endswith(tuple(_HTML))):
                    chapters.append(part)
        if not chapters:  # no readable spine: every XHTML part, by name
            chapters = sorted(n for n in zf.names() if n.lower().endswith(tuple(_HTML)))
        if zf.has("META-INF/encryption.xml"):
            encryption = _Encryption()
            _walk_xml(zf, "META-INF/encryption.xml", encryption)
            if encryption.encrypted & set(chapters):
                raise ParseError("the book is DRM-protected")
        for part in dict.fromkeys(chapters):
            try:
                text = _decode_markup(zf.read(part))
            except Unsupported:
                continue  # a binary part in the spine: the chapters around it still read
            _HtmlReader(b).run(text)


class _Container(_Xml):
    def __init__(self) -> None:
        self.rootfile = ""

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "rootfile" and not self.rootfile:
            media = attrs.get("media-type", "application/oebps-package+xml")
            if media == "application/oebps-package+xml":
                self.rootfile = unquote(attrs.get("full-path", "")).lstrip("/")


class _Package(_Xml):
    def __init__(self) -> None:
        self.manifest: dict[str, tuple[str, str]] = {}  # id → (href, media type)
        self.spine: list[str] = []

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "item" and "id" in attrs:
            self.manifest[attrs["id"]] = (attrs.get("href", ""), attrs.get("media-type", ""))
        elif name == "itemref" and "idref" in attrs:
            self.spine.append(attrs["idref"])


class _Encryption(_Xml):
    def __init__(self) -> None:
        self.encrypted: set[str] = set()
        self._algorithm = ""

    def start(self, name: str, attrs: dict[str, str]) -> None:
        if name == "EncryptedData":
            self._algorithm = ""
        elif name == "EncryptionMethod":
            self._algorithm = attrs.get("Algorithm", "")
        elif name == "CipherReference" and self._algorithm not in _FONT_OBFUSCATION:
            self.encrypted.add(posixpath.normpath(unquote(attrs.get("URI", "")).lstrip("/")))


# --- PDF -------------------------------------------------------------------------------------------------


def _read_pdf(path: Path, b: _Builder) -> None:
    import pypdf  # imported when first used: the app starts without it
    from pypdf.errors import DependencyError

    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except DependencyError:
                raise ParseError("the PDF is encrypted in a way that is not read") from None
            if not opened:
                raise ParseError("the PDF is password-protected")
        total = len(reader.pages)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:  # pypdf raises many kinds (KeyError, ValueError, its own) on a damaged file
        raise ParseError(f"not a readable PDF ({short_reason(exc)})") from None
    b.pages = total
    if total > MAX_PDF_PAGES:
        b.notes.append(f"only the first {MAX_PDF_PAGES:,} of {total:,} pages were read")
    visible = failed = 0
    first_error = ""
    read = min(total, MAX_PDF_PAGES)
    for number in range(1, read + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except MemoryError:
            raise
        except Exception as exc:  # one damaged page leaves the rest readable
            logger.debug("page %d of %s unreadable: %s", number, path.name, exc)
            failed += 1
            first_error = first_error or short_reason(exc)
            continue
        text = _tidy(text)
        visible += len(text) - text.count(" ") - text.count("\n")
        if text:
            b.section("", number)
            b.add(text)
    if read and failed == read:
        raise ParseError(f"the PDF's pages could not be read ({first_error})")
    if failed:
        b.notes.append(f"{failed:,} of {read:,} pages could not be read")
    if read and visible < SCANNED_CHARS_PER_PAGE * (read - failed):
        b.reset()
        b.pages = total
        b.notes.append("no text layer (a scanned PDF?): nothing to index")


def short_reason(exc: BaseException) -> str:
    """An exception in a line a user can read (at most 160 characters)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:159] + "…"
