"""Stop strings over a token stream: text that might start a stop string is held back until it is
known not to, so a stop string never reaches the caller, even when split across tokens."""

from __future__ import annotations


class StopScanner:
    def __init__(self, stops: list[str] | None) -> None:
        self.stops = [s for s in (stops or []) if s]
        self._held = ""
        self.hit: str | None = None

    def feed(self, text: str) -> str:
        """Add generated text; return what is safe to emit. After a hit, `hit` is set and the rest dropped."""
        if self.hit is not None:
            return ""
        if not self.stops:
            return text
        buf = self._held + text
        first = min(((buf.find(s), s) for s in self.stops if s in buf), default=None)
        if first is not None:
            self.hit = first[1]
            self._held = ""
            return buf[: first[0]]
        keep = self._longest_partial(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The held-back tail, at the end of a generation that did not hit a stop string."""
        out, self._held = self._held, ""
        return "" if self.hit is not None else out

    def _longest_partial(self, buf: str) -> int:
        # The longest suffix of buf that is a proper prefix of some stop string.
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:n]):
                    best = n
                    break
        return best
