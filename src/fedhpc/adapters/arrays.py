"""Job arrays (issue 40): many fedhpc jobs of one shape submitted as ONE scheduler command,
each element keeping its own output files, folder and command (`ArrayDialect.render_array`).
`ArrayJob` is one entry of a batched submission (`SiteAdapter.submit_many`); its answer is one
job per member, each with its element's id (Slurm `A_i`, PBS `123[i].server`, LSF `123[i+1]`:
LSF's indices start at 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fedhpc.adapters.dialects import Dialect
from fedhpc.adapters.dialects.base import ArrayDialect
from fedhpc.domain.job import JobSpec

__all__ = ["ARRAY_MAX", "THROTTLE", "ArrayJob", "array_dialect"]

# Elements per array: Slurm's default MaxArraySize is 1001 (indices 0-1000); PBS's
# max_array_size defaults to 10,000 subjobs (pbs_server_attributes(7B)); LSF's
# MAX_JOB_ARRAY_SIZE (lsb.params) defaults to 1000, the highest index (bsub(1) -J).
ARRAY_MAX = 1000
# At most this many elements of one array run at once (the `%T` of Slurm's `--array=0-N%T`,
# PBS's `-J 0-N%T`, LSF's `-J name[1-N]%T`): an array never takes a whole partition from the
# center's other users in one go.
THROTTLE = 256


@dataclass(frozen=True, slots=True)
class ArrayJob:
    """One array submission: `members` (element i, on LSF i+1, runs members[i]) under the job
    name `name`, the folders to make first (the members' and `output_dir`), at most
    `throttle` running."""

    name: str
    members: Sequence[JobSpec]
    dirs: Sequence[str]
    output_dir: str
    throttle: int | None = THROTTLE


def array_dialect(dialect: Dialect) -> ArrayDialect | None:
    """`dialect` when its scheduler runs arrays (Slurm, PBS, LSF), else None (one job each)."""
    if all(hasattr(dialect, m) for m in ("render_array", "element_id", "parent_id")):
        return dialect  # type: ignore[return-value]
    return None
