"""Linear-time text scanning for the drafter: signal words and numbers with units.

Python's `re` gives up its fast first-character skip for a case-insensitive pattern or one that
starts with an assertion (`\\b`, a look-behind), and a number pattern retried inside a long run
of digits is quadratic (40,000 digits took 91 s). So the text is lower-cased once (ASCII only,
which keeps every offset), every pattern starts with a literal or a digit, a left word boundary
is checked in Python on the few candidates, and a number is found by its last digit (next to
its unit) and read backwards."""

from __future__ import annotations

import re

__all__ = ["Signals", "lower_ascii", "number_before"]

_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lower_ascii(text: str) -> str:
    """ASCII letters lower-cased; every other character, and so every offset, unchanged."""
    return text.translate(_LOWER)


class Signals:
    """Named signals, each a set of lower-case alternatives that match anywhere (`free`) and
    ones that must start a word (`worded`). Free ones start with a literal, which `re` skips
    ahead to; all worded ones share one pattern led by `\\W` (a class `re` also skips on),
    so the text is read once for all of them, plus a match at its very start."""

    def __init__(self, spec: dict[str, tuple[str, str]]) -> None:
        self.names = tuple(spec)
        self._free = {n: re.compile(free) for n, (free, _) in spec.items() if free}
        worded = "|".join(f"(?P<{n}>{w})" for n, (_, w) in spec.items() if w)
        self._worded = re.compile(rf"\W(?:{worded})")
        self._at_start = re.compile(worded)
        self._n_worded = sum(1 for _, w in spec.values() if w)

    def search(self, low: str) -> dict[str, tuple[int, int]]:
        """The span of each signal's first match in `low` (from `lower_ascii`); absent = none."""
        first: dict[str, tuple[int, int]] = {}
        if (m := self._at_start.match(low)) and m.lastgroup:
            first[m.lastgroup] = m.span()
        for m in self._worded.finditer(low):
            name = m.lastgroup
            if name and name not in first:
                first[name] = (m.start() + 1, m.end())
                if len(first) == self._n_worded:
                    break
        for name, rx in self._free.items():
            end = first[name][0] if name in first else len(low)
            if (m := rx.search(low, 0, end)) is not None:
                first[name] = m.span()
        return first


def _mantissa(low: str, at: int) -> bool:
    return at >= 0 and (low[at].isdecimal() or low[at] == ".")


def _unreadable(low: str, i: int) -> bool:
    """The number starting at `i` is an exponent ('1e400', '1e+3') or negative ('-5')."""
    before = low[i - 1] if i > 0 else ""
    if before in ("e", "E"):
        return _mantissa(low, i - 2)
    if before in ("+", "-") and i > 1 and low[i - 2] in "eE":
        return _mantissa(low, i - 3)
    return before == "-" and (i == 1 or not low[i - 2].isalnum())


def number_before(low: str, pattern: re.Pattern[str], pos: int = 0) -> tuple[str, int, int] | None:
    """The first number at or after `pos` written just before a unit: `pattern` starts with one
    digit (`\\d`) followed by the unit, so a search never backtracks inside a run of digits.
    The number is then read backwards: digits, optionally '.' and more digits. Returns (number,
    start, end); None also for a number this cannot read whole: an exponent's digits ('1e400
    hours' is not 400 hours) or a negative one ('-5 hours' is not 5 hours)."""
    m = pattern.search(low, pos)
    if m is None:
        return None
    i = m.start()
    while i > 0 and low[i - 1].isdecimal():
        i -= 1
    if i > 1 and low[i - 1] == "." and low[i - 2].isdecimal():
        j = i - 1
        while j > 0 and low[j - 1].isdecimal():
            j -= 1
        i = j
    if _unreadable(low, i):
        return None
    return low[i : m.start() + 1], i, m.end()
