"""Small rules of the control cycle's observation: an intent's job found by name, a final
accounting row, an attempt's times from its row, the one error of a task group."""

from __future__ import annotations

from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain.job import AccountingRecord
from fedhpc.orchestrator.records import AttemptRecord

__all__ = ["alone", "copy_times", "final", "intent_job"]


def intent_job(a: AttemptRecord, found: dict[str, str], adapter: SiteAdapter) -> str | None:
    """The job id of an intent found by name: its own job, or its element of the array it
    joined (found by the array's name)."""
    if a.array_name is None or a.array_index is None:
        return found.get(a.job_name)
    array = found.get(a.array_name)
    return None if array is None else adapter.element_id(array, a.array_index)


def final(records: dict[str, AccountingRecord], job_id: str | None) -> bool:
    return (rec := records.get(job_id or "")) is not None and rec.final


def copy_times(a: AttemptRecord, rec: AccountingRecord) -> None:
    a.eligible_at, a.started_at, a.ended_at = rec.eligible, rec.start, rec.end
    a.submitted_at = rec.submit or a.submitted_at
    a.wait_s, a.runtime_s, a.exit_code = rec.wait_s, rec.runtime_s, rec.exit_code


def alone(exc: Exception) -> Exception:
    """The one error inside a task group's `ExceptionGroup` (`Control._ask_unless_lost`),
    else `exc`."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
