"""PBS Pro dialect: qsub scripts, qstat/qdel argv, and the batched pbsnodes/qstat probe."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

from fedhpc.adapters.command import BatchSection, Command, CommandResult, batch
from fedhpc.adapters.dialects import pbs_parse as parse
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.busy import check_busy, check_busy_lookup, check_busy_sections
from fedhpc.adapters.dialects.common import (
    array_script,
    check_names,
    error_text,
    extra_directives,
    parse_found,
    render_body,
    with_balance,
)
from fedhpc.adapters.dialects.pbs_lsf_util import (
    check_ids,
    check_user,
    directive,
)
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec
from fedhpc.domain.site import SiteProfile, SiteState
from fedhpc.domain.units import format_hms

__all__ = ["PbsDialect"]

# '123.server', '123[].server' (array), '123[4].server' (subjob); the server part is optional.
_JOB_ID = re.compile(r"^\d+(?:\[\d*\])?(?:\.[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
# An array's id or a subjob's: sequence number, index (empty for the array), '.server' or ''.
_ARRAY_ID = re.compile(r"^(?P<seq>\d+)\[(?P<idx>\d*)\](?P<rest>.*)$")
# Full status with history (-x) and every subjob of an array (-t): qstat(1B).
_QSTAT_JOBS = ("qstat", "-f", "-F", "json", "-x", "-t")
# The probe's jobs of one user ($1): ids from the scheduler, split on purpose; none: '{}'.
_USER_JOBS = (
    'ids=$(qselect -u "$1") || exit; [ -n "$ids" ] || { echo "{}"; exit 0; }; '
    "exec qstat -f -F json -x $ids"
)


class PbsDialect:
    """PBS Professional / OpenPBS >= 19 (qstat -F json). Pure: argv builders and parsers.

    `tz` is the PBS server's time zone: qstat prints times such as 'Thu Nov 27 10:00:00 2025'
    in server local time without a zone, so accounting needs it to produce UTC (default UTC).
    """

    name = "pbs"
    prefix = "#PBS"

    def __init__(self, tz: tzinfo = UTC) -> None:
        self.tz = tz

    def render_script(self, spec: JobSpec, profile: SiteProfile) -> str:
        d = self.prefix
        shape = spec.shape
        # -S: run the body under bash whatever the user's login shell (qsub(1B)).
        lines = ["#!/bin/bash", directive(d, "-S", "/bin/bash", sep=" ")]
        lines.append(directive(d, "-N", spec.name, sep=" "))
        lines.append(directive(d, "-q", spec.partition, sep=" "))
        if spec.account:
            lines.append(directive(d, "-A", spec.account, sep=" "))
        # One chunk per node: select=N:ncpus=C[:ngpus=G][:mem=Mmb] (pbs_resources(7B)).
        chunk = [f"select={shape.nodes}", f"ncpus={shape.cpus}"]
        if shape.gpus:
            chunk.append(f"ngpus={shape.gpus}")
        if shape.memory_mib and profile.conventions.memory_request:
            chunk.append(f"mem={shape.memory_mib}mb")
        lines.append(directive(d, "-l", ":".join(chunk), sep=" "))
        if shape.nodes > 1:
            lines.append(directive(d, "-l", "place=scatter", sep=" "))
        lines.append(directive(d, "-l", f"walltime={format_hms(shape.wall_time_s)}", sep=" "))
        if spec.stdout:
            lines.append(directive(d, "-o", spec.stdout, sep=" "))
        if spec.stderr:
            lines.append(directive(d, "-e", spec.stderr, sep=" "))
        if spec.array is not None:
            a = spec.array
            rng = f"{a.start}-{a.stop}:{a.step}"
            # '%N' caps running subjobs: qsub -J "X-Y[:Z][%max subjobs]", the job's
            # max_run_subjobs (qsub(1B) of OpenPBS 23.06; older PBS Pro lacks it).
            lines.append(directive(d, "-J", f"{rng}%{a.limit}" if a.limit else rng, sep=" "))
        # PBS has no working-directory directive: start where qsub ran unless spec.workdir.
        lines.extend(extra_directives(d, profile))  # site-wide, e.g. -l filesystems=...
        lines.extend(render_body(spec, profile, workdir_var="PBS_O_WORKDIR"))
        return "\n".join(lines) + "\n"

    def render_array(
        self,
        members: Sequence[JobSpec],
        profile: SiteProfile,
        name: str,
        *,
        throttle: int | None,
        output_dir: str,
    ) -> str:
        """`-J 0-N%T` over `members` (their shared header from the first); subjob i runs
        members[i], its index in PBS_ARRAY_INDEX. PBS's own output per subjob goes to
        `output_dir` (a folder as -o/-e path), as '<subjob id>.OU' and '.ER' (OpenPBS 23.06
        copies its spool files there under their own names)."""
        if len(members) < 2:
            raise ValueError("a PBS array has at least 2 subjobs (qsub -J X-Y needs X < Y)")
        return array_script(
            self.render_script,
            members,
            profile,
            name=name,
            throttle=throttle,
            stdout=f"{output_dir}/",  # a folder: PBS names each subjob's files itself
            stderr=f"{output_dir}/",
            index_var="PBS_ARRAY_INDEX",
        )

    def element_id(self, job_id: str, index: int) -> str:
        """'123[].server' -> '123[4].server': the subjob's id, which qstat and qdel take."""
        m = _ARRAY_ID.match(job_id)
        if m is None or m.group("idx"):
            raise ValueError(f"not a PBS array id: {job_id!r}")
        return f"{m.group('seq')}[{index}]{m.group('rest')}"

    def parent_id(self, job_id: str) -> str:
        m = _ARRAY_ID.match(job_id)
        return job_id if m is None else f"{m.group('seq')}[]{m.group('rest')}"

    def array_outputs(self, output_dir: str, element_id: str) -> tuple[str, str]:
        return f"{output_dir}/{element_id}.OU", f"{output_dir}/{element_id}.ER"

    def submit_command(self, script: str) -> Command:
        # qsub with no script operand reads the script from stdin (qsub(1B)).
        return Command(("qsub",), stdin=script, idempotent=False)

    def parse_submit(self, result: CommandResult) -> str:
        check_busy(result, self.name, "qsub")
        out = result.stdout.strip()
        last = out.splitlines()[-1].strip() if out else ""
        if result.returncode != 0 or not _JOB_ID.match(last):
            raise SchedulerRejected(
                f"qsub rejected the job: {error_text(result, last_line_only=False)}"
            )
        return last

    def status_command(self, job_ids: Sequence[str]) -> Command:
        return Command((*_QSTAT_JOBS, *check_ids(job_ids, _JOB_ID, "PBS")))

    def parse_status(self, result: CommandResult) -> list[JobObservation]:
        check_busy(result, self.name, "qstat")
        return parse.parse_status(result)

    def accounting_command(self, job_ids: Sequence[str]) -> Command:
        # Finished jobs stay in qstat -x for the server's job_history_duration (default 2 weeks).
        return Command((*_QSTAT_JOBS, *check_ids(job_ids, _JOB_ID, "PBS")))

    def parse_accounting(
        self, result: CommandResult, *, now: datetime | None = None
    ) -> list[AccountingRecord]:
        check_busy(result, self.name, "qstat -x")
        # PBS prints full dates in the server's zone (self.tz): `now` is not needed.
        return parse.parse_accounting(result, self.tz)

    def find_command(self, names: Sequence[str]) -> Command:
        """qselect -x -N per name (PBS Pro: -x includes finished jobs), one call in all."""
        sections = {
            f"n{i}": Command(
                (
                    "sh",
                    "-c",
                    'for j in $(qselect -x -N "$1"); do echo "$j $1"; done',
                    "fedhpc",
                    name,
                )
            )
            for i, name in enumerate(check_names(names))
        }
        return batch(sections)

    def parse_find(self, result: CommandResult) -> dict[str, str]:
        check_busy_lookup(result, self.name)
        return parse_found(result)

    def cancel_command(self, job_ids: Sequence[str]) -> Command:
        return Command(("qdel", *check_ids(job_ids, _JOB_ID, "PBS")))

    def probe_sections(self, profile: SiteProfile, user: str) -> dict[str, Command]:
        sections = {
            # Jobs before nodes: a job qstat saw running is then allocated (or freed) there.
            "queues": Command(("qstat", "-Q", "-f", "-F", "json")),
            # The user's own jobs only: global counts come from each queue's state_count.
            # `qstat -f -u` is refused ("conflicting options", OpenPBS 23.06): qselect finds
            # the ids, -x keeps one that ends in between from failing the whole call.
            "jobs": Command(("sh", "-c", _USER_JOBS, "fedhpc", check_user(user))),
            "nodes": Command(("pbsnodes", "-a", "-F", "json")),
        }
        return with_balance(sections, profile)

    def parse_probe(
        self,
        sections: dict[str, BatchSection],
        profile: SiteProfile,
        user: str,
        collected_at: datetime,
    ) -> SiteState:
        check_busy_sections(sections, self.name, ("nodes",))
        return parse.parse_probe(sections, profile, user, collected_at)
