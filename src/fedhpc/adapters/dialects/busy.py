"""A scheduler asking its clients to slow down: recognised in each dialect's words, and raised
as `SchedulerBusy`, a transient answer to back off from, never a refusal or a lost site."""

from __future__ import annotations

import re
from collections.abc import Mapping

from fedhpc.adapters.command import BatchSection, CommandResult, split_batch
from fedhpc.adapters.transport_error import TransportError

__all__ = [
    "BUSY_PATTERNS",
    "SchedulerBusy",
    "busy_reason",
    "check_busy",
    "check_busy_lookup",
    "check_busy_sections",
]

# What each scheduler prints when it is shedding load. A dead controller ("Unable to contact
# slurm controller (connect failure)", "cannot connect to server") is not here: that is a lost
# site, found by the probe. Slurm: the RPC rate limiter (slurm.conf rl_enable, 23.02+) and a
# saturated slurmctld answer EAGAIN ("Resource temporarily unavailable") or let the client's
# MessageTimeout expire ("Socket timed out on send/recv operation"); sbatch says "Slurm
# temporarily unable to accept job" while it retries. PBS Pro: PBSE_RESCUNAV and "try again";
# LSF: mbatchd busy or not answering ("LSF is processing your request", "Batch system
# daemon not responding ... still trying").
_SLURM = (
    r"Socket timed out on send/recv operation|Resource temporarily unavailable|"
    r"temporarily unable to accept job|rate limit"
)
BUSY_PATTERNS: Mapping[str, re.Pattern[str]] = {
    "slurm": re.compile(_SLURM, re.IGNORECASE),
    "process": re.compile(_SLURM, re.IGNORECASE),  # localsched speaks Slurm's words
    "pbs": re.compile(
        r"temporarily unavailable|try again later|server is busy|Request timed out", re.I
    ),
    "lsf": re.compile(
        r"LSF is processing your request|daemon not responding|mbatchd.*(?:busy|too many)|"
        r"temporarily unavailable",
        re.IGNORECASE,
    ),
}


class SchedulerBusy(TransportError):
    """The scheduler refused the call to shed load. Nothing happened: a status call is asked
    again later; a submission's outcome is looked up by its job name before any resend (as
    for every transport error), so a job is never lost or submitted twice."""

    code = "scheduler_busy"
    default_hint = "fedhpc backs off and asks again later; nothing is needed from you."


def busy_reason(dialect: str, returncode: int, stdout: str, stderr: str) -> str | None:
    """The scheduler's own line saying it is busy, when a failed call says so; else None."""
    pattern = BUSY_PATTERNS.get(dialect)
    if returncode == 0 or pattern is None:
        return None
    for line in (stderr + "\n" + stdout).splitlines():
        if pattern.search(line):
            return line.strip()[:300]
    return None


def check_busy(result: CommandResult, dialect: str, what: str) -> None:
    """Raise `SchedulerBusy` when `result` is the scheduler shedding load."""
    reason = busy_reason(dialect, result.returncode, result.stdout, result.stderr)
    if reason is not None:
        raise SchedulerBusy(f"{what}: the {dialect} scheduler is busy: {reason}")


def check_busy_sections(
    sections: Mapping[str, BatchSection], dialect: str, core: tuple[str, ...]
) -> None:
    """Raise `SchedulerBusy` when a probe's `core` sections failed only because the scheduler
    is shedding load (any other failure is the dialect's to judge). A batched section keeps
    its stderr apart (`BatchSection.stderr`): the refusal's words are there."""
    failed = [sections[n] for n in core if n in sections and sections[n].returncode != 0]
    reasons = [busy_reason(dialect, s.returncode, s.stdout, s.stderr) for s in failed]
    if failed and all(reasons):
        raise SchedulerBusy(f"probe: the {dialect} scheduler is busy: {reasons[0]}")


def check_busy_lookup(result: CommandResult, dialect: str) -> None:
    """A lookup by name (`find_command`) in which ANY part was refused as busy proves nothing
    about the names it did not find: raise `SchedulerBusy` rather than let "not found" send
    a job again that may be queued."""
    check_busy(result, dialect, "find")
    for section in split_batch(result.stdout).values():
        reason = busy_reason(dialect, section.returncode, section.stdout, section.stderr)
        if reason is not None:
            raise SchedulerBusy(f"find: the {dialect} scheduler is busy: {reason}")
