"""Split a job script into its interpreter, its directive header and its body, and read the
header with its scheduler's reader. Pure: text in, a `JobScript` out."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from fedhpc.domain.jobscript.lsf import read_lsf
from fedhpc.domain.jobscript.model import Directive, Request, Scheduler
from fedhpc.domain.jobscript.pbs import read_pbs
from fedhpc.domain.jobscript.reading import Sink
from fedhpc.domain.jobscript.slurm import read_slurm

__all__ = ["MAX_SCRIPT_CHARS", "JobScript", "parse_script"]

# The body travels as one argv element of `<interpreter> -c BODY`; Linux caps one argument at
# 128 KiB (MAX_ARG_STRLEN), so a script is at most 64 Ki characters (UTF-8 up to 4 bytes each
# is still far below it for the scripts people write; the dialects' output bound is larger).
MAX_SCRIPT_CHARS = 64 * 1024

Reader = Callable[[list[str], int, Request, Sink], None]
_PREFIX: dict[str, tuple[Scheduler, Reader]] = {
    "#SBATCH": ("slurm", read_slurm),
    "#PBS": ("pbs", read_pbs),
    "#BSUB": ("lsf", read_lsf),
}
_DIRECTIVE = re.compile(r"^(#SBATCH|#PBS|#BSUB)(?:\s+(.*))?$")
_FOREIGN_VARS = re.compile(r"\$\{?((?:SLURM|PBS|LSB)_[A-Z_]+)")
_LAUNCHERS = re.compile(r"(?m)^\s*(srun|jsrun|aprun)\b")
_OWNER = {"SLURM": "slurm", "PBS": "pbs", "LSB": "lsf"}
_SELF = re.compile(r"\$\{?(?:0\b|BASH_SOURCE)")


@dataclass(frozen=True)
class JobScript:
    """A script as read: the scheduler its header is for, the interpreter of its #! line,
    the body (every line but the #! line and the header's directives, unchanged), each
    directive's fate, what the header asked for, and notes about the body."""

    scheduler: Scheduler
    interpreter: tuple[str, ...]
    body: str
    directives: tuple[Directive, ...]
    request: Request
    notes: tuple[str, ...]


def parse_script(text: str) -> JobScript:
    """Read a `#SBATCH`, `#PBS` or `#BSUB` script. Raises ValueError (with the reason) for
    text that is not one: empty, too long, NUL bytes, or no directive at all."""
    if not text.strip():
        raise ValueError("the script is empty")
    if len(text) > MAX_SCRIPT_CHARS:
        raise ValueError(f"the script has {len(text)} characters; at most {MAX_SCRIPT_CHARS}")
    if "\x00" in text:
        raise ValueError("the script contains a NUL character")
    lines = text.splitlines(keepends=True)
    interpreter: tuple[str, ...] = ("/bin/bash",)
    start = 0
    if lines[0].startswith("#!"):
        interpreter = tuple(lines[0][2:].split()) or interpreter
        start = 1
    req, sink = Request(), Sink()
    scheduler: Scheduler | None = None
    body: list[str] = []
    in_header = True
    for number, line in enumerate(lines[start:], start=start + 1):
        stripped = line.strip()
        m = _DIRECTIVE.match(stripped)
        if in_header and stripped and not stripped.startswith("#"):
            in_header = False  # sbatch, qsub and bsub stop reading at the first command
        if m is None:
            body.append(line)
            continue
        if not in_header:
            sink.drop(number, stripped, "ignored")
            body.append(line)
            continue
        kind, reader = _PREFIX[m.group(1)]
        if scheduler is None:
            scheduler = kind
        if kind != scheduler:
            sink.drop(number, stripped, f"a {m.group(1)} line in a {scheduler} script")
            continue
        try:
            tokens = shlex.split(m.group(2) or "", comments=True)
        except ValueError as exc:
            sink.drop(number, stripped, f"cannot split it: {exc}")
            continue
        reader(tokens, number, req, sink)
    if scheduler is None:
        raise ValueError("no #SBATCH, #PBS or #BSUB line before the first command")
    text_body = "".join(body)
    return JobScript(
        scheduler=scheduler,
        interpreter=interpreter,
        body=text_body,
        directives=tuple(sink.items),
        request=req,
        notes=_body_notes(text_body),
    )


def _body_notes(body: str) -> tuple[str, ...]:
    """What in the body only one scheduler provides: its variables and its launchers."""
    notes = []
    by_owner: dict[str, set[str]] = {}
    for name in _FOREIGN_VARS.findall(body):
        by_owner.setdefault(_OWNER[name.split("_", 1)[0]], set()).add(name)
    for owner, names in sorted(by_owner.items()):
        shown = ", ".join(sorted(names)[:4]) + (", ..." if len(names) > 4 else "")
        notes.append(f"the body reads {shown}: set only on {owner} sites")
    for launcher in sorted(set(_LAUNCHERS.findall(body))):
        notes.append(f"the body runs {launcher}: present only where its scheduler is")
    if _SELF.search(body):
        notes.append("the body reads $0 or BASH_SOURCE: it runs as '-c BODY', not from a file")
    return tuple(notes)
