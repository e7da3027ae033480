"""Render the local test federation's slurm.conf, gres.conf and slurmdbd.conf from its plan."""

from __future__ import annotations

from collections.abc import Iterable

from fedhpc.domain.units import format_hms
from fedhpc_dev.devfed.plan import ClusterPlan, FederationPlan

__all__ = ["render_gres_conf", "render_slurm_conf", "render_slurmdbd_conf"]


def _lines(pairs: Iterable[tuple[str, object]]) -> list[str]:
    return [f"{k}={v}" for k, v in pairs]


def render_slurm_conf(plan: FederationPlan, cluster: ClusterPlan) -> str:
    """slurm.conf for one cluster; everything it writes lives under the cluster's folder."""
    d = cluster.dir
    tres = ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in cluster.gpu_types())])
    head = _lines(
        [
            ("ClusterName", cluster.name),
            ("SlurmctldHost", f"{plan.hostname}(127.0.0.1)"),
            ("SlurmctldPort", cluster.ctld_port),
            ("SlurmdPort", cluster.ctld_port + 1),
            ("SlurmUser", "root"),
            ("AuthType", "auth/munge"),
            ("AuthInfo", f"socket={plan.munge_socket}"),
            ("StateSaveLocation", d / "state"),
            ("SlurmdSpoolDir", d / "spool" / "%n"),
            ("SlurmctldPidFile", cluster.ctld_pid),
            ("SlurmdPidFile", cluster.run_dir / "slurmd-%n.pid"),
            ("SlurmctldLogFile", cluster.log_dir / "slurmctld.log"),
            ("SlurmdLogFile", cluster.log_dir / "slurmd-%n.log"),
            ("SlurmctldDebug", "info"),
            ("SlurmdDebug", "info"),
            # Containers have no cgroup delegation; these plugins need none.
            ("ProctrackType", "proctrack/linuxproc"),
            ("TaskPlugin", "task/none"),
            ("MpiDefault", "none"),
            # Nodes pretend to be bigger than this machine (64 CPUs, 128 GiB, GPUs).
            ("SlurmdParameters", "config_overrides"),
            ("SchedulerType", "sched/backfill"),
            ("SchedulerParameters", "bf_interval=2,sched_interval=5"),
            ("SelectType", "select/cons_tres"),
            ("SelectTypeParameters", "CR_Core_Memory"),
            # Without it a job takes the node's whole RealMemory and jobs serialize.
            ("DefMemPerCPU", 1024),
            # Reject at submit a job over a partition's limits (as the real centers do) instead
            # of leaving it PENDING forever with reason PartitionTimeLimit.
            ("EnforcePartLimits", "ALL"),
            ("GresTypes", "gpu"),
            ("PriorityType", "priority/multifactor"),
            ("ReturnToService", 2),
            ("MinJobAge", 30),
            ("KillWait", 5),
            ("SlurmdTimeout", 60),
            ("InactiveLimit", 0),
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
            ("AccountingStorageHost", "127.0.0.1"),
            ("AccountingStoragePort", plan.dbd_port),
            # For slurmdbd connections this names the munge socket, not a password.
            ("AccountingStoragePass", plan.munge_socket),
            ("AccountingStorageEnforce", "associations"),
            ("AccountingStorageTRES", tres),
            ("JobAcctGatherType", "jobacct_gather/linux"),
            ("JobAcctGatherFrequency", 30),
            ("JobCompType", "jobcomp/none"),
            ("MailProg", "/bin/true"),  # no mail here; the default /bin/mail is absent
        ]
    )
    nodes = []
    for n in cluster.nodes:
        gres = f" Gres=gpu:{n.gpu_type}:{n.gpus}" if n.gpu_type else ""
        nodes.append(
            f"NodeName={n.name} NodeHostname={plan.hostname} NodeAddr=127.0.0.1 Port={n.port}"
            f" CPUs={n.cpus} RealMemory={n.memory_mib} Features={n.feature}{gres} State=UNKNOWN"
        )
    parts = []
    for p in cluster.partitions:
        extra = f" DefaultTime={format_hms(p.default_time_s)}" if p.default_time_s else ""
        parts.append(
            f"PartitionName={p.name} Nodes={','.join(p.nodes)} MaxTime={format_hms(p.max_time_s)}"
            f" MaxNodes={p.max_nodes} MinNodes={p.min_nodes}{extra}"
            f" Default={'YES' if p.default else 'NO'} State=UP"
        )
    banner = f"# Written by `fedhpc devfed up` for cluster {cluster.name}; edits are overwritten."
    return "\n".join([banner, *head, *nodes, *parts]) + "\n"


def render_gres_conf(cluster: ClusterPlan) -> str:
    """gres.conf naming each node's fake GPU files (see `ClusterPlan.gpu_links`)."""
    lines = [f"# Written by `fedhpc devfed up` for cluster {cluster.name}."]
    for n in cluster.nodes:
        if n.gpu_type:
            files = cluster.dir / "dev" / n.name / f"gpu[0-{n.gpus - 1}]"
            lines.append(f"NodeName={n.name} Name=gpu Type={n.gpu_type} File={files}")
    return "\n".join(lines) + "\n"


def render_slurmdbd_conf(plan: FederationPlan, storage_pass: str) -> str:
    """slurmdbd.conf (must be mode 0600): one slurmdbd on loopback for every cluster."""
    body = _lines(
        [
            ("AuthType", "auth/munge"),
            ("AuthInfo", f"socket={plan.munge_socket}"),
            ("DbdHost", "localhost"),
            ("DbdAddr", "127.0.0.1"),
            ("DbdPort", plan.dbd_port),
            ("SlurmUser", "root"),
            ("PidFile", plan.pid_file("slurmdbd")),
            ("LogFile", plan.log_file("slurmdbd")),
            ("DebugLevel", "info"),
            ("StorageType", "accounting_storage/mysql"),
            ("StorageHost", "127.0.0.1"),
            ("StoragePort", plan.mysql_port),
            ("StorageUser", "slurm"),
            ("StoragePass", storage_pass),
            ("StorageLoc", "slurm_acct_db"),
        ]
    )
    return "\n".join(["# Written by `fedhpc devfed up`; edits are overwritten.", *body]) + "\n"
