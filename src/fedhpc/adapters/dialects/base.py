"""The dialect seam: a pure module that builds scheduler commands and parses their output."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from fedhpc.adapters.command import BatchSection, Command, CommandResult
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec
from fedhpc.domain.site import SiteProfile, SiteState
from fedhpc.errors import PermanentError

__all__ = ["Dialect", "SchedulerRejected"]


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
        """The probe commands; the site adapter batches them into one remote call."""
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
