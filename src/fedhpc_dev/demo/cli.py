"""`fedhpc demo`: the whole loop on the local federation, in a few minutes.

1. bring up (or reuse) the local Slurm federation, or, where Slurm cannot run (not root, no
   apt, `devfed up` fails), fall back to the same four sites running jobs as local processes
   (`FEDHPC_DEVFED=process`, dialect `process`); then start a daemon of its own;
2. a scripted agent drives fedhpc through a real MCP client: inspect, draft an envelope,
   submit a 4-child group, then exit (one site is saturated with background jobs first);
3. the daemon runs and adapts the group (the child on the saturated site is re-placed);
4. the round's event resumes the agent through the `command` runtime;
5. the agent reads the manifests and prints a summary and a timeline of attempts per site.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from fedhpc.adapters.site import open_adapter
from fedhpc.cli.ui import DEFAULT_PORT, url_file
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.job import JobSpec, Shape
from fedhpc.errors import UsageError
from fedhpc.profiles import load_federation, load_profiles
from fedhpc.settings import BRIDGE_POLL_S, CYCLE_S, DEVFED, DEVFED_SSH_CONFIG, HOME, REFRESH_S
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev.devfed.sshd import start_front
from fedhpc_dev.profiles import devfed_process_root, devfed_root

if TYPE_CHECKING:
    from fedhpc_dev.devfed.sshd import SshFront

__all__ = ["add_parser"]

FAST = {REFRESH_S.name: "2", CYCLE_S.name: "1", BRIDGE_POLL_S.name: "0.5"}


def _say(text: str) -> None:
    print(f"demo: {text}", flush=True)


PROCESS_NOTE = (
    "falling back to 4 sites that run jobs as local processes (devanvil, devdelta, "
    "devdeltaai, devvista: same partitions and capacities, scheduler fedhpc_dev.localsched)"
)


def _slurm_problem() -> str | None:
    """None when the local Slurm federation is healthy or was brought up; else why it is not
    used."""
    try:
        # inside the try: a broken install (an import error too) must not stop the demo
        from fedhpc_dev.devfed.manager import default_plan, status, up

        plan = default_plan()
        if status(plan).healthy:
            _say("local federation: 4 Slurm clusters up")
            return None
    except Exception as exc:  # a broken install must not stop the demo: fall back
        return f"its state could not be read ({exc})"
    if os.geteuid() != 0:
        return "it is not running, and starting it needs root (sudo fedhpc devfed up)"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it"
    _say("bringing up the local federation (4 Slurm clusters)...")
    try:
        up(plan)
    except Exception as exc:  # any failure to install or start Slurm means: fall back
        return f"`fedhpc devfed up` failed: {exc}"
    return None


def _pbs_problem() -> str | None:
    """None when devpolaris (OpenPBS) answers; else why not (`devfed up` says more)."""
    # startup: every `fedhpc` command loads this plugin; the PBS code only for slurm+pbs
    from fedhpc_dev.devfed.pbs import pbs_status

    state = pbs_status(devfed_root(), socket.gethostname(), load_profiles().values())
    if state.up:
        _say(f"local federation: devpolaris (OpenPBS) up, {state.detail}")
        return None
    return state.detail


def _choose_sites(wanted: str) -> str:
    """'slurm', 'slurm+pbs' or 'process': the sites the demo runs on, saying why when it falls
    back."""
    if wanted == "slurm+pbs":
        problem = _slurm_problem() or _pbs_problem()
        if problem is not None:
            raise UsageError(
                f"the local Slurm and OpenPBS federation is not usable: {problem}",
                hint="Run `sudo fedhpc devfed up` (it says why devpolaris is absent).",
            )
        return "slurm+pbs"
    if wanted == "process":
        _say("sites: 4 sites that run jobs as local processes (--sites process)")
        return "process"
    problem = _slurm_problem()
    if problem is None:
        return "slurm"
    if wanted == "slurm":
        raise UsageError(
            f"the local Slurm federation is not usable: {problem}",
            hint="Run `sudo fedhpc devfed up`, or `fedhpc demo --sites process`.",
        )
    _say(f"not using Slurm: {problem}")
    _say(PROCESS_NOTE)
    return "process"


def _prepare_process_sites() -> None:
    for site in load_federation().values():
        for root in site.profile.storage:
            Path(root.path).mkdir(parents=True, exist_ok=True)
    _say(f"local-process sites ready under {devfed_process_root()}")


# The site whose GPUs background jobs keep busy, so that the child placed there is stuck and
# moved: devanvil's H100s (Slurm), or with PBS in the federation (slurm+pbs) devpolaris's A100s,
# so that the move crosses schedulers (PBS -> Slurm). Keyed by "PBS in the federation".
BUSY = {
    False: ("devanvil", "ai", 2, "H100s"),
    True: ("devpolaris", "prod", 4, "A100s (PBS)"),
}


async def _saturate(site_name: str, partition: str, gpus: int) -> list[str]:
    site = load_federation()[site_name]
    adapter = open_adapter(site)
    root = site.profile.storage[0].path
    ids = []
    for i in range(2):
        job = await adapter.submit(
            JobSpec(
                name=f"fedhpc-demo-load-{i}",
                command=("sleep", "900"),
                partition=partition,
                account="fedhpc-gpu",
                shape=Shape(gpus=gpus, cpus=1, wall_time_s=1200),
                stdout=f"{root}/demo-load-{i}.out",
                stderr=f"{root}/demo-load-{i}.err",  # PBS would write it where the demo runs
            )
        )
        ids.append(job.job_id)
    await adapter.transport.aclose()
    return ids


async def _cancel(site_name: str, ids: list[str]) -> None:
    adapter = open_adapter(load_federation()[site_name])
    await adapter.cancel(ids)
    await adapter.transport.aclose()


def _ssh_sites(wanted: str | None) -> list[str]:
    """The sites `--ssh` names (all four for a bare `--ssh`), checked against the devfed ones."""
    if wanted is None:
        return []
    # The SSH front serves the Slurm clusters (each login sets SLURM_CONF), not devpolaris.
    known = sorted(n for n, p in load_profiles().items() if p.local_test and p.dialect == "slurm")
    chosen = known if wanted == "all" else [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        raise UsageError(
            f"--ssh names sites that are not devfed sites: {', '.join(unknown) or '(none)'}",
            hint=f"Use --ssh alone (all of them) or a comma-separated list of {', '.join(known)}.",
        )
    return chosen


def _open_front(sites: list[str]) -> SshFront:
    """One sshd on loopback with a login host per site, whose login sets SLURM_CONF; the
    daemon, the agent and its MCP servers reach those sites over ssh (they inherit the env)."""

    confs = {n: s.transport.env["SLURM_CONF"] for n, s in load_federation().items()}
    front = start_front(
        Path(tempfile.mkdtemp(prefix="fedhpc-sshd-")), {n: {"SLURM_CONF": confs[n]} for n in sites}
    )
    os.environ.update(front.env())
    logins = ", ".join(f"{n} (127.0.0.1:{front.port(n)})" for n in sites)
    _say(f"over ssh: {logins}; one sshd (pid {front.process.pid}), a Host alias per site in")
    _say(f"  {front.ssh_config}; each login sets its cluster's SLURM_CONF, as a center's does")
    return front


def _run(args: argparse.Namespace) -> int:
    os.environ.pop(DEVFED.name, None)  # the Slurm check reads the Slurm profiles
    os.environ.pop(DEVFED_SSH_CONFIG.name, None)
    over_ssh = _ssh_sites(args.ssh)  # a wrong name is refused before anything starts
    mode = _choose_sites(args.sites)
    if args.ssh is not None and mode != "slurm":
        raise UsageError(
            "fedhpc demo --ssh runs the Slurm federation's sites over ssh, and it is not usable "
            "here (see above)",
            hint="Run `sudo fedhpc devfed up` first, or drop --ssh.",
        )
    # The daemon, the agent and the MCP servers it starts all inherit this.
    os.environ[DEVFED.name] = {"slurm": "1", "slurm+pbs": "slurm+pbs"}.get(mode, "process")
    if mode == "process":
        _prepare_process_sites()
    front = _open_front(over_ssh) if over_ssh else None
    code = 1
    try:
        code = _loop(args)
    finally:
        if front is not None and args.keep and code == 0:
            _say(
                f"the sshd (pid {front.process.pid}) stays up for the kept daemon's ssh "
                f"sites; `kill {front.process.pid}` stops it"
            )
        elif front is not None:
            front.close()
    return code


def _loop(args: argparse.Namespace) -> int:
    home = Path(args.home or tempfile.mkdtemp(prefix="fedhpc-demo-"))
    os.environ[HOME.name] = str(home)

    env = {**os.environ, **FAST}
    home.mkdir(parents=True, exist_ok=True)
    log = (home / "daemon.log").open("ab")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "fedhpc.daemon"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=args.keep,  # a kept daemon outlives this terminal
    )
    # With PBS in the federation the stuck child is the PBS one, moved to a Slurm site.
    busy, partition, gpus, what = BUSY[DEVFED.read() == "slurm+pbs"]
    load: list[str] = []
    kept = False
    try:

        async def ready() -> None:
            async with DaemonClient(DaemonSettings.from_env()) as client:
                await client.wait_until_up(30)
                await client.refresh()

        anyio.run(ready)
        _say(f"daemon up (pid {daemon.pid}, home {home})")
        load = anyio.run(_saturate, busy, partition, gpus)
        _say(f"{busy}'s {what} are now busy with background jobs {', '.join(load)}")
        out = home / "agent-resumed.txt"
        started = time.monotonic()
        # Five sites with Slurm+PBS: a child each, one of them on the busy GPUs.
        children = "5" if DEVFED.read() == "slurm+pbs" else "4"
        agent = subprocess.run(
            [
                *(sys.executable, "-m", "fedhpc_dev.demo.agent", "plan", "--out", str(out)),
                *("--children", children),
            ],
            env=os.environ.copy(),
            check=False,
        )
        if agent.returncode != 0:
            _say("the agent failed")
            return 1
        _say("the agent has ended its turn; the daemon runs the group and will resume it")
        deadline = started + args.deadline
        _wait_for(out, deadline)
        if not out.exists():
            _say(f"no resume within {args.deadline:.0f}s; see `fedhpc deliveries`")
            return 1
        print(out.read_text(), end="")
        _say(f"done in {time.monotonic() - started:.0f}s with zero status calls by the agent")
        if args.keep:
            kept = _keep(home, env)
        else:
            _say(
                "to look at it in the dashboard, run `fedhpc demo --keep` "
                "(keeps the daemon and serves the dashboard)"
            )
        return 0
    finally:
        if load:
            anyio.run(_cancel, busy, load)
        if not kept:
            daemon.terminate()
            daemon.wait(timeout=30)
        log.close()


def _wait_for(out: Path, deadline: float) -> None:
    """Until the resumed agent has written `out` (or the deadline); a spinner on a terminal."""
    if not sys.stdout.isatty():
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        return
    # startup: every `fedhpc` command loads this plugin; rich only when the demo waits
    from fedhpc.ui.term import waiting

    with waiting("the daemon runs the group; the agent is not running") as say:
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        say("the agent was resumed" if out.exists() else "no resume before the deadline")


def _free_port(port: int) -> int:
    """`port` when it can be bound on loopback now, else 0 (any free port)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


def _keep(home: Path, env: dict[str, str]) -> bool:
    """Leave the daemon running and serve the dashboard beside it (it stops with the daemon);
    print its URL and how to open and stop it. False when the dashboard did not start."""

    saved = url_file(home)
    saved.unlink(missing_ok=True)
    port = _free_port(DEFAULT_PORT)
    with (home / "ui.log").open("ab") as ui_log:
        ui = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fedhpc.cli.main",
                "ui",
                "--port",
                str(port),
                "--exit-with-daemon",
                "--daemon-check-s",
                "2",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=ui_log,
            stderr=ui_log,
            start_new_session=True,
        )
    deadline = time.monotonic() + 20
    while not saved.exists() and ui.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not saved.exists():
        _say(f"the dashboard did not start (see {home / 'ui.log'}); stopping the daemon")
        if ui.poll() is None:
            ui.terminate()
        return False
    url = saved.read_text().splitlines()[0]
    _say(f"dashboard: {url}")
    _say(f"open it:   xdg-open '{url}'   (or: FEDHPC_HOME={home} fedhpc ui --open)")
    _say(
        f"the daemon (and the dashboard with it) keeps running; stop it with "
        f"`FEDHPC_HOME={home} fedhpc daemon stop`"
    )
    return True


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole loop on the local federation (a few minutes)",
        description="The whole loop on the local federation: a daemon of its own, a scripted "
        "agent over MCP, a resume. Development tooling (fedhpc_dev): to make one site busy it "
        "submits two background jobs to devanvil's scheduler (devpolaris's with --sites "
        "slurm+pbs) itself, not through the daemon, as another user of that cluster would.",
    )
    p.add_argument("--deadline", default=300, type=float, help="seconds to wait for the resume")
    p.add_argument(
        "--keep",
        action="store_true",
        help="at the end, keep the daemon running and serve the dashboard (prints its URL)",
    )
    p.add_argument("--home", default=None, help="state folder (default: a new temporary one)")
    p.add_argument(
        "--sites",
        choices=("auto", "slurm", "slurm+pbs", "process"),
        default="auto",
        help="auto: the Slurm federation when it is up or can be brought up (root), else "
        "four sites that run jobs as local processes; slurm+pbs: the four Slurm clusters and "
        "devpolaris (OpenPBS), five children",
    )
    p.add_argument(
        "--ssh",
        nargs="?",
        const="all",
        default=None,
        metavar="SITES",
        help="reach the sites over ssh, as real centers are: one sshd on loopback with a login "
        "host per site (all four, or a comma-separated list, e.g. --ssh devdelta,devvista)",
    )
    p.set_defaults(func=_run)
