"""The dialect seam: a pure module that builds scheduler commands and parses their output."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from fedhpc.adapters.command import BatchSection, Command, CommandResult
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec
from fedhpc.domain.site import SiteProfile, SiteState
from fedhpc.errors import PermanentError

__all__ = ["OCCASIONAL_SECTION", "ArrayDialect", "Dialect", "SchedulerRejected"]

# A probe section whose answer changes rarely (Slurm's partition settings: billing weights):
# the site adapter sends it with the first probe and then every `BILLING_EVERY_S` only, and
# puts the weights it read last in the states of the probes without it. `parse_probe` reads
# the weights when it is there, and marks them `unread` when it failed (the collector keeps
# the last reading).
OCCASIONAL_SECTION = "partitions"


class SchedulerRejected(PermanentError):
    """The scheduler refused a submission (bad account, partition, limits)."""

    code = "scheduler_rejected"


class Dialect(Protocol):
    """A scheduler's language. Pure: never runs anything, never reads the clock.

    Every agent-supplied value reaches a script or a command only as a validated field of
    `JobSpec` (names and paths in a conservative charset) or through `command.quote`.
    """

    name: str

    def render_script(self, spec: JobSpec, profile: SiteProfile) -> str:
        """The batch script: directives from the spec, then prologue, env and the quoted argv."""
        ...

    def submit_command(self, script: str) -> Command:
        """Submit `script` (fed on stdin). Not idempotent: retried only with an idempotency key."""
        ...

    def parse_submit(self, result: CommandResult) -> str:
        """The scheduler's job id, or `SchedulerRejected` with the scheduler's reason."""
        ...

    def status_command(self, job_ids: Sequence[str]) -> Command: ...

    def parse_status(self, result: CommandResult) -> list[JobObservation]:
        """One observation per job or array element; jobs the scheduler forgot are absent."""
        ...

    def accounting_command(self, job_ids: Sequence[str]) -> Command: ...

    def parse_accounting(
        self, result: CommandResult, *, now: datetime | None = None
    ) -> list[AccountingRecord]:
        """Accounting rows; `now` resolves schedulers that print times without a year (LSF)."""
        ...

    def cancel_command(self, job_ids: Sequence[str]) -> Command: ...

    def find_command(self, names: Sequence[str]) -> Command:
        """Look our jobs up by name (fedhpc-<task>-<attempt>): how a restarted daemon finds a
        job whose id it never recorded. Names are ours, validated job names."""
        ...

    def parse_find(self, result: CommandResult) -> dict[str, str]:
        """Job name -> scheduler job id, for every name the scheduler knows."""
        ...

    def probe_sections(self, profile: SiteProfile, user: str) -> dict[str, Command]:
        """The probe commands; the site adapter batches them into one remote call (leaving
        out `OCCASIONAL_SECTION` on most probes)."""
        ...

    def parse_probe(
        self,
        sections: dict[str, BatchSection],
        profile: SiteProfile,
        user: str,
        collected_at: datetime,
    ) -> SiteState:
        """Partition records, accounts and usage from the probe's sections."""
        ...


class ArrayDialect(Dialect, Protocol):
    """A scheduler that runs job arrays: many fedhpc jobs of one shape in one submission, each
    an element with an id of its own (`element_id`) that status, accounting and cancel take."""

    def render_array(
        self,
        members: Sequence[JobSpec],
        profile: SiteProfile,
        name: str,
        *,
        throttle: int | None,
        output_dir: str,
    ) -> str:
        """One array script whose element i runs `members[i]` (its command, folder and output
        files); the members differ only in those. At most `throttle` elements run at once;
        what the scheduler itself writes goes to `output_dir`, one file per element."""
        ...

    def element_id(self, job_id: str, index: int) -> str:
        """The id of the element that runs members[index] of the array `job_id` (what
        `parse_submit` gave): `index` counts members from 0, whatever the scheduler's first
        index (LSF's is 1: members[0] is '123[1]')."""
        ...

    def parent_id(self, job_id: str) -> str:
        """The array's id for an element's id (any other job's id unchanged)."""
        ...

    def array_outputs(self, output_dir: str, element_id: str) -> tuple[str, str]:
        """The files the scheduler itself wrote for element `element_id` in `output_dir`
        (stdout, stderr): what `render_array` named there."""
        ...
