"""A cheap liveness check ahead of a site's probe and observation, in the same remote call.

A dead controller makes Slurm's clients retry for a long time (`squeue` and `sinfo` 9-18 s
each, so a probe ran into its whole 30 s deadline), while `scontrol ping` says DOWN in about
10 ms. So the probe and the observation's scheduler commands run behind a gate: the scheduler's
ping (`scontrol ping`, `qstat -B`, `lsid`: the ones `fedhpc sites discover` uses) under its
own short deadline, then the command itself only when the ping answered. A ping that says
down, or does not answer within `PING_TIMEOUT_S`, ends the call with `ControllerDown`: the
site is lost now, not after the heavier command's retries. Still one remote call (the pace
and the per-site command counts see one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from fedhpc import settings
from fedhpc.adapters.command import Command, CommandResult, quote, shell_line
from fedhpc.adapters.dialects import lsf_discover, pbs_discover, slurm_discover
from fedhpc.adapters.dialects.busy import SchedulerBusy, busy_reason
from fedhpc.adapters.transport_error import TransportError

__all__ = [
    "ACCOUNTING_ASKS_CONTROLLER",
    "DOWN_EXIT",
    "PING_TIMEOUT_S",
    "ControllerDown",
    "ControllerSilent",
    "Ping",
    "down_in",
    "gated",
    "ping_of",
    "suspect_ping_s",
]

# A controller that does not answer a ping within this is taken for lost. Slurm's own
# MessageTimeout is 10 s; a ping is the cheapest request there is, and a controller that
# cannot answer one in 5 s cannot take work either. The daemon passes its setting
# (`FEDHPC_PING_TIMEOUT_S`: a test federation on a loaded 2-core machine needs more).
PING_TIMEOUT_S = float(str(settings.PING_TIMEOUT_S.default))
# The observation's ping is given less: a control cycle that waits 5 s for it cannot move the
# work of a hung controller within 2 cycles at a 2 s cycle. Half a cycle, never under this
# floor (a loaded login node), never over PING_TIMEOUT_S. Missing it makes the site *suspect*
# (its queued work hedged elsewhere: `orchestrator.suspect`), never offline: only the probe's
# full-deadline pings decide that.
SUSPECT_PING_MIN_S = 1.0
# Schedulers whose accounting asks the controller too (PBS's `qstat -x`, LSF's `bjobs -a`): a
# hung server holds it until its deadline, and the whole control cycle with it, so it runs
# behind the ping as status does. Slurm's `sacct` asks slurmdbd, which a hung slurmctld leaves
# answering: no ping there (it would be one command more per cycle).
ACCOUNTING_ASKS_CONTROLLER = frozenset({"pbs", "lsf"})
DOWN_EXIT = 75  # the gate's exit status when the ping failed (EX_TEMPFAIL)
_MARK = "@@fedhpc-controller-down"

# The gate, as shell: the ping under its deadline, and the call ended with DOWN_EXIT (the
# ping's status and words on stderr) unless it answered. "Answered": exit 0, or the text that
# means alive whatever the status (Slurm's " is UP": a backup controller serving counts). A
# ping missing from the PATH (127) decides nothing: the command runs as it did before. The ping
# reads no stdin (a probe's script arrives there).
_TEST = (
    'if [ "$rc" -ne 0 ] && [ "$rc" -ne 127 ] && { [ -z "$up" ] || [[ $out != *"$up"* ]]; }; '
    f'then printf "%s %s\\n%s\\n" {_MARK} "$rc" "$out" >&2; exit {DOWN_EXIT}; fi'
)
# An argv command: bash -c GATE fedhpc DEADLINE ALIVE_TEXT ARGC PING... COMMAND...
_GATE = (
    't=$1 up=$2 n=$3; shift 3; out=$(timeout -k 1 "$t" "${@:1:$n}" </dev/null 2>&1); rc=$?; '
    f'{_TEST}; shift "$n"; exec "$@"'
)


class ControllerDown(TransportError):
    """The site's scheduler controller did not answer its ping: the site is lost for now."""

    code = "controller_down"
    default_hint = (
        "The site's scheduler is down or hung; fedhpc probes it again and moves queued work "
        "that may run elsewhere."
    )


class ControllerSilent(ControllerDown):
    """The ping got no answer within its deadline (no "down" said): a hung controller, or
    one too loaded to answer in time. The collector asks again at once before it takes the
    site offline, so one slow answer is no lost site (`Collector`)."""


@dataclass(frozen=True, slots=True)
class Ping:
    """A scheduler's liveness command and how to read a failed one in one line."""

    command: Command
    problem: Callable[[CommandResult], str | None]
    alive_text: str = ""


def ping_of(dialect: str) -> Ping | None:
    """The ping of a scheduler dialect; None for one without a controller (`process`)."""
    if dialect == "slurm":
        return Ping(slurm_discover.ping_command(), slurm_discover.ping_problem, " is UP")
    if dialect == "pbs":
        return Ping(pbs_discover.ping_command(), pbs_discover.ping_problem)
    if dialect == "lsf":
        return Ping(lsf_discover.ping_command(), lsf_discover.ping_problem)
    return None


def suspect_ping_s(cycle_s: float, ping_timeout_s: float = PING_TIMEOUT_S) -> float:
    """The observation's ping deadline at a control cycle of `cycle_s` (5 s at the default
    10 s cycle, 1 s at 2 s), never over the probe's `ping_timeout_s`."""
    return min(ping_timeout_s, max(SUSPECT_PING_MIN_S, cycle_s / 2))


def gated(command: Command, ping: Ping, *, ping_timeout_s: float = PING_TIMEOUT_S) -> Command:
    """`command` behind `ping`, as one remote call, within `command`'s own deadline: a
    script on stdin (`bash -s`, the batched probe) gets the gate as its first line; any other
    command runs under a `bash -c` gate. Its environment and idempotence are kept."""
    if command.argv == ("bash", "-s") and command.stdin is not None:
        head = (
            f"t={quote(f'{ping_timeout_s:g}')} up={quote(ping.alive_text)}; "
            f'out=$(timeout -k 1 "$t" {shell_line(ping.command.argv)} </dev/null 2>&1); rc=$?; '
            f"{_TEST}"
        )
        return replace(command, stdin=f"{head}\n{command.stdin}", commands=command.commands + 1)
    argv = ping.command.argv
    limit, up, n = f"{ping_timeout_s:g}", ping.alive_text, str(len(argv))
    return replace(
        command,
        argv=("bash", "-c", _GATE, "fedhpc", limit, up, n, *argv, *command.argv),
        commands=command.commands + 1,  # the ping is a scheduler command too
    )


def down_in(
    result: CommandResult,
    ping: Ping,
    *,
    site: str,
    dialect: str,
    ping_timeout_s: float = PING_TIMEOUT_S,
) -> ControllerDown | SchedulerBusy | None:
    """What a gated call's result says about the controller: None when the ping answered (the
    result is the command's own); `SchedulerBusy` when the ping's words say the scheduler is
    shedding load (backed off, never a lost site); `ControllerSilent` when it said nothing in
    time; else why it is taken for down."""
    if result.returncode != DOWN_EXIT or _MARK not in result.stderr:
        return None
    tail = result.stderr[result.stderr.index(_MARK) + len(_MARK) :]
    code, _, text = tail.strip().partition("\n")
    rc = int(code) if code.strip().lstrip("-").isdigit() else 1
    name = " ".join(ping.command.argv)
    if busy := busy_reason(dialect, rc, text, ""):
        return SchedulerBusy(f"{site}: `{name}`: the {dialect} scheduler is busy: {busy}")
    if rc in (124, 137):  # timeout(1): no answer in time
        why = f"the controller did not answer `{name}` within {ping_timeout_s:g} s"
        return ControllerSilent(f"{site}: {why}")
    why = ping.problem(CommandResult(rc, text, "")) or f"`{name}` exited {rc}"
    return ControllerDown(f"{site}: {why}")
