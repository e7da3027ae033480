"""Job scripts brought by users: `#SBATCH`, `#PBS` and `#BSUB` headers read into envelope
bounds, every directive with its fate, the body kept unchanged. Pure: no I/O."""

from fedhpc.domain.jobscript.envelope import script_command, script_envelope
from fedhpc.domain.jobscript.model import Directive, Fate, Request, Scheduler
from fedhpc.domain.jobscript.script import MAX_SCRIPT_CHARS, JobScript, parse_script

__all__ = [
    "MAX_SCRIPT_CHARS",
    "Directive",
    "Fate",
    "JobScript",
    "Request",
    "Scheduler",
    "parse_script",
    "script_command",
    "script_envelope",
]
