"""The shape of a JSON-schema `pattern`, read before it becomes grammar rules: the repetitions llama.cpp's
grammar sampler pays for per token.

llama.cpp keeps one parser stack for every way the text so far can be read, and checks every candidate
token against every stack. A repetition over a part that may match nothing (`(a{0,10}){0,100}`), or over
a part that itself repeats (`(a+)+`, `(a{1,2}){0,100}`), multiplies those ways: each such pattern
measured seconds to minutes per token on a 49k-token vocabulary, where a flat pattern takes ~10 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_PATTERN_CHARS", "MAX_PATTERN_COUNT", "PatternProblem", "pattern_problem"]

MAX_PATTERN_CHARS = 1_000
# A counted repetition becomes that many nested groups in the converter's rules; 100 is far above what
# a format needs (dates, ids, codes) and keeps one pattern's nesting shallow.
MAX_PATTERN_COUNT = 100
_UNBOUNDED = -1


class PatternProblem(ValueError):
    """Why a pattern is refused, in words for the user."""


@dataclass
class _Node:
    nullable: bool  # can match the empty string
    repeats: bool  # holds a repetition of more than one (*, +, {m,n} with n > 1)


class _Reader:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.i = 0

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def alternation(self, depth: int) -> _Node:
        branches = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(depth))
        return _Node(any(b.nullable for b in branches), any(b.repeats for b in branches))

    def sequence(self, depth: int) -> _Node:
        nullable, repeats = True, False
        while self.peek() not in ("", "|", ")"):
            atom = self.atom(depth)
            atom = self.quantified(atom)
            nullable = nullable and atom.nullable
            repeats = repeats or atom.repeats
        return _Node(nullable, repeats)

    def atom(self, depth: int) -> _Node:
        c = self.peek()
        if c == "(":
            if depth >= 32:
                raise PatternProblem("its groups nest more than 32 deep")
            self.i += 1
            if self.peek() == "?":
                raise PatternProblem("lookarounds and (?...) groups cannot be turned into a grammar")
            inner = self.alternation(depth + 1)
            if self.peek() != ")":
                raise PatternProblem("a group is not closed")
            self.i += 1
            return inner
        if c == "[":
            self.i += 1
            if self.peek() == "^":
                self.i += 1
            if self.peek() == "]":
                self.i += 1
            while self.peek() not in ("", "]"):
                self.i += 2 if self.peek() == "\\" else 1
            if self.peek() != "]":
                raise PatternProblem("a character class is not closed")
            self.i += 1
            return _Node(False, False)
        if c == "\\":
            self.i += 2
            return _Node(False, False)
        if c in "*+?{":
            raise PatternProblem(f"{c!r} at character {self.i + 1} repeats nothing")
        self.i += 1
        return _Node(c in "^$", False)  # an anchor matches no character

    def quantified(self, atom: _Node) -> _Node:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            low, high = {"*": (0, _UNBOUNDED), "+": (1, _UNBOUNDED), "?": (0, 1)}[c]
        elif c == "{":
            low, high = self._counts()
        else:
            return atom
        if self.peek() in ("?", "+"):  # lazy and possessive modifiers change nothing in a grammar
            self.i += 1
        many = high == _UNBOUNDED or high > 1
        if many and atom.nullable:
            raise PatternProblem(
                "it repeats a part that can match nothing (like (a?)* or (a{0,9}){0,9}), which makes the "
                "grammar check try every way to split the text; make the repeated part match at least one "
                "character"
            )
        if many and atom.repeats:
            raise PatternProblem(
                "it repeats a part that itself repeats (like (a+)+ or (\\d{1,3}){0,9}), which can make the "
                "grammar check take minutes per token; write it without the nesting"
            )
        return _Node(atom.nullable or low == 0, atom.repeats or many)

    def _counts(self) -> tuple[int, int]:
        end = self.text.find("}", self.i)
        if end < 0:
            raise PatternProblem("a {m,n} repetition is not closed")
        body = self.text[self.i + 1 : end]
        self.i = end + 1
        parts = [p.strip() for p in body.split(",")]
        try:
            if len(parts) == 1:
                low = high = int(parts[0])
            elif len(parts) == 2:
                low = int(parts[0]) if parts[0] else 0
                high = int(parts[1]) if parts[1] else _UNBOUNDED
            else:
                raise ValueError(body)
        except ValueError:
            raise PatternProblem(f"{{{body}}} is not a repetition count") from None
        if low < 0 or (high != _UNBOUNDED and high < low):
            raise PatternProblem(f"{{{body}}} is not a repetition count")
        if max(low, high) > MAX_PATTERN_COUNT:
            raise PatternProblem(f"{{{body}}} repeats more than {MAX_PATTERN_COUNT} times")
        return low, high


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be used for constrained output, or None when it can."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"it is {len(pattern):,} characters, over the {MAX_PATTERN_CHARS:,} allowed"
    if not (pattern.startswith("^") and pattern.endswith("$")):
        return 'it must start with "^" and end with "$" (the whole value is matched)'
    reader = _Reader(pattern[1:-1])
    try:
        reader.alternation(0)
        if reader.peek() == ")":
            raise PatternProblem(f"the ')' at character {reader.i + 2} closes no group")
    except PatternProblem as exc:
        return str(exc)
    return None
