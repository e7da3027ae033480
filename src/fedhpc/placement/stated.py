"""Counts a task description states ("8 gpus", "up to 8 gpus", "1-8 gpus", "8 gpus per node",
"2 nodes", "no gpus") and the DDP shape they make with the launch flags (`--nproc_per_node`,
`--nnodes`, which may be an elastic `MIN:MAX`).

Pure and linear like `textscan`: a count is found by its last digit next to its unit and read
backwards; the words around it (a bound before it, what it counts after it) are read from a
window of at most `_WINDOW` characters, and only for the one count kept."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fedhpc.placement.textscan import lower_ascii, number_before

__all__ = [
    "NODE_GPUS",
    "Shape",
    "Stated",
    "ddp_shape",
    "node_range",
    "nodes_flag",
    "stated_gpus",
    "stated_nodes",
]

# GPUs per node assumed when a stated count is more than a node holds (8: DGX/HGX nodes).
NODE_GPUS = 8
_MAX_DIGITS = 15
_HUGE: int = 10**_MAX_DIGITS  # a longer number reads as huge (and fails validation by range)
_WINDOW = 40
_WORD_COUNTS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "twelve": 12, "sixteen": 16,
}  # fmt: skip
_WORDS = "|".join(_WORD_COUNTS)
_GPU_UNIT = (
    r"(?:(?:nvidia|amd)\s+)?(?:gpus?|(?:a100|h100|h200|gh200|v100|a40|l40s?|a10g?|mi\d{3}x?)s?)\b"
)
_NODE_UNIT = r"(?:nodes?|machines?|hosts?)\b"
_OR = r"or\s+(?:more|fewer|less)\s+"  # "8 or more gpus"
# "8 gpus", "8x a100", "8-gpu", "8+ gpus"; the pattern starts with the number's last digit.
_GPU_COUNT = re.compile(rf"\d(?:\+|\s+{_OR})?\s*(?:[x\u00d7]\s*|-)?" + _GPU_UNIT)
_GPU_WORDS = re.compile(rf"({_WORDS})[\s-]+(?:{_OR})?(?:[x\u00d7]\s*)?" + _GPU_UNIT)
# A stated zero, read as none: "no gpus", "zero gpus", "without a gpu", "cpu only" ("0 gpus" is
# a count of zero). Only the word GPU: "no a100s" says which type, not that none is wanted.
_GPU_NONE = re.compile(
    r"(?:zero|no|without(?:\s+(?:a|any))?)[\s-]+(?:(?:nvidia|amd)\s+)?gpus?\b"
    r"|cpus?[\s-]*only\b|only\s+(?:on\s+)?(?:the\s+)?cpus?\b"
)
# "4x8 gpus", "2 x 8 A100": N nodes of M GPUs (matched on a window ending at the M).
_TIMES = re.compile(r"[^a-z0-9._](\d{1,15})\s*[x\u00d7]\s*$")
_NODE_COUNT = re.compile(r"\d\+?(?:\s*-)?\s*" + _NODE_UNIT)  # not \s*-?\s*: quadratic
_NODE_WORDS = re.compile(rf"({_WORDS})[\s-]+" + _NODE_UNIT)
# The word after a GPU count, when it counts something else: "8 gpu nodes", "8 gpu-hours",
# "100 gpu jobs" (plural: "an 8-gpu job" is one job on 8 GPUs), "a 10x gpu speedup".
_NEXT_WORD = re.compile(r"\s*-?\s*([a-z]+)")
_COUNTS_ELSE = frozenset(
    {
        "node", "nodes", "hour", "hours", "hr", "hrs", "h", "server", "servers", "machine",
        "machines", "jobs", "tasks", "runs", "speedup", "speedups", "speed",
    }
)  # fmt: skip
# ... and after "no gpu", a word that makes it a remark, not a request: "no gpu memory errors".
_NOT_NONE = frozenset(
    {
        "memory", "mem", "error", "errors", "oom", "issue", "issues", "problem", "problems",
        "available", "free", "left", "quota", "budget", "access", "usage", "utilization",
    }
)  # fmt: skip
# ... and after "Nx gpu", a speed word: "10x gpu acceleration" is a factor, not 10 GPUs.
_SPEED_WORDS = frozenset(
    {
        "faster", "slower", "speed", "speedup", "speedups", "acceleration", "accelerated",
        "boost", "throughput", "improvement", "gain", "gains", "better", "cheaper", "more", "less",
    }
)  # fmt: skip
_PER_NODE = re.compile(
    r"\s*(?:(?:per|/|a|on each|in each|on every|each)\s*(?:node|machine|host|server)\b|each\b)"
)
# What stands just before a count (matched on a window ending at it): a bound or a range start.
_BEFORE = re.compile(
    r"[^a-z0-9._](?:(?P<upper>up to|at most|no more than|not more than|maximum of|max|<=|\u2264)"
    r"|(?P<lower>at least|no fewer than|no less than|not less than|minimum of|min|>=|\u2265)"
    r"|(?P<above>more than)|(?P<under>fewer than|less than)"
    rf"|between\s+(?P<between>\d+|{_WORDS})\s+and"
    rf"|(?P<lo>\d+|{_WORDS})\s*(?:-|\u2013|to))\s*:?\s*$"
)
# ... and just after it: "8 gpus or more", "8 gpus or fewer"; "at least", "at most", "minimum"
# and "maximum" only where the phrase ends ("8 gpus, at least 2 hours" bounds the hours).
_AFTER = re.compile(
    r"\s*,?\s*(?:or\s+(?P<more>more)|or\s+(?:fewer|less)"
    r"|(?:at\s+(?:(?P<least>least)|most)|(?P<minimum>minimum)|maximum)"
    r"(?=[ \t]*(?:[.,;:)!?\n]|$)))\b"
)


@dataclass(frozen=True, slots=True)
class Stated:
    """A stated count: lo..hi (hi None: "at least lo"; 0..0: none), per node or not, the phrase
    as written, whether a bound made it a range ("min": "at least 8", "max": "up to 8"), and
    for "4x8 gpus" the node count (4)."""

    lo: int
    hi: int | None
    per_node: bool
    phrase: str
    bound: str | None = None
    nodes: int | None = None

    @property
    def none(self) -> bool:
        return self.hi == 0

    @property
    def signal(self) -> str:
        bound = f">={self.lo}" if self.hi is None else f"={self.lo}"
        if self.hi is not None and self.hi != self.lo:
            bound = f"={self.lo}-{self.hi}"
        return bound + ("/node" if self.per_node else "")

    def upper(self, default: int) -> int:
        """hi, or for "at least lo" the default the class gives, not less than lo."""
        return self.hi if self.hi is not None else max(default, self.lo)


@dataclass(frozen=True, slots=True)
class Shape:
    """GPUs per node and nodes as (min, max) and the reasons, as the rationale names them."""

    gpus: tuple[int, int]
    nodes: tuple[int, int]
    reasons: tuple[str, ...]


def _word_start(low: str, i: int) -> bool:
    return i == 0 or not (low[i - 1].isalnum() or low[i - 1] in "._")


def _whole(number: str) -> int | None:
    if not number.isdecimal():
        return _WORD_COUNTS.get(number)
    if len(number.lstrip("0")) > _MAX_DIGITS:
        return _HUGE
    return int(number) or None


def _counts_else(low: str, start: int, end: int) -> bool:
    m = _NEXT_WORD.match(low, end, end + _WINDOW)
    if m is None:
        return False
    word = m.group(1)
    factor = low[start:end].lstrip("0123456789+ ")[:1] in ("x", "\u00d7")
    return word in _COUNTS_ELSE or (factor and word in _SPEED_WORDS)


def _times(low: str, start: int) -> tuple[int, int] | None:
    """For the count at `start`, an "N x" before it ("4x8 gpus"): (N's start, N)."""
    w0 = max(0, start - _WINDOW)
    window = (" " if w0 == 0 else "") + low[w0:start]
    m = _TIMES.search(window)
    if m is None or (n := _whole(m.group(1))) is None:
        return None
    return w0 + m.start(1) - (1 if w0 == 0 else 0), n


def _remark(low: str, start: int, end: int) -> bool:
    """Whether "no gpu" is a remark ("no gpu nodes", "no gpu memory errors"), not a zero."""
    m = _NEXT_WORD.match(low, end, end + _WINDOW)
    return _counts_else(low, start, end) or (m is not None and m.group(1) in _NOT_NONE)


def _read(
    description: str, count: re.Pattern[str], words: re.Pattern[str], gpus: bool
) -> Stated | None:
    low = lower_ascii(description)
    found: list[tuple[int, int, int, int | None]] = []  # (start, end, count (0: none), nodes)
    pos = 0
    while (hit := number_before(low, count, pos)) is not None:
        number, start, end = hit
        times = _times(low, start) if gpus else None
        if (times or _word_start(low, start)) and not (gpus and _counts_else(low, start, end)):
            if times is not None and (n := _whole(number)) is not None:
                found.append((times[0], end, n, times[1]))
            elif (n := _whole(number)) is not None:
                found.append((start, end, n, None))
            elif gpus and not number.strip("0") and "gpu" in low[start:end]:
                found.append((start, end, 0, None))  # "0 gpus": none
            break
        pos = end
    for m in words.finditer(low):
        if _word_start(low, m.start()) and not (gpus and _counts_else(low, m.start(), m.end())):
            found.append((m.start(), m.end(), _WORD_COUNTS[m.group(1)], None))
            break
    for m in _GPU_NONE.finditer(low) if gpus else ():
        said = m.group()
        if _word_start(low, m.start()) and not ("gpu" in said and _remark(low, *m.span())):
            found.append((m.start(), m.end(), 0, None))
            break
    if not found:
        return None
    start, end, n, nodes = min(found)
    if n == 0 or nodes is not None:
        shown = _shown(description[start:end].strip())
        return Stated(n, n, nodes is not None, shown, nodes=nodes)
    return _around(description, low, start, end, n)


def _around(description: str, low: str, start: int, end: int, n: int) -> Stated:
    """The count with its bound ("up to 8 gpus", "8 or more gpus", "8 gpus or fewer"), range
    ("1-8 gpus") or "per node" read."""
    lo: int = n
    hi: int | None = n  # None: "at least lo"
    bound: str | None = None
    inner = low[start:end].lstrip("0123456789")
    if inner.startswith("+") or "more" in inner:
        hi, bound = None, "min"  # "8+ gpus", "8 or more gpus"
    elif " or " in inner:
        lo, bound = 1, "max"  # "8 or fewer gpus"
    w0 = max(0, start - _WINDOW)
    # A sentinel only at the text's start, so a window cut inside a word cannot match there.
    window = (" " if w0 == 0 else "") + low[w0:start]
    first = start
    if (m := _BEFORE.search(window)) is not None:
        first = w0 + m.start() + (0 if w0 == 0 else 1)
        if m.group("upper"):
            lo, bound = 1, "max"
        elif m.group("lower"):
            hi, bound = None, "min"
        elif m.group("above"):
            lo, hi, bound = n + 1, None, "min"  # "more than 8": 9 or more
        elif m.group("under") and n > 1:
            lo, hi, bound = 1, n - 1, "max"  # "fewer than 8": at most 7
        elif (
            not m.group("under")
            and (below := _whole(m.group("between") or m.group("lo"))) is not None
            and below <= n
        ):
            lo = below
        else:
            first = start
    last = end
    after = _AFTER.match(low, last, last + _WINDOW)
    per = _PER_NODE.match(low, after.end() if after else last, last + 2 * _WINDOW)
    if per is not None:
        last = per.end()
        after = after or _AFTER.match(low, last, last + _WINDOW)
    if after is not None:
        word = _NEXT_WORD.match(low, after.end(), after.end() + _WINDOW)
        if word is not None and word.group(1) in _COUNTS_ELSE:
            after = None  # "8 gpus or more nodes"
    if after is not None and bound is None:
        last = max(last, after.end())
        if after.group("more") or after.group("least") or after.group("minimum"):
            hi, bound = None, "min"  # "8 gpus or more", "at least", "minimum"
        else:
            lo, bound = 1, "max"
    return Stated(lo, hi, per is not None, _shown(description[first:last].strip()), bound)


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-12:]}"


def stated_gpus(description: str) -> Stated | None:
    """The first GPU count the description states: "8 gpus", "8x A100", "4 H100s", "two GPUs",
    with "up to"/"at most"/"<=" (1..N), "at least"/">="/"N+"/"N or more" (N..), "more than"
    (N+1..), "fewer than" (1..N-1), "N-M"/"N to M"/"between N and M", "per node"/"each" after
    it, and "4x8 gpus" (4 nodes of 8). A stated zero ("0 gpus", "no gpus", "zero gpus",
    "without a gpu", "cpu only") is 0..0: none. Not read: a number inside a word ('a100
    gpus'), not whole ('1.5', '1e400', '-5'), or one that counts something else ("8 gpu
    nodes", "8 gpu-hours", "100 gpu jobs", "a 10x gpu speedup")."""
    return _read(description, _GPU_COUNT, _GPU_WORDS, gpus=True)


def stated_nodes(description: str) -> Stated | None:
    """The first node count the description states: "2 nodes", "4-node", "two machines", with
    the same bounds and ranges as GPUs ("up to 4 nodes")."""
    return _read(description, _NODE_COUNT, _NODE_WORDS, gpus=False)


def _ceil(a: int, b: int) -> int:
    return -(-a // max(b, 1))


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def nodes_flag(nnodes: tuple[int, int]) -> str:
    """`--nnodes` as written: "2", or an elastic "1:4"."""
    return str(nnodes[0]) if nnodes[0] == nnodes[1] else f"{nnodes[0]}:{nnodes[1]}"


def node_range(
    text: Stated | None, nnodes: tuple[int, int] | None, why: list[str]
) -> tuple[int, int] | None:
    """Nodes from the text and from `--nnodes` (min, max: elastic when they differ): where
    they overlap, the overlap; when they disagree, the wider range, said."""
    if text is None:
        return nnodes
    lo, hi = text.lo, text.upper(nnodes[1] if nnodes else text.lo)
    if nnodes is None:
        return lo, hi
    both = max(lo, nnodes[0]), min(hi, nnodes[1])
    if both[0] <= both[1]:
        return both
    wide = min(lo, nnodes[0]), max(hi, nnodes[1])
    why.append(
        f"the text says {text.phrase!r}, the code --nnodes={nodes_flag(nnodes)}: they "
        f"disagree, so nodes {_span(*wide)} (the wider); replan with the one you mean"
    )
    return wide


def ddp_shape(
    gpus: Stated,
    nodes_text: Stated | None,
    nproc: int | None,
    nnodes: tuple[int, int] | None,
    default_max: int,
) -> Shape:
    """GPUs per node and nodes for a stated GPU count. The count is per node when "per node"/
    "each" follows it, or when a node count is known and it fits a node (8 gpus on 4 nodes: 8
    per node); else it is the total, over ceil(N / 8) nodes or the known node count. A
    `--nproc_per_node` the text contradicts widens the GPU range to hold both, said."""
    why: list[str] = []
    nproc = nproc or None  # --nproc_per_node=0 says nothing
    nodes = node_range(nodes_text, nnodes, why)
    lo, hi = gpus.lo, gpus.upper(max(nproc or default_max, 1))
    flag = f"--nnodes={nodes_flag(nnodes)}" if nnodes is not None else ""
    nsrc = (flag if nodes_text is None else f"stated {nodes_text.phrase!r}") + (
        f", {flag}" if nodes_text is not None and flag else ""
    )
    total_fits = nodes is not None and nproc is not None and lo <= nproc * nodes[0] <= hi
    if gpus.per_node or (nodes is not None and hi <= NODE_GPUS and not total_fits):
        nlo, nhi = nodes or (1, 1)
        glo, ghi = lo, hi
        reason = (
            f"{_span(glo, ghi)} GPU{'s' if ghi > 1 else ''} per node (stated {gpus.phrase!r}) on "
            + (
                f"{_span(nlo, nhi)} node{'s' if nhi > 1 else ''} ({nsrc}): "
                f"{_span(glo * nlo, ghi * nhi)} in all"
                if nodes is not None
                else "1 node (no node count stated)"
            )
        )
    elif nodes is not None:
        nlo, nhi = nodes
        ghi = _ceil(hi, nlo)
        glo = min(_ceil(lo, nhi), ghi)
        reason = f"{_span(lo, hi)} GPUs in all (stated {gpus.phrase!r}) over {_span(nlo, nhi)} "
        reason += f"nodes ({nsrc}): {_span(glo, ghi)} per node"
    else:
        nlo, nhi = _ceil(lo, NODE_GPUS), _ceil(hi, NODE_GPUS)
        # Not fewer than stated: 16-20 over 2-3 nodes is 8 per node (16-24), not 7 (14-21).
        ghi = max(_ceil(hi, nhi), _ceil(lo, nlo))
        glo = min(_ceil(lo, nlo), ghi)
        reason = f"{_span(lo, hi)} GPUs (stated {gpus.phrase!r})"
        if nhi > 1:
            reason += f": {_span(nlo, nhi)} nodes of {_span(glo, ghi)}"
    why.insert(0, reason)
    if gpus.bound == "min":
        why.insert(1, f"{gpus.phrase!r} is a minimum: the job may want more (raise gpus.max)")
    elif gpus.bound == "max":
        why.insert(1, f"{gpus.phrase!r} is a maximum: the draft allows fewer")
    if nproc is not None:
        if glo <= nproc <= ghi:
            why.append(f"--nproc_per_node={nproc} agrees")
        else:
            wide = min(glo, nproc), max(ghi, nproc)
            why.append(
                f"the text says {gpus.phrase!r} ({_span(glo, ghi)} per node), the code "
                f"--nproc_per_node={nproc}: they disagree, so GPUs {_span(*wide)} per node "
                "(the wider)"
                + (
                    f"; if it is {hi // nproc} nodes of {nproc}, say so (--nnodes)"
                    if nodes is None and nproc < hi and hi % nproc == 0
                    else ""
                )
            )
            glo, ghi = wide
    return Shape((glo, ghi), (nlo, nhi), tuple(why))
