"""devpolaris as data: vnodes and queues from its profile, and the files PBS reads (pure)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fedhpc.domain.site import SiteProfile
from fedhpc.domain.units import format_hms

__all__ = [
    "DATA_PORT",
    "GPU_MODEL",
    "SERVER_PORT",
    "VNODE_SCRIPT",
    "PbsPlan",
    "QueuePlan",
    "VnodePlan",
    "pbs_profile",
    "plan_pbs",
    "qmgr_script",
    "render_mom_config",
    "render_pbs_conf",
    "render_vnodes",
]

# PBS's own default ports (pbs.conf(8B)) for server, mom and comm; the datastore (PBS's own
# PostgreSQL, started by pbs_server) on PBS's default 15007, apart from any other PostgreSQL.
SERVER_PORT = 15001
DATA_PORT = 15007
# The mom's vnode definitions (pbs_mom -s insert NAME FILE): one vnode per profile node.
VNODE_SCRIPT = "fedhpc_vnodes"
GPU_MODEL = "gpu_model"  # a custom host-level string resource naming the GPU type
HOME_ROOT = Path("/var/spool")


@dataclass(frozen=True, slots=True)
class VnodePlan:
    """One pretend node: a vnode of the single mom, tied to one queue."""

    name: str
    queue: str
    cpus: int
    memory_mib: int
    gpus: int
    gpu_type: str | None
    arch: str


@dataclass(frozen=True, slots=True)
class QueuePlan:
    """One execution queue: the profile's partition with its wall and node caps."""

    name: str
    max_wall_s: int
    default_wall_s: int | None
    max_nodes: int


@dataclass(frozen=True, slots=True)
class PbsPlan:
    """The PBS cluster under `{root}/{name}`: its pbs.conf, PBS_HOME, logs and storage."""

    name: str
    dir: Path
    hostname: str
    vnodes: tuple[VnodePlan, ...]
    queues: tuple[QueuePlan, ...]

    @property
    def conf(self) -> Path:
        return self.dir / "pbs.conf"

    @property
    def home(self) -> Path:
        """PBS_HOME: never below a world-writable folder such as /var/tmp, which pbs_mom's
        chk_file_sec refuses ("Security violation ... resolves to /var/tmp")."""
        return HOME_ROOT / f"fedhpc-{self.name}"

    @property
    def bin(self) -> Path:
        """A symlink to the build's bin/, so the profile's PATH does not name the hash."""
        return self.dir / "bin"

    @property
    def log_dir(self) -> Path:
        return self.dir / "log"

    def env(self) -> dict[str, str]:
        path = os.environ.get("PATH", "/usr/bin:/bin")
        return {"PBS_CONF_FILE": str(self.conf), "PATH": f"{self.bin}:{path}"}


def _slug(partition: str) -> str:
    return "".join(c for c in partition.lower() if c.isalnum())


def plan_pbs(profile: SiteProfile, root: Path, hostname: str) -> PbsPlan:
    """A vnode per node of each partition (named like the Slurm nodes: `prod-1`)."""
    vnodes: list[VnodePlan] = []
    queues: list[QueuePlan] = []
    for spec in profile.partitions:
        acc = spec.node.accelerator
        for i in range(1, spec.node.count + 1):
            vnodes.append(
                VnodePlan(
                    name=f"{_slug(spec.name)}-{i}",
                    queue=spec.name,
                    cpus=spec.node.cpus,
                    memory_mib=spec.node.memory_mib,
                    gpus=acc.count if acc else 0,
                    gpu_type=acc.type if acc else None,
                    arch=str(profile.arch_of(spec.name)),
                )
            )
        queues.append(
            QueuePlan(spec.name, spec.max_wall_s, spec.default_wall_s, spec.max_nodes_per_job)
        )
    return PbsPlan(profile.name, root / profile.name, hostname, tuple(vnodes), tuple(queues))


def pbs_profile(profiles: Iterable[SiteProfile]) -> SiteProfile | None:
    """The local-test profile that runs on PBS (devpolaris), if one ships."""
    return next((p for p in profiles if p.local_test and p.dialect == "pbs"), None)


def render_pbs_conf(plan: PbsPlan, prefix: Path) -> str:
    lines = [
        f"PBS_EXEC={prefix}",
        f"PBS_HOME={plan.home}",
        # The cluster's own host name (an /etc/hosts alias of this machine's non-loopback
        # address): PBS skips 127.x addresses and will not start on a loopback-only name.
        f"PBS_SERVER={plan.name}",
        f"PBS_MOM_NODE_NAME={plan.name}",
        f"PBS_LEAF_NAME={plan.name}",
        f"PBS_COMM_NAME={plan.name}",
        "PBS_START_SERVER=1",
        "PBS_START_SCHED=1",
        "PBS_START_COMM=1",
        "PBS_START_MOM=1",
        "PBS_CORE_LIMIT=unlimited",
        f"PBS_DATA_SERVICE_PORT={DATA_PORT}",
    ]
    return "\n".join(lines) + "\n"


def render_mom_config(plan: PbsPlan) -> str:
    # $usecp: output files are copied with cp (one host), never with scp/rcp.
    return f"$clienthost {plan.name}\n$usecp *:/ /\n$logevent 0x1ff\n"


def render_vnodes(plan: PbsPlan) -> str:
    """Version-2 vnode definitions (pbs_mom(8B) -s): the mom's natural vnode takes no jobs
    (ncpus 0, as on multi-vnode HPE/Cray hosts); each planned vnode is its own `host`, so
    `place=scatter` can spread chunks over them."""
    h = plan.name
    lines = [
        "$configversion 2",
        f"{h}: resources_available.ncpus = 0",
        f"{h}: resources_available.mem = 0",
    ]
    for v in plan.vnodes:
        avail = {
            "ncpus": v.cpus,
            "mem": f"{v.memory_mib}mb",
            "ngpus": v.gpus,
            "arch": v.arch,
            "host": v.name,
        }
        if v.gpu_type:
            avail[GPU_MODEL] = v.gpu_type
        lines.extend(f"{v.name}: resources_available.{k} = {val}" for k, val in avail.items())
    return "\n".join(lines) + "\n"


def qmgr_script(plan: PbsPlan) -> list[str]:
    """Server and queue settings; every line may be run again (`set` is idempotent)."""
    out = [
        "set server acl_roots = root",  # root's jobs run (tests run as root)
        "set server flatuid = True",
        "set server job_history_enable = True",
        "set server scheduler_iteration = 10",
        f"set server default_queue = {plan.queues[0].name}",
    ]
    for q in plan.queues:
        out += [
            f"set queue {q.name} queue_type = Execution",
            f"set queue {q.name} resources_max.walltime = {format_hms(q.max_wall_s)}",
            f"set queue {q.name} resources_max.nodect = {q.max_nodes}",
            f"set queue {q.name} enabled = True",
            f"set queue {q.name} started = True",
        ]
        if q.default_wall_s:
            out.append(
                f"set queue {q.name} resources_default.walltime = {format_hms(q.default_wall_s)}"
            )
    return out
