"""Bring the local test federation up, report on it, and take it down (all the I/O lives here)."""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import structlog

from fedhpc.domain.site import SAFE_NAME
from fedhpc.profiles import load_profiles
from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.config import render_gres_conf, render_slurm_conf, render_slurmdbd_conf
from fedhpc_dev.devfed.daemons import start_daemon, start_mariadb, start_munge, start_slurmdbd
from fedhpc_dev.devfed.instances import instance_root, read_instance, write_instance
from fedhpc_dev.devfed.pbs import PbsOutcome, pbs_down, pbs_up
from fedhpc_dev.devfed.plan import ACCOUNTS, ClusterPlan, FederationPlan, Instance, plan_federation
from fedhpc_dev.devfed.procs import (
    alive_pid,
    port_open,
    run,
    stop_pids,
    sweep,
    wait_for,
)
from fedhpc_dev.devfed.setup import ensure_packages, prepare_dirs, require_root, write_if_changed
from fedhpc_dev.devfed.status import ClusterStatus, FederationStatus, parse_nodes
from fedhpc_dev.profiles import devfed_root

__all__ = [
    "UpReport",
    "default_plan",
    "down",
    "instance_plan",
    "invoking_users",
    "plan_at",
    "status",
    "up",
]

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class UpReport:
    """What `up` had to do; an empty `started` means the federation was already running."""

    started: list[str] = field(default_factory=list)
    registered: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    pbs: PbsOutcome | None = None  # devpolaris (OpenPBS): up, or why it is absent


def plan_at(root: Path) -> FederationPlan:
    """The federation of the shipped `local_test` profiles under `root`, as the instance
    `devfed up` recorded there (instance 1 when none is)."""
    return plan_federation(
        load_profiles().values(), root, socket.gethostname(), read_instance(root)
    )


def default_plan() -> FederationPlan:
    """The federation under `devfed_root()` (`$FEDHPC_DEVFED_DIR`)."""
    return plan_at(devfed_root())


def instance_plan(number: int) -> FederationPlan:
    """Instance `number` of the federation whose first instance is (or is beside)
    `devfed_root()`: the same clusters under `{primary}-n` with ports shifted."""
    here = devfed_root()
    primary = read_instance(here).primary or here
    instance = Instance(number, primary if number > 1 else None)
    root = instance_root(primary, number)
    return plan_federation(load_profiles().values(), root, socket.gethostname(), instance)


def invoking_users() -> tuple[str, ...]:
    """root, plus whoever ran sudo (or the current user) so their jobs have an association."""
    users = ["root"]
    other = os.environ.get("SUDO_USER") or getpass.getuser()
    if other not in users and SAFE_NAME.match(other):
        users.append(other)
    return tuple(users)


def _register(plan: FederationPlan, users: tuple[str, ...], report: UpReport) -> None:
    """Add whatever clusters, accounts and associations are missing (a no-op the second time).

    One sacctmgr call per kind: given lists, it adds only the pairs that do not exist yet.
    """
    env = plan.clusters[0].env()
    show = ["sacctmgr", "-n", "-P", "show"]
    add = ["sacctmgr", "-i", "add"]
    names = [c.name for c in plan.clusters]
    have = set(run([*show, "cluster", "format=Cluster"], env).stdout.split())
    if missing := [n for n in names if n not in have]:
        run([*add, "cluster", *missing], env)
        report.registered.extend(f"cluster {n}" for n in missing)
    lines = run([*show, "assoc", "format=Cluster,Account,User"], env).stdout.splitlines()
    assoc = {tuple(line.split("|")) for line in lines}
    where = [f"Account={','.join(ACCOUNTS)}", f"Cluster={','.join(names)}"]
    if todo := [(n, a) for n in names for a in ACCOUNTS if (n, a, "") not in assoc]:
        org = ["Description=fedhpc devfed", "Organization=fedhpc"]
        run([*add, "account", ",".join(ACCOUNTS), where[1], *org], env)
        report.registered.extend(f"{n}/{a}" for n, a in todo)
    wanted = [(n, a, u) for n in names for a in ACCOUNTS for u in users]
    if todo_users := [t for t in wanted if t not in assoc]:
        run([*add, "user", ",".join(users), *where, f"DefaultAccount={ACCOUNTS[0]}"], env)
        report.registered.extend("/".join(t) for t in todo_users)


CTLD_ANSWER_S = 10  # how long a running slurmctld may take to answer a ping in `up`


def _cluster_pids(cluster: ClusterPlan) -> list[int]:
    pids = [alive_pid(cluster.slurmd_pid(n.name), "slurmd") for n in cluster.nodes]
    pids.append(alive_pid(cluster.ctld_pid, "slurmctld"))
    return [p for p in pids if p]


def _answers(cluster: ClusterPlan) -> bool:
    """Whether the cluster's slurmctld answers `scontrol ping` (UP)."""
    try:
        proc = run(["scontrol", "ping"], cluster.env(), check=False, timeout_s=5)
    except DevfedError:  # no answer within 5 s
        return False
    return proc.returncode == 0 and " is UP" in proc.stdout


def _controller(cluster: ClusterPlan, changed: bool, report: UpReport) -> None:
    if changed and (pids := _cluster_pids(cluster)):
        log.info("devfed.restart", cluster=cluster.name, reason="config changed")
        stop_pids(pids)
    pid = alive_pid(cluster.ctld_pid, "slurmctld")
    answered = False
    if pid is not None:
        with suppress(DevfedError):  # a controller just started gets time to answer
            wait_for(partial(_answers, cluster), f"{cluster.name}'s slurmctld", CTLD_ANSWER_S)
            answered = True
    if pid is not None and not answered:
        # Alive but silent: stopping (a SIGTERM'd slurmctld saves its state and may wait on
        # slurmdbd for minutes) or wedged. Counted as running, it left the cluster with no
        # controller once it exited; it is stopped now and a fresh one started.
        log.warning("devfed.ctld_silent", cluster=cluster.name, pid=pid)
        stop_pids([pid], grace_s=5)
        pid = None
    if pid is None:
        argv = ["slurmctld", "-f", str(cluster.conf)]
        start_daemon(argv, cluster.env(), cluster.log_dir / "slurmctld.log", foreground=False)
        report.started.append(f"{cluster.name}/slurmctld")


def _nodes(cluster: ClusterPlan, report: UpReport) -> None:
    for node in cluster.nodes:
        if alive_pid(cluster.slurmd_pid(node.name), "slurmd"):
            continue
        argv = ["slurmd", "-f", str(cluster.conf), "-N", node.name]
        log_file = cluster.log_dir / f"slurmd-{node.name}.log"
        start_daemon(argv, cluster.env(), log_file, foreground=False)
        report.started.append(f"{cluster.name}/slurmd-{node.name}")


def _nodes_ready(plan: FederationPlan, resumed: set[str]) -> bool:
    ready = True
    for c in plan.clusters:
        proc = run(["scontrol", "show", "node", "-o"], c.env(), check=False, timeout_s=15)
        nodes = parse_nodes(proc.stdout) if proc.returncode == 0 else ()
        ready = ready and {n.name for n in nodes} == {n.name for n in c.nodes}
        for n in nodes:
            ready = ready and n.healthy
            stuck = not n.healthy and ("DOWN" in n.state or "DRAIN" in n.state)
            # Nodes left DOWN or DRAINED from an earlier run come back once their slurmd runs.
            if stuck and f"{c.name}/{n.name}" not in resumed:
                resumed.add(f"{c.name}/{n.name}")
                update = ["scontrol", "update", f"NodeName={n.name}", "State=RESUME"]
                run(update, c.env(), check=False)
    return ready


UP_STEPS = (
    "Debian packages",
    "configuration",
    "munge and mariadb",
    "slurmdbd",
    "accounts",
    "controllers and nodes",
    "every node idle",
    "OpenPBS devpolaris",
)


def up(
    plan: FederationPlan, *, timeout_s: float = 180, progress: Callable[[str], None] | None = None
) -> UpReport:
    """Start whatever is not running and wait until every node is idle; idempotent.
    `progress` hears the name of each of UP_STEPS as it begins (the CLI's progress bar)."""
    t0 = time.monotonic()
    step = progress or (lambda _name: None)
    step(UP_STEPS[0])
    ensure_packages()
    require_root("start munge, mariadb and the Slurm daemons")
    report = UpReport()
    step(UP_STEPS[1])
    prepare_dirs(plan)
    write_instance(plan.root, plan.instance)
    pass_file = plan.dbd_dir / "storage.pass"
    if not pass_file.exists():
        pass_file.write_text(secrets.token_hex(16))
        pass_file.chmod(0o600)
    storage_pass = pass_file.read_text().strip()
    dbd_changed = write_if_changed(plan.dbd_conf, render_slurmdbd_conf(plan, storage_pass), 0o600)
    changed = {}
    for c in plan.clusters:
        a = write_if_changed(c.conf, render_slurm_conf(plan, c), 0o644)
        b = write_if_changed(c.gres_conf, render_gres_conf(c), 0o644)
        changed[c.name] = a or b

    def phase(name: str) -> None:
        log.info("devfed.phase", done=name, t_s=round(time.monotonic() - t0, 2))

    step(UP_STEPS[2])
    start_munge(plan, report.started)
    start_mariadb(plan, storage_pass, report.started)
    phase("mariadb")
    step(UP_STEPS[3])
    start_slurmdbd(plan, dbd_changed, report.started)
    phase("slurmdbd")
    step(UP_STEPS[4])
    _register(plan, invoking_users(), report)
    phase("register")
    step(UP_STEPS[5])
    for c in plan.clusters:
        _controller(c, changed[c.name], report)
    for c in plan.clusters:
        wait_for(partial(port_open, c.ctld_port), f"{c.name} slurmctld", 60)
        _nodes(c, report)
    phase("daemons")
    resumed: set[str] = set()
    step(UP_STEPS[6])
    left = max(10.0, timeout_s - (time.monotonic() - t0))
    wait_for(lambda: _nodes_ready(plan, resumed), "every node to be idle", left, step_s=0.5)
    phase("slurm")
    step(UP_STEPS[7])
    if plan.instance.primary is None:
        # After Slurm, and never raising: a PBS failure leaves the four clusters up and says why.
        report.pbs = pbs_up(plan.root, plan.hostname, load_profiles().values())
    else:
        _share_devpolaris(plan, plan.instance.primary)
    report.elapsed_s = time.monotonic() - t0
    log.info("devfed.up", started=len(report.started), elapsed_s=round(report.elapsed_s, 1))
    return report


def _share_devpolaris(plan: FederationPlan, primary: Path) -> None:
    """devpolaris stays single: an instance past the first names the primary's folder, so a
    profile's `{devfed}/devpolaris/...` reaches it from any instance."""
    link, target = plan.root / "devpolaris", primary / "devpolaris"
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    if link.is_symlink():
        link.unlink()
    if not link.exists():
        link.symlink_to(target)


def status(plan: FederationPlan) -> FederationStatus:
    """Shared daemons by pid file, then each cluster's nodes as its slurmctld reports them."""
    daemons = {d: alive_pid(plan.pid_file(d), d) for d in ("munged", "mariadbd", "slurmdbd")}
    clusters = []
    for c in plan.clusters:
        dead = tuple(n.name for n in c.nodes if not alive_pid(c.slurmd_pid(n.name), "slurmd"))
        if not alive_pid(c.ctld_pid, "slurmctld"):
            clusters.append(ClusterStatus(c.name, False, dead_slurmd=dead, error="not running"))
            continue
        proc = run(["scontrol", "show", "node", "-o"], c.env(), check=False, timeout_s=15)
        if proc.returncode != 0:
            err = "not answering: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
            clusters.append(ClusterStatus(c.name, False, dead_slurmd=dead, error=err))
            continue
        nodes = parse_nodes(proc.stdout)
        missing = tuple(sorted({n.name for n in c.nodes} - {n.name for n in nodes}))
        clusters.append(ClusterStatus(c.name, True, nodes, missing, dead))
    return FederationStatus(str(plan.root), daemons, tuple(clusters))


def _no_jobs(cluster: ClusterPlan) -> bool:
    argv = ["squeue", "-h", "-o", "%A"]  # pending, running and completing jobs
    return not run(argv, cluster.env(), check=False).stdout.strip()


def _cancel_jobs(plan: FederationPlan) -> None:
    # Jobs would outlive slurmd as orphaned slurmstepd processes; cancel them first.
    for c in plan.clusters:
        if not alive_pid(c.ctld_pid, "slurmctld"):
            continue
        jobs = run(["squeue", "-h", "-o", "%A"], c.env(), check=False).stdout.split()
        if jobs:
            run(["scancel", *jobs], c.env(), check=False)
            with suppress(DevfedError):
                wait_for(partial(_no_jobs, c), f"{c.name} jobs to end", 15)


def down(plan: FederationPlan, *, purge: bool = False) -> list[int]:
    """Stop every devfed process (pid files, then a sweep of /proc); return the pids stopped."""
    if plan.root.exists() and not plan.marker.exists():
        raise DevfedError(f"{plan.root} was not made by `fedhpc devfed up`; not touching it")
    stopped: list[int] = []
    try:
        if plan.instance.primary is None:  # devpolaris is the primary's alone
            pbs_down(plan.root, plan.hostname, load_profiles().values(), purge=purge)
        _cancel_jobs(plan)
        # Order: nodes, controllers (they flush accounting to slurmdbd), slurmdbd, its db, munge.
        groups = [[p for c in plan.clusters for p in _cluster_pids(c)]]
        for d in ("slurmdbd", "mariadbd", "munged"):
            groups.append([p] if (p := alive_pid(plan.pid_file(d), d)) else [])
        for pids in groups:
            stop_pids(pids)
            stopped.extend(pids)
        if left := sweep(plan.root):
            log.warning("devfed.sweep", pids=left)
            stop_pids(left)
            stopped.extend(left)
    except PermissionError as exc:
        raise DevfedError("fedhpc devfed down needs root (run it with sudo)", hint="") from exc
    if left := sweep(plan.root):
        raise DevfedError(f"devfed processes still running after down: {left}")
    for c in plan.clusters:
        for pid_file in c.run_dir.glob("*.pid") if c.run_dir.is_dir() else ():
            pid_file.unlink(missing_ok=True)
    for path in [*plan.run_dir.glob("*.pid"), plan.munge_socket, plan.mysql_socket]:
        path.unlink(missing_ok=True)
    if purge and plan.marker.exists():
        shutil.rmtree(plan.root)
    log.info("devfed.down", stopped=len(stopped), purged=purge)
    return stopped
