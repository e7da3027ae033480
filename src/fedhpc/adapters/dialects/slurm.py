"""Slurm dialect: sbatch scripts, squeue/sacct/scancel argv, and the batched capacity probe."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime

from fedhpc.adapters.command import BatchSection, Command, CommandResult, batch, split_batch
from fedhpc.adapters.dialects import slurm_parse as parse
from fedhpc.adapters.dialects import slurm_probe
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.busy import check_busy, check_busy_lookup, check_busy_sections
from fedhpc.adapters.dialects.common import (
    array_script,
    check_names,
    directive,
    error_text,
    extra_directives,
    io_directives,
    parse_name_pairs,
    render_body,
    with_balance,
)
from fedhpc.adapters.transport_error import TransportError
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec
from fedhpc.domain.site import SiteProfile, SiteState
from fedhpc.domain.units import format_hms

__all__ = ["SlurmDialect", "StartPrediction"]

StartPrediction = parse.StartPrediction

# Every command sets SLURM_TIME_FORMAT=%s so times come back as epoch seconds: no guessing
# of the cluster's time zone (slurm.conf(5), "SLURM_TIME_FORMAT" in sacct(1)/squeue(1)).
_ENV = {"SLURM_TIME_FORMAT": "%s"}

SQUEUE_FORMAT = "%i|%T|%r|%P|%N|%j"
SACCT_FIELDS = (
    "JobID,State,Account,Partition,Submit,Eligible,Start,End,ElapsedRaw,ExitCode,AllocTRES,JobName"
)
NODE_STATE_FORMAT = "%R|%a|%T|%D"
QUEUE_COUNT_FORMAT = "%P|%T|%u|%r"
SSHARE_FIELDS = "Account,User,RawShares,RawUsage"
_NONE = BatchSection("none", 0, "")


def _ids(job_ids: Sequence[str]) -> str:
    for j in job_ids:
        if not j.replace("_", "").isdigit():
            raise ValueError(f"not a Slurm job id: {j!r}")
    return ",".join(job_ids)


class SlurmDialect:
    """Slurm >= 20.11. Pure: argv builders, a script renderer and parsers."""

    name = "slurm"
    prefix = "#SBATCH"

    def render_script(self, spec: JobSpec, profile: SiteProfile) -> str:
        d = self.prefix
        shape = spec.shape
        conv = profile.conventions
        part = profile.partition(spec.partition)
        lines = ["#!/bin/bash", directive(d, "--job-name", spec.name)]
        if part.submit_partition:
            lines.append(directive(d, "--partition", part.scheduler_partition or part.name))
        if part.constraint:
            lines.append(directive(d, "--constraint", part.constraint))
        if spec.account:
            lines.append(directive(d, "--account", spec.account))
        qos = spec.qos or part.default_qos
        if qos:
            lines.append(directive(d, "--qos", qos))
        lines.append(directive(d, "--nodes", shape.nodes))
        lines.append(directive(d, "--ntasks-per-node", 1))
        lines.append(directive(d, "--cpus-per-task", shape.cpus))
        if shape.gpus and conv.gpu_request_style != "none":
            gres_type = self._gres_type(profile, spec.partition, shape.accelerator_type)
            typed = f"{gres_type}:{shape.gpus}" if shape.accelerator_type and gres_type else None
            if conv.gpu_request_style == "gres":
                value = f"gpu:{gres_type}:{shape.gpus}" if gres_type else f"gpu:{shape.gpus}"
                lines.append(directive(d, "--gres", value))
            elif conv.gpu_request_style == "gpus":
                lines.append(directive(d, "--gpus", typed or shape.gpus * shape.nodes))
            else:
                lines.append(directive(d, "--gpus-per-node", typed or shape.gpus))
        if shape.memory_mib and conv.memory_request:
            lines.append(directive(d, "--mem", f"{shape.memory_mib}M"))
        lines.append(directive(d, "--time", format_hms(shape.wall_time_s)))
        lines.extend(io_directives(d, spec))
        if spec.comment:  # the person it runs for (service mode): squeue %k, sacct Comment
            lines.append(directive(d, "--comment", spec.comment))
        if spec.array:
            a = spec.array
            value = f"{a.start}-{a.stop}:{a.step}" + (f"%{a.limit}" if a.limit else "")
            lines.append(directive(d, "--array", value))
        lines.extend(extra_directives(d, profile))
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
        """`--array=0-N%T` over `members` (their shared header from the first), Slurm's own
        output per element in `output_dir/%A_%a.{out,err}`, each element's in its files."""
        return array_script(
            self.render_script,
            members,
            profile,
            name=name,
            throttle=throttle,
            stdout=f"{output_dir}/%A_%a.out",
            stderr=f"{output_dir}/%A_%a.err",
            index_var="SLURM_ARRAY_TASK_ID",
        )

    def element_id(self, job_id: str, index: int) -> str:
        return f"{job_id}_{index}"

    def parent_id(self, job_id: str) -> str:
        return job_id.split("_", 1)[0]

    def array_outputs(self, output_dir: str, element_id: str) -> tuple[str, str]:
        return f"{output_dir}/{element_id}.out", f"{output_dir}/{element_id}.err"  # %A_%a

    @staticmethod
    def _gres_type(profile: SiteProfile, partition: str, wanted: str | None) -> str | None:
        try:
            acc = profile.partition(partition).node.accelerator
        except KeyError:
            return wanted
        if acc is None:
            return wanted
        if wanted is None or wanted == acc.type:
            return acc.gres_type
        return wanted

    def submit_command(self, script: str) -> Command:
        return Command(("sbatch", "--parsable"), stdin=script, env=_ENV, idempotent=False)

    def parse_submit(self, result: CommandResult) -> str:
        check_busy(result, self.name, "sbatch")
        if not result.ok:
            raise SchedulerRejected(
                error_text(result, last_line_only=True), hint="Check account, partition, QoS."
            )
        first = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        job_id = first.split(";")[0].strip()
        if not job_id.isdigit():
            raise SchedulerRejected(f"sbatch printed no job id: {result.stdout.strip()!r}")
        return job_id

    def test_only_command(self, script: str) -> Command:
        """`sbatch --test-only`: the scheduler's own start estimate, nothing is submitted."""
        return Command(("sbatch", "--test-only"), stdin=script, env=_ENV)

    def parse_test_only(self, result: CommandResult) -> StartPrediction:
        return parse.parse_test_only(result)

    def status_command(self, job_ids: Sequence[str]) -> Command:
        argv = ("squeue", "--noheader", "--array", f"--jobs={_ids(job_ids)}")
        return Command((*argv, f"--format={SQUEUE_FORMAT}"), env=_ENV)

    def parse_status(self, result: CommandResult) -> list[JobObservation]:
        check_busy(result, self.name, "squeue")
        return parse.parse_squeue(result)

    def accounting_command(self, job_ids: Sequence[str]) -> Command:
        argv = ("sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={_ids(job_ids)}")
        return Command((*argv, f"--format={SACCT_FIELDS}"), env=_ENV)

    def user_jobs_command(self, user: str, since_s: int) -> Command:
        """`sacct` for every job of `user` active in the last `since_s` seconds, fedhpc's or not:
        what the learned wait estimator learns from (read by `iter_user_jobs`, streamed)."""
        # What --starttime selects, checked on the devfed (slurm 22.05.8, no --state): every
        # job eligible, running or ended within the window, so a job that runs across a read's
        # edge is in both reads (kept once, by job id), and so is a pending job that is
        # eligible (State PENDING, Start Unknown: not an observation until a later read sees it
        # start). A held job (Eligible Unknown) is in no window until released; a job that
        # ended before the window is not in it. --endtime cuts the same way: a job running
        # across it is in the windows on both sides. Epoch seconds are refused as a time
        # ("Invalid time specification") even with SLURM_TIME_FORMAT=%s: `now-Nseconds` is
        # relative, so no guess about the cluster's time zone. The answer is read as a stream
        # rather than in time slices: a sweep's thousands of jobs fall within minutes, which no
        # fixed slice would split (tests/integration/test_estimates_devfed.py).
        argv = (
            "sacct",
            "--noheader",
            "--parsable2",
            "--allocations",
            f"--user={user}",
            f"--starttime=now-{max(int(since_s), 1)}seconds",
        )
        return Command((*argv, f"--format={SACCT_FIELDS}"), env=_ENV)

    def parse_accounting(
        self, result: CommandResult, *, now: datetime | None = None
    ) -> list[AccountingRecord]:
        check_busy(result, self.name, "sacct")
        # Times are epoch seconds (SLURM_TIME_FORMAT=%s): `now` is not needed.
        return parse.parse_sacct(result)

    def iter_user_jobs(
        self, lines: Iterable[str], skip_name: Callable[[str], bool] | None = None
    ) -> Iterator[AccountingRecord]:
        """`user_jobs_command`'s rows one at a time, from its stdout's lines as they arrive (a
        sweep leaves tens of thousands in the window), without those whose job name `skip_name`
        refuses. The caller checks the exit status."""
        return parse.iter_sacct_lines(lines, skip_name)

    def cancel_command(self, job_ids: Sequence[str]) -> Command:
        return Command(("scancel", *(_ids([j]) for j in job_ids)), env=_ENV)

    def find_command(self, names: Sequence[str]) -> Command:
        """squeue (live jobs) and sacct (finished ones, last 7 days) by name, in one call."""
        joined = ",".join(check_names(names))
        return batch(
            {
                "live": Command(
                    ("squeue", "--noheader", f"--name={joined}", "--format=%i|%j"), env=_ENV
                ),
                "done": Command(
                    (
                        "sacct",
                        "--noheader",
                        "--parsable2",
                        "--allocations",
                        "--starttime=now-7days",
                        f"--name={joined}",
                        "--format=JobID,JobName",
                    ),
                    env=_ENV,
                ),
            }
        )

    def parse_find(self, result: CommandResult) -> dict[str, str]:
        """Names found by squeue or sacct. Either failing (a rate limiter's refusal comes
        back as a bare non-zero status: batched sections drop stderr) proves nothing about a
        name not found, which the caller would submit again: that is a TransportError."""
        check_busy_lookup(result, self.name)
        sections = split_batch(result.stdout)
        silent = [k for k in ("live", "done") if k in sections and sections[k].returncode]
        if silent:
            raise TransportError(f"find: {' and '.join(silent)} lookup did not answer")
        found: dict[str, str] = {}
        for key in ("live", "done"):
            for name, job in parse_name_pairs(sections.get(key, _NONE).stdout, "|").items():
                found.setdefault(name, job.split("_", 1)[0])
        return found

    def probe_sections(self, profile: SiteProfile, user: str) -> dict[str, Command]:
        sections = {
            # Queue before nodes: a job squeue saw running is then allocated (or freed) there.
            "queue": Command(
                ("squeue", "--noheader", "--array", f"--format={QUEUE_COUNT_FORMAT}"), env=_ENV
            ),
            "sinfo": Command(("sinfo", "--noheader", f"--format={NODE_STATE_FORMAT}"), env=_ENV),
            "nodes": Command(("scontrol", "--oneliner", "show", "node"), env=_ENV),
            # Billing weights (TRESBillingWeights): sinfo cannot show them. Optional: the site
            # adapter sends it every few probes only (`BILLING_EVERY_S`), they change rarely.
            slurm_probe.PARTITIONS: Command(
                ("scontrol", "--oneliner", "show", "partition"), env=_ENV
            ),
            "sshare": Command(
                ("sshare", "--noheader", "--parsable2", "--user", user, "--format", SSHARE_FIELDS),
                env=_ENV,
            ),
        }
        return with_balance(sections, profile, _ENV)

    def parse_probe(
        self,
        sections: dict[str, BatchSection],
        profile: SiteProfile,
        user: str,
        collected_at: datetime,
    ) -> SiteState:
        check_busy_sections(sections, self.name, ("nodes", "sinfo"))
        return slurm_probe.parse_probe(sections, profile, user, collected_at)
