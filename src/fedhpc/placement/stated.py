"""Counts a task description states ("8 gpus", "up to 8 gpus", "1-8 gpus", "8 gpus per node",
"2 nodes", "no gpus"); `shape` makes a DDP shape of them with the launch flags.

Pure and linear like `textscan`: a count is found by its last digit next to its unit and read
backwards; the words around it (a bound before it, what it counts after it) are read from a
window of at most `_WINDOW` characters, for the first count and the first stated zero."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from fedhpc.domain.accelerators import GPU_MEMORY_GIB
from fedhpc.placement.textscan import lower_ascii, number_before

__all__ = ["Stated", "gpus_named_besides_zeros", "stated_gpus", "stated_nodes"]

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
# What names GPUs in a text (the word, CUDA, a GPU model fedhpc knows, data-parallel
# training), and a zero count of them ("0 gpus", "0 a100s"), which names none.
_GPU_WORD = (
    r"(?:gpus?|cuda|"
    + "|".join(sorted(map(re.escape, GPU_MEMORY_GIB), key=len, reverse=True))
    + r")s?"
)
_GPU_NAMED = re.compile(rf"\b(?:{_GPU_WORD}|ddp|fsdp|multi-?gpu)\b")
_GPU_ZERO = re.compile(
    rf"\b0+\s*(?:x\s*)?{_GPU_WORD}\b"
    rf"|\b{_GPU_WORD}\s+(?:is\s+|are\s+)?(?:not|isn't|aren't)\s+"
    r"(?:needed|required|used|necessary|available|installed)\b"
    rf"|\bno\s+need\s+for\s+(?:a\s+|any\s+)?{_GPU_WORD}\b"
)
# "4x8 gpus", "2 x 8 A100": N nodes of M GPUs (matched on a window ending at the M) ...
_TIMES = re.compile(r"[^a-z0-9._](\d{1,15})\s*[x\u00d7]\s*$")
# ... unless a batch word or "=" stands just before N ("batch size 64 x 8 gpus", "256 = 32 x 8
# gpus": arithmetic, not nodes; matched on a window ending at N), or N is over this many nodes:
# 64 nodes of 8 is 512 GPUs, past what one job asks of the sites fedhpc federates, while batch
# sizes and sequence lengths (128, 256, 512 ...) are what "N x 8" larger than that mostly means.
_BATCH = re.compile(r"(?:[^a-z0-9.](?:batch(?:[\s_-]*size)?|bs)\s*(?:[:=]|of)?|=)\s*$")
_MAX_TIMES_NODES = 64
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
    as written, whether a bound made it a range ("min": "at least 8", "max": "up to 8"), for
    "4x8 gpus" the node count (4), and what the rationale should add about the reading."""

    lo: int
    hi: int | None
    per_node: bool
    phrase: str
    bound: str | None = None
    nodes: int | None = None
    remarks: tuple[str, ...] = ()

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


def _times(low: str, start: int) -> tuple[int, int, bool] | None:
    """For the count at `start`, an "N x" before it ("4x8 gpus"): N's start, N, and whether a
    batch word or "=" before N makes it arithmetic ("batch size 64 x 8 gpus")."""
    w0 = max(0, start - _WINDOW)
    window = (" " if w0 == 0 else "") + low[w0:start]
    m = _TIMES.search(window)
    if m is None or (n := _whole(m.group(1))) is None:
        return None
    first = w0 + m.start(1) - (1 if w0 == 0 else 0)
    b0 = max(0, first - _WINDOW)
    batch = _BATCH.search((" " if b0 == 0 else "") + low[b0:first]) is not None
    return first, n, batch


def _remark(low: str, start: int, end: int) -> bool:
    """Whether "no gpu" is a remark ("no gpu nodes", "no gpu memory errors"), not a zero."""
    m = _NEXT_WORD.match(low, end, end + _WINDOW)
    return _counts_else(low, start, end) or (m is not None and m.group(1) in _NOT_NONE)


def _read(
    description: str, count: re.Pattern[str], words: re.Pattern[str], gpus: bool
) -> Stated | None:
    """The first count stated, else the first stated zero; a zero beside a count is a remark."""
    low = lower_ascii(description)
    counts: list[tuple[int, Stated]] = []  # (where it starts, the reading)
    zeros: list[tuple[int, Stated]] = []
    pos = 0
    while (hit := number_before(low, count, pos)) is not None:
        number, start, end = hit
        pos = end
        times = _times(low, start) if gpus else None
        if not (times or _word_start(low, start)) or (gpus and _counts_else(low, start, end)):
            continue
        if (n := _whole(number)) is None:
            if gpus and not number.strip("0") and "gpu" in low[start:end]:  # "0 gpus": none
                zeros.append((start, _zero(description, start, end)))
            continue
        at, stated = _counted(description, low, start, end, n, times=times)
        if not stated.none:
            counts.append((at, stated))
            break
        zeros.append((at, stated))  # "fewer than 1 gpu": none
    for m in words.finditer(low):
        if _word_start(low, m.start()) and not (gpus and _counts_else(low, m.start(), m.end())):
            stated = _around(description, low, m.start(), m.end(), _WORD_COUNTS[m.group(1)])
            (zeros if stated.none else counts).append((m.start(), stated))
            if not stated.none:
                break
    for m in _GPU_NONE.finditer(low) if gpus else ():
        said = m.group()
        if _word_start(low, m.start()) and not ("gpu" in said and _remark(low, *m.span())):
            zeros.append((m.start(), _zero(description, *m.span())))
            break
    zero = min(zeros, key=lambda z: z[0])[1] if zeros and gpus else None
    if not counts:
        return zero
    first = min(counts, key=lambda c: c[0])[1]
    if zero is None:
        return first
    return replace(
        first,
        remarks=(
            *first.remarks,
            f"part of the work is stated CPU-only ({zero.phrase!r}): drafted for the GPU part; "
            "if that part is a separate step, two tasks (CPU-only, then GPUs) may suit",
        ),
    )


def gpus_named_besides_zeros(low: str, phrase: str) -> bool:
    """Whether the lower-cased text names GPUs outside every zero phrase in it ('cpu only',
    'no gpus', '0 a100s') and the stated zero `phrase` ('fewer than 1 gpu'): then the zero is
    a part of the work, not the task ('fine-tune on a GPU; tokenization is CPU only')."""
    rest = low.replace(lower_ascii(phrase), " ")
    rest = _GPU_ZERO.sub(" ", _GPU_NONE.sub(" ", rest))
    return _GPU_NAMED.search(rest) is not None


def _zero(description: str, start: int, end: int) -> Stated:
    return Stated(0, 0, False, _shown(description[start:end].strip()))


def _counted(
    description: str, low: str, start: int, end: int, n: int, *, times: tuple[int, int, bool] | None
) -> tuple[int, Stated]:
    """The count `n` at start..end with what stands around it: "N x" before it makes it N nodes
    of n (unless N is a batch or too many nodes: then n alone, said). Its start and reading."""
    if times is None:
        return start, _around(description, low, start, end, n)
    first, nodes, batch = times
    if not batch and nodes <= _MAX_TIMES_NODES:
        return first, Stated(n, n, True, _shown(description[first:end].strip()), nodes=nodes)
    written = _shown(description[first:end].strip())
    why = (
        f"{written!r} is batch arithmetic, not {nodes} nodes"
        if batch
        else f"{written!r} is not read as {nodes} nodes (more than {_MAX_TIMES_NODES}; if you "
        "mean them, state the node count)"
    )
    stated = _around(description, low, start, end, n)
    return start, replace(stated, remarks=(f"{why}: the count read is {stated.phrase!r}",))


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
        elif m.group("under"):  # "fewer than 1 gpu": none
            return Stated(0, 0, False, _shown(description[first:end].strip()))
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
    it, and "4x8 gpus" (4 nodes of 8; not after a batch word or "=", nor over 64 nodes). A
    stated zero ("0 gpus", "no gpus", "zero gpus", "without a gpu", "cpu only", "fewer than 1
    gpu") is 0..0, none, when no count is stated; beside one it is a remark on the count. Not
    read: a number inside a word ('a100 gpus'), not whole ('1.5', '1e400', '-5'), or one that
    counts something else ("8 gpu nodes", "8 gpu-hours", "100 gpu jobs", "a 10x gpu speedup")."""
    return _read(description, _GPU_COUNT, _GPU_WORDS, gpus=True)


def stated_nodes(description: str) -> Stated | None:
    """The first node count the description states: "2 nodes", "4-node", "two machines", with
    the same bounds and ranges as GPUs ("up to 4 nodes")."""
    return _read(description, _NODE_COUNT, _NODE_WORDS, gpus=False)
