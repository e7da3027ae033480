"""The `process` dialect: sites whose jobs run as local processes under a local batch scheduler
(the development tooling's, shipped in the same distribution), addressed through a setting and
never imported.

Every command is `<python> -m <FEDHPC_PROCESS_SCHEDULER> VERB ...`; the scheduler's state folder
comes from the site's transport environment (`FEDHPC_LOCALSCHED_ROOT`), as `SLURM_CONF` does for
Slurm. The probe carries the partitions' capacity from the profile, so the scheduler always
runs with the profile's numbers.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fedhpc.adapters.command import BatchSection, Command, CommandResult
from fedhpc.adapters.dialects import process_parse as parse
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.busy import check_busy, check_busy_lookup, check_busy_sections
from fedhpc.adapters.dialects.common import (
    check_names,
    directive,
    error_text,
    io_directives,
    render_body,
    with_balance,
)
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec
from fedhpc.domain.site import SAFE_NAME, SiteProfile, SiteState
from fedhpc.settings import LOCALSCHED_ROOT, PROCESS_SCHEDULER

__all__ = ["ROOT_ENV", "ProcessDialect", "accounts_of", "config_of"]

ROOT_ENV = LOCALSCHED_ROOT.name
_ALTERNATIVES = re.compile(r"\{([^{}]*)\}")


def accounts_of(profile: SiteProfile) -> list[str]:
    """The accounts a process site accepts: its account pattern with each '{a|b}' expanded
    ('fedhpc-{cpu|gpu}' -> fedhpc-cpu, fedhpc-gpu); none (any account) without a pattern."""
    names = [profile.conventions.account_pattern] if profile.conventions.account_pattern else []
    while any(_ALTERNATIVES.search(n) for n in names):
        out = []
        for n in names:
            m = _ALTERNATIVES.search(n)
            if m is None:
                out.append(n)
                continue
            out.extend(n[: m.start()] + alt + n[m.end() :] for alt in m.group(1).split("|"))
        names = out
    return [n for n in dict.fromkeys(names) if SAFE_NAME.match(n)]


def config_of(profile: SiteProfile) -> dict[str, Any]:
    """The scheduler configuration a profile implies: one partition per profile partition."""
    parts = []
    for p in profile.partitions:
        acc = p.node.accelerator
        parts.append(
            {
                "name": p.name,
                "nodes": p.node.count,
                "cpus": p.node.cpus,
                "memory_mib": p.node.memory_mib,
                "max_wall_s": p.max_wall_s,
                "gpus": acc.count if acc else 0,
                "gpu_type": acc.type if acc else None,
            }
        )
    return {"partitions": parts, "accounts": accounts_of(profile)}


def _ids(job_ids: Sequence[str]) -> str:
    for j in job_ids:
        if not j.isdigit():
            raise ValueError(f"not a localsched job id: {j!r}")
    return ",".join(job_ids)


class ProcessDialect:
    """The local-process scheduler. Pure: argv builders, a script renderer and parsers. `python`
    is the interpreter that has fedhpc installed (default: this one); `scheduler` the module
    it runs (default: `FEDHPC_PROCESS_SCHEDULER`, read once here)."""

    name = "process"
    prefix = "#LOCALSCHED"

    def __init__(self, python: str | None = None, scheduler: str | None = None) -> None:
        self.python = python or sys.executable
        self.scheduler = scheduler or PROCESS_SCHEDULER.get() or ""

    def _cmd(self, *args: str, stdin: str | None = None, idempotent: bool = True) -> Command:
        argv = (self.python, "-m", self.scheduler, *args)
        return Command(argv, stdin=stdin, idempotent=idempotent)

    def render_script(self, spec: JobSpec, profile: SiteProfile) -> str:
        if spec.array is not None:
            raise ValueError("the process scheduler runs no job arrays; submit one job per task")
        d, shape = self.prefix, spec.shape
        lines = ["#!/bin/bash", directive(d, "--job-name", spec.name)]
        lines.append(directive(d, "--partition", spec.partition))
        if spec.account:
            lines.append(directive(d, "--account", spec.account))
        lines.append(directive(d, "--nodes", shape.nodes))
        lines.append(directive(d, "--cpus", shape.cpus))
        if shape.gpus:
            lines.append(directive(d, "--gpus", shape.gpus))
        if shape.memory_mib and profile.conventions.memory_request:
            lines.append(directive(d, "--mem", shape.memory_mib))
        lines.append(directive(d, "--time", shape.wall_time_s))
        lines.extend(io_directives(d, spec))
        # The profile's extra_directives name another scheduler's options: not rendered here.
        lines.extend(render_body(spec, profile))
        return "\n".join(lines) + "\n"

    def submit_command(self, script: str) -> Command:
        return self._cmd("submit", stdin=script, idempotent=False)

    def parse_submit(self, result: CommandResult) -> str:
        check_busy(result, self.name, "localsched submit")
        if not result.ok:
            raise SchedulerRejected(
                error_text(result, last_line_only=True), hint="Check account and partition."
            )
        out = result.stdout.strip()
        job_id = out.splitlines()[-1].strip() if out else ""
        if not job_id.isdigit():
            raise SchedulerRejected(f"localsched printed no job id: {out!r}")
        return job_id

    def status_command(self, job_ids: Sequence[str]) -> Command:
        return self._cmd("queue", "--jobs", _ids(job_ids))

    def parse_status(self, result: CommandResult) -> list[JobObservation]:
        check_busy(result, self.name, "localsched status")
        return parse.parse_queue(result)

    def accounting_command(self, job_ids: Sequence[str]) -> Command:
        return self._cmd("acct", "--jobs", _ids(job_ids))

    def parse_accounting(
        self, result: CommandResult, *, now: datetime | None = None
    ) -> list[AccountingRecord]:
        check_busy(result, self.name, "localsched acct")
        # Times are ISO 8601 with their zone: `now` is not needed.
        return parse.parse_acct(result)

    def cancel_command(self, job_ids: Sequence[str]) -> Command:
        return self._cmd("cancel", *(_ids([j]) for j in job_ids))

    def find_command(self, names: Sequence[str]) -> Command:
        return self._cmd("find", *check_names(names))

    def parse_find(self, result: CommandResult) -> dict[str, str]:
        check_busy_lookup(result, self.name)
        return parse.parse_find(result)

    def probe_sections(self, profile: SiteProfile, user: str) -> dict[str, Command]:
        config = json.dumps(config_of(profile), sort_keys=True)
        sections = {"probe": self._cmd("probe", f"--user={user}", f"--config={config}")}
        return with_balance(sections, profile)

    def parse_probe(
        self,
        sections: dict[str, BatchSection],
        profile: SiteProfile,
        user: str,
        collected_at: datetime,
    ) -> SiteState:
        check_busy_sections(sections, self.name, ("probe",))
        return parse.parse_probe(sections, profile, user, collected_at)
