"""`fedhpc devfed up | status | down`: the local test federation from the command line."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from fedhpc.profiles import load_profiles
from fedhpc.settings import NO_PROGRESS
from fedhpc_dev.devfed import DevfedError, manager
from fedhpc_dev.devfed.instances import instances_of
from fedhpc_dev.devfed.pbs import pbs_status
from fedhpc_dev.devfed.plan import FederationPlan
from fedhpc_dev.devfed.sshd import start_front
from fedhpc_dev.devfed.status import format_status

__all__ = ["add_parser"]


def _up(args: argparse.Namespace) -> int:
    here = manager.default_plan()
    for k in range(args.instances):  # this folder's instance and the ones after it
        _up_one(here if k == 0 else manager.instance_plan(here.instance.number + k), args.timeout)
    return 0


def _up_one(plan: FederationPlan, timeout_s: float) -> None:
    if sys.stdout.isatty() and not NO_PROGRESS.read():
        # startup: every `fedhpc` command loads this plugin; rich only when `devfed up` shows steps
        from fedhpc.ui.term import steps

        with steps("devfed up", manager.UP_STEPS) as progress:
            report = manager.up(plan, timeout_s=timeout_s, progress=progress)
    else:
        report = manager.up(plan, timeout_s=timeout_s)
    nodes = sum(len(c.nodes) for c in plan.clusters)
    if report.started:
        what = f"started {len(report.started)} daemons"
    else:
        what = "already running, nothing to start"
    which = f" (instance {plan.instance.number})" if plan.instance.number > 1 else ""
    print(
        f"devfed up: {len(plan.clusters)} clusters, {nodes} nodes idle ({what}) in "
        f"{report.elapsed_s:.1f}s; folder {plan.root}{which}"
    )
    if report.pbs is not None:
        word = "up" if report.pbs.up else "ABSENT"
        print(f"devfed up: devpolaris (OpenPBS) {word}: {report.pbs.detail}")


def _status(args: argparse.Namespace) -> int:
    plan = manager.default_plan()
    state = manager.status(plan)
    sys.stdout.write(format_status(state))
    pbs = pbs_status(plan.root, plan.hostname, load_profiles().values())
    print(f"devpolaris: OpenPBS {'up' if pbs.up else 'DOWN'} ({pbs.detail})")
    healthy = state.healthy
    for root in instances_of(plan.root):
        other = manager.status(manager.plan_at(root))
        sys.stdout.write(format_status(other))
        healthy = healthy and other.healthy
    return 0 if healthy else 1


def _down(args: argparse.Namespace) -> int:
    here = manager.default_plan()
    kept = "removed" if args.purge else "kept (state, logs, accounting db)"
    # The instances beside this one first (theirs is the primary's devpolaris), then it.
    for plan in [*map(manager.plan_at, instances_of(here.root)), here]:
        stopped = manager.down(plan, purge=args.purge)
        print(f"devfed down: stopped {len(stopped)} processes; folder {plan.root} {kept}")
    return 0


def _ssh(args: argparse.Namespace) -> int:

    plan = manager.default_plan()
    known = [c.name for c in plan.clusters]
    sites = list(args.sites) or known
    if unknown := [s for s in sites if s not in known]:
        raise DevfedError(f"not a devfed cluster: {', '.join(unknown)}", hint=f"Use {known}.")
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="fedhpc-sshd-"))
    logins = {c.name: {"SLURM_CONF": str(c.conf)} for c in plan.clusters if c.name in sites}
    front = start_front(root, logins, keep_root=args.dir is not None)
    try:
        ports = ", ".join(f"{a}=127.0.0.1:{front.port(a)}" for a in front.logins)
        print(f"devfed ssh: sshd pid {front.process.pid}; logins {ports}")
        print(f"  ssh -F {front.ssh_config} {sites[0]} -- sinfo")
        print(f"  export FEDHPC_DEVFED=1 FEDHPC_DEVFED_SSH_CONFIG={front.ssh_config}")
        print("Ctrl-C stops it.", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        front.process.wait()  # until Ctrl-C or SIGTERM; returning means sshd died
    except KeyboardInterrupt:
        return 0
    else:
        print(f"devfed ssh: sshd exited; see {root / 'sshd.log'}", file=sys.stderr)
        return 1
    finally:
        front.close()


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `devfed` and its subcommands; each sets `func(args) -> exit code`."""
    parser = subparsers.add_parser(
        "devfed",
        help="the local test federation (four real Slurm clusters and an OpenPBS one here)",
        description="Run four real Slurm clusters and one OpenPBS cluster (devpolaris) on this "
        "machine for tests and demos.",
    )
    sub = parser.add_subparsers(dest="devfed_command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="install (as root), start and wait until every node is idle")
    up.add_argument("--timeout", type=float, default=180, help="seconds to wait (default 180)")
    up.add_argument(
        "--instances",
        type=int,
        default=1,
        metavar="N",
        help="bring up N instances, this folder's and the next N - 1 beside it: the same "
        "clusters in `{folder}-n` on ports shifted by 1000 (n - 1); `./dev test` runs two, one "
        "per Slurm test worker",
    )
    up.set_defaults(func=_up)
    status = sub.add_parser("status", help="clusters, partitions, nodes, GPUs; exit 1 if unhealthy")
    status.set_defaults(func=_status)
    down = sub.add_parser(
        "down", help="stop every devfed daemon (every instance's), keep the folders"
    )
    down.add_argument("--purge", action="store_true", help="also delete the devfed folder")
    down.set_defaults(func=_down)
    ssh = sub.add_parser(
        "ssh",
        help="expose the clusters over ssh (one sshd on loopback, a Host alias per cluster) "
        "until Ctrl-C",
    )
    ssh.add_argument("sites", nargs="*", help="clusters to expose (default: all)")
    ssh.add_argument("--dir", default=None, help="folder for keys and configs (kept)")
    ssh.set_defaults(func=_ssh)


if __name__ == "__main__":
    # run as a script only: the runtime CLI loads this module as its plugin
    from fedhpc.cli.main import main

    sys.exit(main(["devfed", *sys.argv[1:]]))
