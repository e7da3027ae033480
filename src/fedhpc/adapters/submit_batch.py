"""Several job submissions in one remote call (issue 33): over SSH each scheduler command is a
network round trip, so the jobs placed on one site together go as one `bash -s` script that
makes each job's folders, hands each script to the scheduler's submit command, and prints every
job's own exit status, stdout and stderr between markers. Pure: builds the script, cuts the
answer back into one `CommandResult` per job; `SiteAdapter.submit_many` runs it.

Each job script travels as a quoted here-document whose delimiter is checked to be absent from
the script: agent text stays data, exactly as in a single submission. The markers carry a word
drawn for the call, so no job's own output can pass for one. A job whose section is
missing from the answer (the call ended part-way) has no result: whether it was submitted is
unknown, and the caller resolves it by name like any submission whose answer was lost."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from fedhpc.adapters.command import Command, CommandResult, quote

__all__ = [
    "JOB_MARK",
    "MKDIR_FAILED",
    "SubmitEntry",
    "SubmittedJob",
    "split_submissions",
    "submissions_command",
]

JOB_MARK = "@@fedhpc-job"
MKDIR_FAILED = 97  # a job's exit status when its folders could not be made (never submitted)


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """What a submission returns: the scheduler's id and the exact script it accepted."""

    site: str
    job_id: str
    script: str


@dataclass(frozen=True, slots=True)
class SubmitEntry:
    """One job of a batched submission: the submit command (its stdin is the job script) and
    the folders to make first."""

    command: Command
    dirs: Sequence[str] = ()


def _word(texts: Sequence[str]) -> str:
    """A random word that is in none of `texts` (a here-document delimiter, a marker)."""
    while True:
        word = secrets.token_hex(8)
        if not any(word in text for text in texts):
            return word


def submissions_command(entries: Sequence[SubmitEntry], *, timeout_s: float) -> tuple[Command, str]:
    """One `bash -s` call that submits every entry in order, one after another; each job's
    outcome is its own (a refusal or a failed mkdir never stops the next job). With it, the
    marker `split_submissions` cuts its answer by."""
    if not entries:
        raise ValueError("a batched submission needs at least one job")
    texts = [e.command.stdin or "" for e in entries]
    eof, mark = f"fedhpc_eof_{_word(texts)}", f"{JOB_MARK}-{_word(texts)}"
    # The whole body is one function, called on the last line: bash parses a function whole
    # before running any of it, so a call whose input stops part-way (the daemon killed while
    # writing it) submits nothing rather than a job cut short. The name carries the call's
    # word, so no prefix of the last line names a command.
    run = f"fedhpc_submit_{mark.rsplit('-', 1)[1]}"
    lines = [f"{run}() {{", "set +e", "e=$(mktemp) || exit 1", "trap 'rm -f \"$e\"' EXIT"]
    for i, entry in enumerate(entries):
        cmd = entry.command
        lines.append(f"echo '{mark} begin {i}'")
        script = cmd.stdin or ""
        if not script.endswith("\n"):
            script += "\n"
        submit = f"{cmd.as_shell()} 2>\"$e\" <<'{eof}'\n{script}{eof}\nrc=$?"
        if entry.dirs:
            dirs = " ".join(quote(d) for d in entry.dirs)
            lines.append(f'if mkdir -p -- {dirs} 2>"$e"; then')
            lines.append(submit)
            lines.append(f"else rc={MKDIR_FAILED}; fi")
        else:
            lines.append(submit)
        lines.append(f"echo; echo '{mark} stderr {i}'; cat \"$e\"")
        lines.append(f'echo; echo "{mark} end {i} $rc"')
    lines += ["}", run]
    script = "\n".join(lines) + "\n"
    each = sum(e.command.commands for e in entries)  # one sbatch (qsub, bsub) per entry
    command = Command(
        ("bash", "-s"), stdin=script, timeout_s=timeout_s, idempotent=False, commands=each
    )
    return command, mark


def split_submissions(stdout: str, count: int, mark: str) -> list[CommandResult | None]:
    """The answer of `submissions_command` for `count` jobs, cut by its `mark`: each job's own
    result, in order; None for a job whose section did not arrive whole."""
    out: list[CommandResult | None] = [None] * count
    current: int | None = None
    streams: dict[str, list[str]] = {"out": [], "err": []}
    stream = "out"
    for line in stdout.splitlines():
        parts = line.split() if line.startswith(f"{mark} ") else []
        index = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else -1
        if 0 <= index < count and parts[1] == "begin":
            current, stream, streams = index, "out", {"out": [], "err": []}
        elif index == current and parts[1] == "stderr":
            stream = "err"
        elif index == current and parts[1] == "end" and len(parts) == 4:
            rc = int(parts[3]) if parts[3].lstrip("-").isdigit() else -1
            out[index] = CommandResult(rc, _text(streams["out"]), _text(streams["err"]))
            current = None
        elif current is not None:
            streams[stream].append(line)
    return out


def _text(lines: list[str]) -> str:
    """A stream's lines as printed, without the blank line the script adds before a marker."""
    if lines and lines[-1] == "":
        lines = lines[:-1]
    return "\n".join(lines) + ("\n" if lines else "")
