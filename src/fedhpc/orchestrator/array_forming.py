"""Which submissions may go as one job array (issue 40): group children that differ only in
what each keeps its own, up to FEDHPC_ARRAY_MAX elements; and which arrays a scheduler refused
for their size, to go again smaller. Pure: the submitter's lanes act on the answers."""

from __future__ import annotations

import re

from fedhpc.adapters.arrays import ARRAY_MAX
from fedhpc.domain.job import JobState
from fedhpc.orchestrator.dispatch import Intent
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.placement import Placement
from fedhpc.placement.estimators import WaitHistory
from fedhpc.settings import ARRAY_MAX as ARRAY_MAX_SETTING

__all__ = ["SIZE_REFUSAL", "Prepared", "array_key", "array_max", "refused_arrays"]

# A placed task ready for its lane: the placement, its written intent (or the attempt that
# failed before any job existed) and the wait history it was placed with.
Prepared = tuple[TaskRecord, Placement, Intent | AttemptRecord, WaitHistory | None]

# What may differ between the members of one array: each keeps its own name, command, folder
# and output files; everything else (shape, partition, account, environment...) is the array's.
_OWN = frozenset({"name", "command", "workdir", "stdout", "stderr"})


# Refusals that say an array is too big (smaller arrays may pass): Slurm's "Invalid job array
# specification" (MaxArraySize) and its submit limits that count elements, PBS's "Array job
# exceeds server or queue size limit", LSF's "Job array index too large. Job not submitted."
# (LSBE_BIG_IDX: an index above MAX_JOB_ARRAY_SIZE). Any other refusal (an account, a login)
# sends the members alone, as before.
SIZE_REFUSAL = re.compile(r"array|MaxSubmit|SubmitJob|size limit", re.IGNORECASE)


def refused_arrays(
    items: list[Prepared], atts: list[AttemptRecord]
) -> dict[str, list[tuple[Prepared, AttemptRecord]]]:
    """The arrays of 4 or more elements in one submit call that were refused whole (every
    member failed), by name: each may go again as smaller arrays (`Submitter._halve`)."""
    by_name: dict[str, list[tuple[Prepared, AttemptRecord]]] = {}
    for item, att in zip(items, atts, strict=True):
        if att.array_name is not None:
            by_name.setdefault(att.array_name, []).append((item, att))
    return {
        name: members
        for name, members in by_name.items()
        if len(members) >= 4
        and all(a.state is JobState.FAILED for _, a in members)
        and SIZE_REFUSAL.search(members[0][1].reason or "") is not None
    }


def array_key(item: Prepared) -> str | None:
    """Equal for group children that can share one array; None for any other job (a hedged
    copy goes alone: it is cancelled on its own when another copy starts)."""
    task, _, prepared, _ = item
    if task.group_id is None or not isinstance(prepared, Intent) or prepared.att.copy_of:
        return None
    return task.group_id + prepared.spec.model_dump_json(exclude=set(_OWN))


def array_max() -> int:
    """Elements per array: FEDHPC_ARRAY_MAX within 1..ARRAY_MAX (a bad value: the default)."""
    raw = ARRAY_MAX_SETTING.get() or ""
    return max(1, min(int(raw), ARRAY_MAX)) if raw.strip().isdigit() else ARRAY_MAX
