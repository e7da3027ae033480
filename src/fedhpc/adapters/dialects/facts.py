"""What a scheduler tells about itself, as plain data: the output of every dialect's discovery
parser and the input of `build.discovery`. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from fedhpc.adapters.command import BatchSection, Command

__all__ = [
    "STORAGE_VARS",
    "AssociationFacts",
    "ClusterFacts",
    "LoginFacts",
    "PartitionFacts",
    "login_command",
    "parse_login",
]


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """One partition (Slurm) or queue (PBS, LSF) as its scheduler describes it."""

    name: str
    cpus: int
    memory_mib: int
    nodes: int
    gpu_type: str | None = None
    gpus: int = 0
    max_wall_s: int | None = None
    default_wall_s: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 1
    allowed_qos: tuple[str, ...] = ()  # empty: any QoS
    qos: str | None = None  # the partition's own QoS (Slurm `QoS=`)
    max_jobs_per_user: int | None = None
    max_submit_per_user: int | None = None
    arch: str | None = None
    available: bool = True
    preemptible: bool = False
    other_shapes: tuple[str, ...] = ()  # node shapes besides the most common one
    # Slurm `TRESBillingWeights`: (TRES, weight per unit-hour), memory per GiB; empty: not set
    billing_weights: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class AssociationFacts:
    """One of the user's associations (Slurm sacctmgr) or equivalent project membership."""

    account: str
    partition: str | None = None  # None: every partition
    qos: tuple[str, ...] = ()
    default_qos: str | None = None
    max_jobs: int | None = None
    max_submit: int | None = None
    max_wall_s: int | None = None


@dataclass(frozen=True, slots=True)
class LoginFacts:
    """What the login side says about the session: user, CPU architecture, the storage the
    environment names, and container runtimes on PATH."""

    user: str | None = None
    arch: str | None = None
    storage: Mapping[str, str] = field(default_factory=dict)
    runtimes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """Everything one discovery learned."""

    dialect: str
    cluster: str | None
    partitions: tuple[PartitionFacts, ...]
    associations: tuple[AssociationFacts, ...] = ()
    qos_names: tuple[str, ...] = ()
    login: LoginFacts = field(default_factory=LoginFacts)
    problems: tuple[str, ...] = ()  # sections that failed, said to the person


# Environment variables centers use for their storage areas (Delta, TACC, NERSC, ALCF...).
STORAGE_VARS = ("HOME", "SCRATCH", "WORK", "PROJECT", "PSCRATCH", "CFS", "WORK2", "STOCKYARD")
RUNTIMES = ("apptainer", "singularity", "podman-hpc", "enroot", "charliecloud", "shifter")

# A fixed script: nothing in it comes from a person or an agent.
_LOGIN_SCRIPT = (
    'echo "user=$(id -un)"; echo "arch=$(uname -m)"; '
    f"for v in {' '.join(STORAGE_VARS)}; do "
    'eval "p=\\${$v:-}"; [ -n "$p" ] && echo "storage.$v=$p"; done; '
    f"for c in {' '.join(RUNTIMES)}; do "
    'command -v "$c" >/dev/null 2>&1 && echo "runtime=$c"; done; true'
)


def login_command() -> Command:
    """The login-side facts in one command (a section of every dialect's discovery batch)."""
    return Command(("bash", "-c", _LOGIN_SCRIPT))


_PATH = re.compile(r"^/[A-Za-z0-9_./+@=,:~-]*$")


def parse_login(section: BatchSection | None) -> LoginFacts:
    if section is None or section.returncode != 0:
        return LoginFacts()
    user = arch = None
    storage: dict[str, str] = {}
    runtimes: list[str] = []
    for line in section.stdout.splitlines():
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "user" and value:
            user = value
        elif key == "arch" and value:
            arch = value
        elif key.startswith("storage.") and _PATH.match(value):
            storage[key.removeprefix("storage.").lower()] = value
        elif key == "runtime" and value in RUNTIMES:
            runtimes.append(value)
    return LoginFacts(user=user, arch=arch, storage=storage, runtimes=tuple(runtimes))
