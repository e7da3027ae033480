"""Per-person sites (service mode, `identity = "person"`): a batch of submissions split by the
person each job runs for, each part issued as that person (`acting_for`), the answers put back
in the batch's order. The person is the one the dispatcher wrote into the job's environment
(`settings.JOB_FOR`); a job without one runs as the service."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from fedhpc.adapters.arrays import ArrayJob
from fedhpc.adapters.transports.base import TransportError
from fedhpc.domain.job import JobSpec
from fedhpc.errors import FedError
from fedhpc.globus_auth.people import acting_for
from fedhpc.settings import JOB_FOR

__all__ = ["owner_of", "submit_by_person"]

Job = tuple[JobSpec, Sequence[str]] | ArrayJob
T = TypeVar("T")


def owner_of(job: Job) -> str | None:
    """The person `job` runs for (an array's members are one task group's: one person)."""
    spec = job.members[0] if isinstance(job, ArrayJob) else job[0]
    return spec.env.get(JOB_FOR.name)


async def submit_by_person(
    submit: Callable[[Sequence[Job]], Awaitable[list[T]]], jobs: Sequence[Job]
) -> list[T | FedError | None]:
    """`submit` once per person among `jobs` (first seen first), as that person; per job (an
    array's members each in turn), the answer in `jobs`' order. One person's failure is
    theirs alone, never the others' (whose jobs may be queued already): a login or consent
    they lack, or any other refusal of their part, answers their jobs with it; a transport
    failure leaves their answers unknown (None: found by name later)."""
    sizes = [len(j.members) if isinstance(j, ArrayJob) else 1 for j in jobs]
    starts = [sum(sizes[:k]) for k in range(len(jobs))]
    people: dict[str | None, list[int]] = {}
    for k, job in enumerate(jobs):
        people.setdefault(owner_of(job), []).append(k)
    out: list[T | FedError | None] = [None] * sum(sizes)
    for person, ks in people.items():
        n = sum(sizes[k] for k in ks)
        try:
            with acting_for(person):
                got: list[T | FedError | None] = list(await submit([jobs[k] for k in ks]))
        except TransportError:
            got = [None] * n
        except FedError as exc:  # a login they lack, or their identity's refusal (404, 400)
            got = [exc] * n
        at = 0
        for k in ks:
            out[starts[k] : starts[k] + sizes[k]] = got[at : at + sizes[k]]
            at += sizes[k]
    return out
