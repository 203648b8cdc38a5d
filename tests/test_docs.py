"""The docs in docs/ stay true to the code: every threat the code and tests cite has its entry in
docs/security.md, the threat numbers run without gaps, and every repository path the docs name in backticks
still exists (with `path::name`, that file still defines `name`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECURITY = ROOT / "docs" / "security.md"
FIRST_THREATS = 31  # T1–T31: later issues add T32 and on, never fewer

# A list of threats: "T5", "T1, T2, T4", "T15–T19", "T6/T7", "T13 and T14".
T_LIST = r"T\d+\b(?:\s*(?:,|–|-|/|and)\s*T\d+\b)*"
# "security.md T5 …": how the code cites the document by name.
BY_NAME = re.compile(rf"security\.md\s+({T_LIST})")
# The shorter forms: "(T26)", "(security T6)", '"""T23: …', "# ---- T15: …". Not a bare "T4" (a Tesla T4).
SHORT = re.compile(rf"(?:security\s+|\(|\"\"\"|#\s*-+\s*)({T_LIST})")
TEST_NAME = re.compile(r"\bdef test_t(\d+)_")
HEADING = re.compile(r"^### T(\d+)\b", re.MULTILINE)

# What a path in backticks may start with; anything else in backticks (flags, names, code) is not checked.
REPO_DIRS = ("app", "tests", "bench", "docs", "installers", "resources", "scripts")
REPO_PATH = re.compile(rf"^(?:{'|'.join(REPO_DIRS)})/[\w./-]*(?:::\w+)?$")
TOP_FILES = {"pyproject.toml", "Makefile", "README.md"}
MODULE = re.compile(r"^app(?:\.\w+)+$")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")


def threat_numbers(cited: str) -> set[int]:
    """A threat list as numbers: "T15–T19" → 15..19; "T1, T2, T4" → 1, 2, 4."""
    numbers: set[int] = set()
    parts = re.findall(r"T(\d+)|(–|-)", cited)
    previous, pending_range = None, False
    for digits, dash in parts:
        if dash:
            pending_range = previous is not None
            continue
        n = int(digits)
        if pending_range and previous is not None and previous < n:
            numbers.update(range(previous, n + 1))
        numbers.add(n)
        previous, pending_range = n, False
    return numbers


def sources() -> list[Path]:
    this = Path(__file__).resolve()
    return [p for d in ("app", "tests") for p in sorted((ROOT / d).rglob("*.py")) if p.resolve() != this]


def citations(pattern: re.Pattern[str]) -> dict[int, list[str]]:
    """Threat number → where it is cited ("path:line")."""
    found: dict[int, list[str]] = {}
    for path in sources():
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in pattern.finditer(line):
                cited = match.group(1)  # a threat list, or a test name's number alone
                for n in {int(cited)} if cited.isdigit() else threat_numbers(cited):
                    found.setdefault(n, []).append(f"{path.relative_to(ROOT)}:{lineno}")
    return found


def documented() -> list[int]:
    return [int(n) for n in HEADING.findall(SECURITY.read_text(encoding="utf-8"))]


def test_threat_lists_are_read_with_their_ranges():
    assert threat_numbers("T15–T19") == {15, 16, 17, 18, 19}
    assert threat_numbers("T1, T2, T4") == {1, 2, 4}
    assert threat_numbers("T6/T7") == {6, 7}
    assert threat_numbers("T5") == {5}
    assert [m.group(1) for m in SHORT.finditer("a Tesla T4 (T26) and (T0_LAYER")] == ["T26"]


def test_the_threats_are_numbered_from_1_without_gaps_or_repeats():
    numbers = documented()
    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) >= FIRST_THREATS


def test_every_threat_cited_as_security_md_has_an_entry():
    cited = citations(BY_NAME)
    assert cited, "no 'security.md T<n>' citation found: has the pattern or the code changed?"
    missing = {f"T{n}": where for n, where in cited.items() if n not in documented()}
    assert not missing, f"cited but not in docs/security.md: {missing}"


def test_every_threat_cited_in_short_form_or_by_a_test_name_has_an_entry():
    cited = citations(SHORT)
    for n, where in citations(TEST_NAME).items():
        cited.setdefault(n, []).extend(where)
    assert len(cited) >= 20  # the code cites most of T1–T31; far fewer means the patterns broke
    missing = {f"T{n}": where for n, where in cited.items() if n not in documented()}
    assert not missing, f"cited but not in docs/security.md: {missing}"


def backticked(text: str) -> list[str]:
    """The `spans` of a Markdown text, outside fenced code blocks."""
    return SPAN.findall(FENCE.sub("", text))


def defines(path: Path, name: str) -> bool:
    """Whether `path` exists and, with a `name`, defines a function or class of that name."""
    if not path.exists():
        return False
    if not name:
        return True
    pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b"
    return re.search(pattern, path.read_text(encoding="utf-8"), re.MULTILINE) is not None


def missing_paths(text: str, root: Path = ROOT) -> tuple[list[str], int]:
    """(the repository paths named in `text` that do not exist under `root`, how many paths were checked)."""
    missing, checked = [], 0
    for span in backticked(text):
        if MODULE.match(span):
            checked += 1
            base = root.joinpath(*span.split("."))
            if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
                missing.append(span)
        elif REPO_PATH.match(span) or span in TOP_FILES:
            checked += 1
            path, _, name = span.partition("::")
            if not defines(root / path, name):
                missing.append(span)
    return missing, checked


@pytest.mark.parametrize(
    ("doc", "at_least"),
    [("docs/security.md", 60), ("docs/architecture.md", 20), ("docs/hardware.md", 5), ("docs/speed-model.md", 5)],
)
def test_every_path_a_doc_names_exists(doc, at_least):
    missing, checked = missing_paths((ROOT / doc).read_text(encoding="utf-8"))
    assert not missing, f"{doc} names paths that do not exist: {missing}"
    assert checked >= at_least, f"only {checked} paths found in {doc}: has its format changed?"


def test_the_path_check_catches_a_missing_file_module_and_test():
    text = (
        "`app/main.py` `app/gone.py` `tests/test_docs.py::test_the_path_check_catches_a_missing_file_module_and_test`"
        " `tests/test_docs.py::test_gone` `app.core.services` `app.core.gone` `--json` `/proc/cpuinfo` `T5`\n"
        "```\napp/in/a/fence.py\n```\n"
    )
    missing, checked = missing_paths(text)
    assert missing == ["app/gone.py", "tests/test_docs.py::test_gone", "app.core.gone"]
    assert checked == 6
