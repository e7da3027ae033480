"""torchrun's `--nnodes` as the drafter reads it (pure): N, or the elastic MIN:MAX, and a value
torchrun itself refuses named as such, never read as a valid count.

torchrun parses the flag as `N` or `MIN:MAX` with 1 <= MIN <= MAX (its rendezvous refuses
anything else): '4:' and ':4' fail its int(), '0' and '-1:4' its bounds. Read leniently,
'4:' was drafted as 4 nodes and '4:0', '0', '-1:4', ':4' said nothing at all, so a launch
line that cannot start was drafted as one that runs."""

from __future__ import annotations

import re

__all__ = ["read_nnodes"]

# On the lower-cased text. After '=' the value is whatever follows up to a space; after a
# space only what looks like a value ('--nnodes to set the nodes' is prose, not a value).
_NNODES = re.compile(r"--nnodes(?:=(\S*)|[ \t]+([\d:$+-]\S*))")
_FIXED = re.compile(r"\d+")
_RANGE = re.compile(r"(\d*):(\d*)")
_VARIABLE = re.compile(r"\$(?:\{?[a-z_][a-z0-9_]*\}?|\()")
_MAX_DIGITS = 15  # a longer count reads as huge (and fails validation), never as an error


def _count(digits: str) -> int:
    digits = digits.lstrip("0") or "0"
    return 10**_MAX_DIGITS if len(digits) > _MAX_DIGITS else int(digits)


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-12:]}"


def read_nnodes(low: str, text: str) -> tuple[tuple[int, int] | None, str | None]:
    """The first `--nnodes` in `low` (`text` lower-cased, same offsets) as ((min, max), None):
    "2" is (2, 2), the elastic "1:4" (1, 4). A value torchrun refuses is (None, why), quoting
    the flag as written with the range it may mean; one set when the job runs ("$NNODES") is
    (None, why) too: the node count is not in the text. No flag: (None, None)."""
    m = _NNODES.search(low)
    if m is None:
        return None, None
    raw = m.group(1) if m.group(1) is not None else m.group(2)
    kept = raw.rstrip(".,;)")  # the end of a sentence in prose
    value = kept.strip("'\"")
    written = repr(_shown(text[m.start() : m.end() - len(raw) + len(kept)]))
    if _VARIABLE.match(value):
        return None, (
            f"{written} is set when the job runs: nodes not read from it (state the node "
            "count, e.g. 'on 2 nodes', if it is known)"
        )
    if _FIXED.fullmatch(value):
        n = _count(value)
        if n >= 1:
            return (n, n), None
        return None, _refused(written, "node count", "torchrun needs at least 1", "--nnodes=1")
    rng = _RANGE.fullmatch(value)
    if rng is None:
        if value.startswith("-"):
            return None, _refused(written, "range", "torchrun refuses a negative count", None)
        return None, _refused(written, "node count", "torchrun takes N or MIN:MAX", None)
    lo_s, hi_s = rng.groups()
    if not lo_s:
        fix = f"--nnodes=1:{_count(hi_s)}" if hi_s else None
        return None, _refused(written, "range", "torchrun refuses a range without a MIN", fix)
    lo = _count(lo_s)
    if not hi_s:
        fix = f"--nnodes={lo}" if lo >= 1 else None
        return None, _refused(written, "range", "torchrun refuses a range without a MAX", fix)
    hi = _count(hi_s)
    if 1 <= lo <= hi:
        return (lo, hi), None
    if hi == 0:
        fix = f"--nnodes={lo}" if lo >= 1 else "--nnodes=1"
        return None, _refused(written, "range", "torchrun refuses a MAX of 0", fix)
    if lo > hi:
        return None, _refused(
            written, "range", "torchrun refuses a MIN above MAX", f"--nnodes={hi}:{lo}"
        )
    return None, _refused(written, "range", "torchrun refuses a MIN below 1", f"--nnodes=1:{hi}")


def _refused(written: str, what: str, why: str, fix: str | None) -> str:
    mean = f"; if you mean {fix}, write that" if fix else ""
    return f"{written} is not a valid {what} ({why}): nodes not read from it{mean}"
