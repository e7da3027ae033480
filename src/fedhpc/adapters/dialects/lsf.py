"""IBM Spectrum LSF dialect: bsub scripts on stdin, bjobs/bkill argv, the batched probe."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

from fedhpc.adapters.command import BatchSection, Command, CommandResult, batch
from fedhpc.adapters.dialects import lsf_parse as parse
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
from fedhpc.domain.units import format_minutes

__all__ = ["LsfDialect"]

_JOB_ID = re.compile(r"^\d+(?:\[\d+\])?$")
# An element's id: '123[4]', what bjobs, bkill and bhist take (bjobs(1): "job_ID[index]").
_ELEMENT_ID = re.compile(r"^(?P<job>\d+)\[(?P<idx>\d+)\]$")
# An array element's job name: the array's name and its index, 'name[4]' (bjobs JOB_NAME).
_ELEMENT_NAME = re.compile(r"^(?P<name>.+)\[\d+\]$")
_SUBMITTED = re.compile(r"^Job <(\d+)> is submitted", re.MULTILINE)

# bjobs -o field names (bjobs(1) "-o"); -json prints them upper-case under RECORDS.
STATUS_FIELDS = "jobid jobindex job_name stat queue exec_host exit_code exit_reason pend_reason"
ACCOUNTING_FIELDS = (
    "jobid jobindex job_name stat queue proj_name exit_code exit_reason "
    "submit_time start_time finish_time run_time slots exec_host"
)
PROBE_JOB_FIELDS = "jobid stat queue user proj_name"
HOST_FIELDS = "host_name status max njobs run ssusp ususp rsv"
GPU_FIELDS = "host_name ngpus ngpus_alloc"  # LSF 10.1 GPU fields of bhosts -o
QUEUE_FIELDS = "queue_name status"


class LsfDialect:
    """IBM Spectrum LSF >= 10.1.0.2 (-json output). Pure: argv builders and parsers.

    `tz` is the cluster's time zone: bjobs prints local times such as 'Dec 28 19:56' with no
    zone and usually no year (default UTC).
    """

    name = "lsf"
    prefix = "#BSUB"

    def __init__(self, tz: tzinfo = UTC) -> None:
        self.tz = tz

    def render_script(self, spec: JobSpec, profile: SiteProfile) -> str:
        d = self.prefix
        shape = spec.shape

        def opt(flag: str, value: str | int) -> str:
            # '#BSUB -x value': directive() admits no quotes or spaces, so each resource
            # string (span[...], rusage[...]) goes on its own -R line, which LSF 10.1 merges.
            return directive(d, flag, value, sep=" ")

        job_name = spec.name
        if spec.array is not None:
            a = spec.array
            if a.start < 1:
                raise ValueError("LSF array indices start at 1 (bsub -J 'name[1-N]')")
            job_name = f"{spec.name}[{a.start}-{a.stop}:{a.step}]" + (
                f"%{a.limit}" if a.limit else ""
            )
        lines = ["#!/bin/bash", opt("-J", job_name), opt("-q", spec.partition)]
        if spec.account:
            lines.append(opt("-P", spec.account))
        lines.append(opt("-W", format_minutes(shape.wall_time_s)))
        # -n counts slots for the whole job; ptile puts `cpus` of them on each host.
        lines.append(opt("-n", shape.nodes * shape.cpus))
        span = "span[hosts=1]" if shape.nodes == 1 else f"span[ptile={shape.cpus}]"
        lines.append(opt("-R", span))
        if shape.gpus:
            lines.append(opt("-gpu", f"num={shape.gpus}"))  # num is per host (bsub -gpu)
        if shape.memory_mib and profile.conventions.memory_request:
            # -M limits the job's memory per host; rusage reserves per slot by default.
            per_slot = -(-shape.memory_mib // shape.cpus)
            lines.append(opt("-M", f"{shape.memory_mib}MB"))
            lines.append(opt("-R", f"rusage[mem={per_slot}MB]"))
        if spec.stdout:
            lines.append(opt("-o", spec.stdout))
        if spec.stderr:
            lines.append(opt("-e", spec.stderr))
        if spec.workdir:
            lines.append(opt("-cwd", spec.workdir))
        lines.extend(extra_directives(d, profile))  # site-wide, e.g. -alloc_flags smt4
        lines.extend(render_body(spec, profile))
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
        """`-J 'name[1-N]%T'` over `members` (their shared header from the first): LSF's
        indices start at 1 (bsub(1) -J), so element i+1 runs members[i], its index in
        LSB_JOBINDEX. LSF's own output per element goes to `output_dir/%J_%I.{out,err}` (bsub
        -o/-e: %J is the job id, %I the element's index), each element's in its own files."""
        return array_script(
            self.render_script,
            members,
            profile,
            name=name,
            throttle=throttle,
            stdout=f"{output_dir}/%J_%I.out",
            stderr=f"{output_dir}/%J_%I.err",
            index_var="LSB_JOBINDEX",
            first=1,
        )

    def element_id(self, job_id: str, index: int) -> str:
        """'123' -> '123[5]' for members[4]: the element's id, which bjobs, bkill and
        bhist take (`index` counts members from 0, LSF's indices from 1)."""
        if not job_id.isdigit():
            raise ValueError(f"not a LSF array id: {job_id!r}")
        return f"{job_id}[{index + 1}]"

    def parent_id(self, job_id: str) -> str:
        m = _ELEMENT_ID.match(job_id)
        return job_id if m is None else m.group("job")

    def array_outputs(self, output_dir: str, element_id: str) -> tuple[str, str]:
        m = _ELEMENT_ID.match(element_id)
        name = element_id if m is None else f"{m.group('job')}_{m.group('idx')}"  # %J_%I
        return f"{output_dir}/{name}.out", f"{output_dir}/{name}.err"

    def submit_command(self, script: str) -> Command:
        # '#BSUB' lines are honoured only when the script comes on stdin (bsub(1)).
        return Command(("bsub",), stdin=script, idempotent=False)

    def parse_submit(self, result: CommandResult) -> str:
        check_busy(result, self.name, "bsub")
        m = _SUBMITTED.search(result.stdout)
        if result.returncode != 0 or m is None:
            raise SchedulerRejected(
                f"bsub rejected the job: {error_text(result, last_line_only=False)}"
            )
        return m.group(1)

    def status_command(self, job_ids: Sequence[str]) -> Command:
        # -a: include jobs that finished within CLEAN_PERIOD (lsb.params, default 1 hour).
        ids = check_ids(job_ids, _JOB_ID, "LSF")
        return Command(("bjobs", "-a", "-json", "-o", STATUS_FIELDS, *ids))

    def parse_status(self, result: CommandResult) -> list[JobObservation]:
        check_busy(result, self.name, "bjobs")
        return parse.parse_status(result)

    def accounting_command(self, job_ids: Sequence[str]) -> Command:
        ids = check_ids(job_ids, _JOB_ID, "LSF")
        return Command(("bjobs", "-a", "-json", "-o", ACCOUNTING_FIELDS, *ids))

    def parse_accounting(
        self, result: CommandResult, *, now: datetime | None = None
    ) -> list[AccountingRecord]:
        """Records from bjobs. bjobs prints no year, so times are placed by `now` (when the
        command ran); without it only stamps that carry a year are kept."""
        check_busy(result, self.name, "bjobs")
        return parse.parse_accounting(result, self.tz, now)

    def find_command(self, names: Sequence[str]) -> Command:
        """bjobs -a -J per name (finished jobs within CLEAN_PERIOD too), one call in all."""
        sections = {
            f"n{i}": Command(("bjobs", "-a", "-noheader", "-o", "jobid job_name", "-J", name))
            for i, name in enumerate(check_names(names))
        }
        return batch(sections)

    def parse_find(self, result: CommandResult) -> dict[str, str]:
        """Name -> job id. bjobs -J names an array's elements 'name[4]' (and, with
        LSB_BJOBS_DISPLAY_ENH=Y, prints their ids as '123[4]'): each is its array's, found
        under the array's name with the array's id."""
        check_busy_lookup(result, self.name)
        found: dict[str, str] = {}
        for name, job_id in parse_found(result).items():
            element = _ELEMENT_NAME.match(name)
            found.setdefault(element.group("name") if element else name, self.parent_id(job_id))
        return found

    def cancel_command(self, job_ids: Sequence[str]) -> Command:
        return Command(("bkill", *check_ids(job_ids, _JOB_ID, "LSF")))

    def probe_sections(self, profile: SiteProfile, user: str) -> dict[str, Command]:
        check_user(user)
        queues = tuple(p.name for p in profile.partitions)
        sections = {
            # Jobs before hosts: a job bjobs saw running is then allocated (or freed) there.
            "jobs": Command(("bjobs", "-u", "all", "-json", "-o", PROBE_JOB_FIELDS)),
            "queues": Command(("bqueues", "-o", QUEUE_FIELDS, "-json", *queues)),
            # The HOSTS line of bqueues -l says which hosts and host groups serve a queue.
            "queuehosts": Command(("bqueues", "-l", *queues)),
            "groups": Command(("bmgroup", "-w")),
            "hosts": Command(("bhosts", "-o", HOST_FIELDS, "-json")),
            "gpus": Command(("bhosts", "-o", GPU_FIELDS, "-json")),
            "load": Command(("lsload", "-w", "-I", "mem")),
        }
        return with_balance(sections, profile)

    def parse_probe(
        self,
        sections: dict[str, BatchSection],
        profile: SiteProfile,
        user: str,
        collected_at: datetime,
    ) -> SiteState:
        check_busy_sections(sections, self.name, ("hosts",))
        return parse.parse_probe(sections, profile, user, collected_at)
