"""`SubmitsOneByOne`: the batched-submission surface (`SiteAdapter.submit_many`) for a test's
fake site adapter that defines only `submit`. Each job is submitted in turn and answered as the
real adapter answers it: its job, or the refusal or folder failure that kept it from one; a
transport failure raises for the whole call, as one remote call would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.site import SubmittedJob, WorkdirFailed
from fedhpc.domain.job import JobSpec
from fedhpc.errors import FedError


class SubmitsOneByOne:
    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        raise NotImplementedError

    async def submit_many(
        self, jobs: Sequence[tuple[JobSpec, Sequence[str]]]
    ) -> list[SubmittedJob | FedError | None]:
        out: list[Any] = []
        for spec, dirs in jobs:
            try:
                out.append(await self.submit(spec, ensure_dirs=dirs))
            except (SchedulerRejected, WorkdirFailed) as exc:
                out.append(exc)
        return out
