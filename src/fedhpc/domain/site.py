"""Static site profiles (what a center is). The live state probes see (what it looks like now)
is `domain/site_state.py`, its names also importable from here."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from fedhpc.domain.envelope import Arch
from fedhpc.domain.site_state import (
    Credit,
    Health,
    NodeStateCounts,
    PartitionState,
    ResourceSnapshot,
    SiteState,
    Unread,
)
from fedhpc.domain.units import MAX_COUNT, MAX_CREDITS, MiB, Seconds

__all__ = [
    "SAFE_NAME",
    "Accelerator",
    "ChargeKind",
    "ChargeModel",
    "ContainerSupport",
    "Credit",
    "DialectName",
    "Health",
    "NodeShape",
    "NodeStateCounts",
    "PartitionSpec",
    "PartitionState",
    "ResourceSnapshot",
    "SafeName",
    "SiteConventions",
    "SiteProfile",
    "SiteState",
    "StorageRoot",
    "TransportSpec",
    "Unread",
]

# Names that reach a scheduler directive (partition, account, QoS, site): no spaces, quotes or
# shell metacharacters, so a directive line can never be broken out of.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")

DialectName = Literal["slurm", "pbs", "lsf", "process"]


def _check_name(value: str) -> str:
    if not SAFE_NAME.match(value):
        raise ValueError(f"{value!r} is not a valid name (letters, digits, '_', '.', '+', '-')")
    return value


_EXTRA_DIRECTIVE = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(?:[ =][A-Za-z0-9_./%~+@=,:&|\[\]-]+)?$")

SafeName = Annotated[str, AfterValidator(_check_name)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Accelerator(_Frozen):
    """One kind of accelerator in a node."""

    type: str = Field(description="lower-case model, e.g. 'a100', 'h100', 'gh200', 'mi250'")
    memory_gib: float = Field(gt=0, le=MAX_COUNT)
    count: int = Field(ge=1, le=MAX_COUNT, description="per node")
    gres: str | None = Field(default=None, description="GRES type name when it differs from type")

    @field_validator("type")
    @classmethod
    def _lower(cls, v: str) -> str:
        return _check_name(v.lower())

    @property
    def gres_type(self) -> str:
        return self.gres or self.type


class NodeShape(_Frozen):
    """What one node of a partition offers to a job."""

    cpus: int = Field(
        ge=1, le=MAX_COUNT, description="cores (or hardware threads) a job may request per node"
    )
    memory_mib: MiB = Field(gt=0, description="memory a job may request per node")
    accelerator: Accelerator | None = None
    count: int = Field(
        default=1, ge=1, le=MAX_COUNT, description="nodes of this shape in the partition"
    )


class ChargeKind(StrEnum):
    """What a site's allocation is charged in."""

    NODE_HOURS = "node-hours"
    GPU_HOURS = "gpu-hours"
    CORE_HOURS = "core-hours"


class ChargeModel(_Frozen):
    """How a job's charge is computed: units x hours x rate, per partition if overridden."""

    kind: ChargeKind
    rate: float = Field(default=1.0, ge=0, le=MAX_CREDITS, description="credits per unit-hour")
    unit: str = Field(default="SU", description="what the center calls a credit")
    whole_node: bool = Field(default=False, description="nodes are charged whole (exclusive)")
    follow_scheduler: bool = Field(
        default=False,
        description="the partition's billing weights the daemon reads from the scheduler "
        "(Slurm TRESBillingWeights) replace this charge where set; false: this figure wins",
    )


class PartitionSpec(_Frozen):
    """A partition (Slurm) or queue (PBS, LSF) and its limits."""

    name: SafeName
    node: NodeShape
    max_nodes_per_job: int = Field(default=1, ge=1, le=MAX_COUNT)
    max_wall_s: Seconds = Field(gt=0)
    default_wall_s: Seconds | None = None
    min_nodes_per_job: int = Field(default=1, ge=1, le=MAX_COUNT)
    qos: tuple[SafeName, ...] = Field(default=(), description="QoS names usable here")
    default_qos: SafeName | None = None
    max_jobs_per_user: int | None = Field(default=None, ge=1)
    arch: Arch | None = Field(default=None, description="overrides the site's architecture")
    charge: ChargeModel | None = Field(default=None, description="overrides the site charge")
    scheduler_partition: SafeName | None = Field(
        default=None, description="the scheduler's own name when it differs from `name`"
    )
    submit_partition: bool = Field(
        default=True,
        description="False where the site selects nodes by constraint/QoS, not --partition",
    )
    constraint: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_&|.:-]+$",
        description="Slurm --constraint that selects this partition's nodes, e.g. 'gpu&hbm80g'",
    )
    account_suffix: str | None = Field(
        default=None,
        description="account naming convention, e.g. '-gpu' for Delta's bXXX-delta-gpu",
    )
    notes: str = ""

    @model_validator(mode="after")
    def _nodes(self) -> Self:
        if self.min_nodes_per_job > self.max_nodes_per_job:
            raise ValueError(
                f"min_nodes_per_job ({self.min_nodes_per_job}) exceeds "
                f"max_nodes_per_job ({self.max_nodes_per_job})"
            )
        return self


class ContainerSupport(_Frozen):
    """Container runtimes available on compute nodes and how to invoke them."""

    runtimes: tuple[str, ...] = Field(default=())
    # How the runtime wraps a command; {image} and {gpu_flag} are filled in, the command follows.
    exec_template: str = Field(default="apptainer exec {gpu_flag} {image}")
    gpu_flag: str = Field(default="--nv")


class SiteConventions(_Frozen):
    """Account and QoS conventions: how users name their allocations here."""

    account_pattern: str = Field(default="", description="e.g. 'bXXX-delta-{cpu|gpu}'")
    account_required: bool = True
    qos_required: bool = False
    balance_command: tuple[str, ...] = Field(
        default=(), description="argv that prints the allocation balance, e.g. ('mybalance',)"
    )
    gpu_request_style: Literal["gres", "gpus", "gpus-per-node", "none"] = Field(
        default="gpus-per-node",
        description="how GPUs are asked for; 'none' where whole nodes come with their GPUs",
    )
    memory_request: bool = Field(default=True, description="False where --mem is rejected")
    prologue: tuple[str, ...] = Field(
        default=(), description="fixed shell lines run before the task (module loads)"
    )
    extra_directives: tuple[str, ...] = Field(
        default=(),
        description="directives every job needs here, e.g. '-l filesystems=home:eagle'",
    )

    @field_validator("extra_directives")
    @classmethod
    def _directives(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for d in v:
            if not _EXTRA_DIRECTIVE.match(d):
                raise ValueError(f"{d!r} is not a directive of the form '-x value' or '--name=v'")
        return v


class TransportSpec(_Frozen):
    """How fedhpc reaches the site's login side."""

    kind: Literal["local", "ssh", "globus-compute"] = "ssh"
    host: str | None = Field(default=None, description="ssh host or alias")
    user: str | None = None
    endpoint_id: str | None = Field(default=None, description="Globus Compute endpoint UUID")
    env: dict[str, str] = Field(default_factory=dict, description="environment for every command")
    options: dict[str, str] = Field(default_factory=dict, description="extra transport options")


class StorageRoot(_Frozen):
    """A named storage area at a site, addressable by Globus if it has a collection id."""

    name: str
    path: str
    collection_id: str | None = None
    purged_after_days: int | None = None


class SiteProfile(_Frozen):
    """Static truth about one site, from its public documentation or the local federation."""

    name: SafeName = Field(description="short id used everywhere, e.g. 'delta'")
    title: str = ""
    center: str = ""
    docs: tuple[str, ...] = Field(default=(), description="documentation URLs the profile is from")
    dialect: DialectName
    arch: Arch
    partitions: tuple[PartitionSpec, ...] = Field(min_length=1)
    blocked_partitions: tuple[str, ...] = Field(
        default=(), description="partitions fedhpc never places on (debug, interactive, ...)"
    )
    containers: ContainerSupport = Field(default_factory=ContainerSupport)
    conventions: SiteConventions = Field(default_factory=SiteConventions)
    charge: ChargeModel
    transport: TransportSpec = Field(default_factory=TransportSpec)
    storage: tuple[StorageRoot, ...] = Field(default=())
    min_refresh_s: int = Field(
        default=60, ge=1, le=86400, description="never probe more often than this"
    )
    # Scheduler etiquette: centers ask for squeue no more than every 120-180 s per user, and
    # Slurm's rate limiter (rl_enable: a bucket of 30 requests refilled 2/s per user) answers
    # "Socket timed out" past it. 60 commands a minute in bursts of 20 stays under it.
    status_floor_s: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description="observe jobs (status, find, accounting) at most this often",
    )
    max_commands_per_min: int | None = Field(
        default=None,
        ge=1,
        le=6000,
        description="cap on scheduler commands sent per minute; default 60",
    )
    max_pending_per_user: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="your pending jobs at the site at most; fedhpc holds the rest back",
    )
    local_test: bool = Field(default=False, description="part of the local test federation")
    notes: str = ""

    @property
    def _local(self) -> bool:
        """The local test federation or local processes: nobody's scheduler to spare."""
        return self.local_test or self.dialect == "process"

    @property
    def status_floor(self) -> int:
        """Seconds between two observations of this site's jobs: none unless set (each
        shipped center sets it to what its admins ask)."""
        return 0 if self.status_floor_s is None else self.status_floor_s

    @property
    def command_cap(self) -> int:
        """Scheduler commands a minute this site is sent at most (sustained)."""
        if self.max_commands_per_min is not None:
            return self.max_commands_per_min
        return 6000 if self._local else 60

    @model_validator(mode="after")
    def _partitions(self) -> Self:
        names = [p.name for p in self.partitions]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"partition names repeat: {sorted(dup)}")
        unknown = set(self.blocked_partitions) - set(names)
        if unknown:
            raise ValueError(f"blocked_partitions names unknown partitions: {sorted(unknown)}")
        return self

    def partition(self, name: str) -> PartitionSpec:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(f"site {self.name} has no partition {name!r}")

    def charge_for(self, partition: PartitionSpec) -> ChargeModel:
        """The charge model of one of this site's partitions: its own, else the site's. Takes
        the partition rather than its name: placement calls this per candidate."""
        return partition.charge or self.charge

    def arch_of(self, partition: str) -> Arch:
        return self.partition(partition).arch or self.arch
