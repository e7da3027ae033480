"""Controller death -> a new attempt elsewhere, in control intervals (issue 40, item 4; goal <= 2).

A real `fedhpc daemon` on the local federation; a task fixed to the target cluster with
`fallback` waits in its queue there (a blocker fills the partition it needs, as
`test_lost_controller_replaces_pending_work_and_accepts_one_result` does). Then the target's
controller dies, and the time until the task has a new attempt on another site is measured,
with the times the `site.offline` and (after the controller is back) `site.online` events
carry against the times the controller died and came back.

How the controller dies (`--kill`):
- `port` (default): the daemon's devfed folder mirrors the real one, except the target's
  scheduler config (`slurm.conf` / `pbs.conf`), a private copy whose controller port is
  rewritten to one nothing listens on: to every client the daemon runs, a stopped controller
  (`scontrol ping` DOWN, `squeue`/`sinfo` retrying 9 s, `qstat` refused), while the shared
  cluster keeps serving everyone else (`tests/integration/test_dead_site.py` does the same).
  Back: the port is written back.
- `hang`: as `port`, but the port is a socket of this script's that takes connections and never
  answers: a hung controller (`scontrol ping` waits out Slurm's MessageTimeout).
- `sigterm` (Slurm only): the target's real slurmctld is stopped (SIGTERM) and brought back
  with `fedhpc devfed up`, as the test above does. Other sessions' work on it waits meanwhile.

Run: .venv/bin/python benchmarks/controller_loss.py [--site devdeltaai|devpolaris]
     [--rounds 3] [--cycle 2] [--refresh 2] [--kill port|hang|sigterm] [--json]
Exits 2 when the federation (or, for devpolaris, OpenPBS) is down.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import AdaptationPolicy, ResultRequest, SubmitTaskRequest
from fedhpc.placement import PolicyKind
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev.profiles import devfed_root

if str(Path(__file__).resolve().parent.parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.integration.conftest import lock_of

from fedhpc_dev.devfed.manager import plan_at

ROOT = devfed_root()
SLURM_SITES = ("devanvil", "devdelta", "devdeltaai", "devvista")
# What fills the partition the task needs, so that it waits in the target's queue.
BLOCKER = {
    "devdeltaai": ("-p", "ghx4", "-A", "fedhpc-gpu", "--gres=gpu:gh200:4", "-t", "30"),
}


def _pbs_env() -> dict[str, str]:
    path = f"{ROOT / 'devpolaris' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PBS_CONF_FILE": str(ROOT / "devpolaris" / "pbs.conf"), "PATH": path}


def _run(site: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """A scheduler command against the REAL cluster `site` (not the daemon's mirror)."""
    env = (
        _pbs_env()
        if site == "devpolaris"
        else {**os.environ, "SLURM_CONF": str(ROOT / site / "slurm.conf")}
    )
    return subprocess.run(  # in the temp folder: a blocker's default output lands there
        list(argv),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tempfile.gettempdir(),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Mirror:
    """A devfed folder: every cluster the real one, the target's scheduler config private."""

    def __init__(self, root: Path, site: str) -> None:
        self.root, self.site = root, site
        root.mkdir()
        for entry in ROOT.iterdir():
            if entry.name != site:
                (root / entry.name).symlink_to(entry)
        (root / site).mkdir()
        self.conf_name = "pbs.conf" if site == "devpolaris" else "slurm.conf"
        for entry in (ROOT / site).iterdir():
            if entry.name in (self.conf_name, "gres.conf"):
                shutil.copy(entry, root / site / entry.name)
            else:
                (root / site / entry.name).symlink_to(entry)
        self.conf = root / site / self.conf_name
        self.good = self.conf.read_text()
        self.hung: socket.socket | None = None

    def kill(self, *, hang: bool = False) -> None:
        """Point the private config at a port nothing listens on (a stopped controller) or,
        with `hang`, at a socket that takes connections and never answers (a hung one)."""
        port = _free_port()
        if hang:
            self.hung = socket.socket()
            self.hung.bind(("0.0.0.0", 0))  # noqa: S104  (where SlurmctldHost resolves)
            self.hung.listen(4096)
            port = int(self.hung.getsockname()[1])
        if self.conf_name == "slurm.conf":
            text = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={port}", self.good)
        else:
            text = self.good.rstrip("\n") + f"\nPBS_BATCH_SERVICE_PORT={port}\n"
        tmp = self.conf.with_suffix(".new")
        tmp.write_text(text)
        tmp.replace(self.conf)  # atomic: a client reads the old config or the new one

    def restore(self) -> None:
        tmp = self.conf.with_suffix(".new")
        tmp.write_text(self.good)
        tmp.replace(self.conf)
        if self.hung is not None:
            self.hung.close()
            self.hung = None


def _sigterm(site: str) -> int:
    pid = int((ROOT / site / "run" / "slurmctld.pid").read_text().split()[0])
    os.kill(pid, signal.SIGTERM)
    return pid


def _devfed_up(site: str, pid: int) -> datetime:
    """`fedhpc devfed up` once the stopped controller `pid` has exited (tried again if it
    fails: the shared cluster must come back); when `site`'s controller first answered a
    ping meanwhile."""
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    cli = Path(sys.executable).with_name("fedhpc")
    for _ in range(3):
        up = subprocess.Popen(
            [str(cli), "devfed", "up"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        end = time.monotonic() + 120
        while time.monotonic() < end and up.poll() in (None, 0):
            if _run(site, "scontrol", "ping").returncode == 0:
                back = datetime.now(UTC)
                up.wait(timeout=300)
                return back
        up.wait(timeout=300)
        time.sleep(1)
    raise SystemExit(f"fedhpc devfed up could not bring {site} back: run it by hand")


def _daemon(home: Path, fed: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": "slurm+pbs" if args.site == "devpolaris" else "1",
        "FEDHPC_DEVFED_DIR": str(fed),
        "FEDHPC_CYCLE_S": str(args.cycle),
        "FEDHPC_REFRESH_S": str(args.refresh),
        "FEDHPC_LOG_LEVEL": "info",
    }
    with (home / "daemon.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )  # fmt: skip


def _task(site: str, n: int) -> SubmitTaskRequest:
    gpus = {"min": 1, "max": 1}
    envelope = ResourceEnvelope.model_validate(
        {"gpus": gpus, "cpus": {"min": 1, "max": 1}, "wall_time": {"min": "10m"}}
    )
    return SubmitTaskRequest(
        command=("sleep", "1"),
        envelope=envelope,
        name=f"ctl-loss-{n}",
        policy=PolicyKind.FIXED_SITE,
        fixed_site=site,
        fallback=True,
        adaptation=AdaptationPolicy(replace_pending=False),
    )


async def _until(limit: float, check: Any, pause: float = 0.05) -> Any:
    with anyio.fail_after(limit):
        while True:  # the daemon's state, polled: nothing here to wait on
            if got := await check():
                return got
            await anyio.sleep(pause)


def _event_at(events: list[dict[str, Any]], kind: str, site: str, after: int) -> Any:
    for e in events:
        if e["kind"] == kind and e["subject"] == site and int(e["seq"]) > after:
            return e
    return None


def _block(site: str) -> str:
    """A job of ours that takes what the task needs on `site`: the task waits in its queue."""
    if site in BLOCKER:
        out = _run(site, "sbatch", "--parsable", *BLOCKER[site], "--wrap", "sleep 1800")
        job = out.stdout.strip().split(";")[0]
    else:  # devpolaris: the A100s of both prod nodes taken
        out = _run(site, "qsub", "-q", "prod", "-l", "select=2:ngpus=4:ncpus=1",
                   "-l", "place=scatter", "-l", "walltime=00:30:00",
                   "--", "/bin/sleep", "1800")  # fmt: skip
        job = out.stdout.strip()
    if out.returncode or not job:
        raise SystemExit(f"blocker refused on {site}: {out.stderr.strip()}")
    return job


async def _round(
    client: DaemonClient, args: argparse.Namespace, mirror: Mirror, n: int
) -> dict[str, Any]:
    site = args.site
    blocker = ""
    first_job = ""
    try:
        blocker = _block(site)
        seq0 = max((int(e["seq"]) for e in await client.events(limit=1000)), default=0)
        handle = await client.submit_task(_task(site, n))
        if handle.site != site:
            raise SystemExit(f"the task went to {handle.site}, not {site}")

        async def pending() -> Any:
            r = await client.get_result(ResultRequest(task_id=handle.task_id))
            a = r.attempts[-1] if r.attempts else None
            return a is not None and a.job_id and a.state.value == "pending" and a

        first_job = (await _until(120, pending)).job_id
        await anyio.sleep(args.cycle)  # at least one whole cycle has observed it pending
        died_wall, died = datetime.now(UTC), time.monotonic()
        if args.kill == "sigterm":
            pid = _sigterm(site)
        else:
            mirror.kill(hang=args.kill == "hang")

        async def moved() -> Any:
            r = await client.get_result(ResultRequest(task_id=handle.task_id))
            return len(r.attempts) > 1 and r.attempts[-1].site != site and r.attempts[-1]

        async def offline() -> Any:
            return _event_at(await client.events(after=seq0, limit=1000), "site.offline", site, 0)

        try:
            new = await _until(args.limit, moved)
            moved_s = time.monotonic() - died
            if args.kill == "hang":  # kept hung until offline: closing its socket resets the
                await _until(args.limit, offline, pause=0.2)  # pings under way (a DOWN)
        finally:
            back_wall = datetime.now(UTC)
            if args.kill == "sigterm":
                back_wall = _devfed_up(site, pid)
            else:
                mirror.restore()

        async def online() -> Any:
            return _event_at(await client.events(after=seq0, limit=1000), "site.online", site, 0)

        up = await _until(180, online, pause=0.2)
        evs = await client.events(after=seq0, limit=1000)
        down = _event_at(evs, "site.offline", site, 0)
        off_at = datetime.fromisoformat(down["created_at"]) if down else None
        on_at = datetime.fromisoformat(up["created_at"])
        return {
            "new_attempt_s": round(moved_s, 2),
            "intervals": round(moved_s / args.cycle, 2),
            "new_site": new.site,
            "offline_stamp_minus_death_s": (
                round((off_at - died_wall).total_seconds(), 2) if off_at else None
            ),
            "online_stamp_minus_back_s": round((on_at - back_wall).total_seconds(), 2),
        }
    finally:
        for job in (blocker, first_job):
            if job:
                _run(site, "qdel" if site == "devpolaris" else "scancel", job)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    down = [s for s in SLURM_SITES if _run(s, "scontrol", "ping").returncode]
    if args.site == "devpolaris" and _run("devpolaris", "qstat", "-B").returncode:
        down.append("devpolaris")
    if down:
        print(f"federation down: {', '.join(down)}; start it with `fedhpc devfed up`")
        raise SystemExit(2)
    tmp = Path(tempfile.mkdtemp(prefix="fedhpc-ctl-loss-"))
    mirror = Mirror(tmp / "fed", args.site)
    home = tmp / "home"
    proc = _daemon(home, mirror.root, args)
    rounds = []
    try:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(60)
            await client.refresh()
            for n in range(args.rounds):
                rounds.append(await _round(client, args, mirror, n))
                print(json.dumps(rounds[-1]), file=sys.stderr)
    finally:
        mirror.restore()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    intervals = [r["intervals"] for r in rounds]
    return {
        "site": args.site,
        "kill": args.kill,
        "cycle_s": args.cycle,
        "refresh_s": args.refresh,
        "rounds": rounds,
        "median_new_attempt_s": statistics.median(r["new_attempt_s"] for r in rounds),
        "median_intervals": statistics.median(intervals),
        "max_intervals": max(intervals),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--site", default="devdeltaai", choices=("devdeltaai", "devpolaris"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cycle", type=float, default=2.0, help="FEDHPC_CYCLE_S")
    p.add_argument("--refresh", type=float, default=2.0, help="FEDHPC_REFRESH_S")
    p.add_argument("--kill", default="port", choices=("port", "hang", "sigterm"))
    p.add_argument("--limit", type=float, default=180.0, help="give up on a round after (s)")
    p.add_argument("--keep", action="store_true", help="keep the daemon's home and log")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.kill == "sigterm" and args.site == "devpolaris":
        p.error("--kill sigterm is for Slurm clusters")
    lock_path = lock_of(plan_at(ROOT).instance.number)  # the instance's (FEDHPC_DEVFED_DIR)
    with lock_path.open("a") as lock:  # the blocker must not meet a test's drain
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"controller_loss: waiting for {lock_path} (a test run holds it)\n")
            fcntl.flock(lock, fcntl.LOCK_EX)
        out = anyio.run(_main, args)
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"{out['site']} ({out['kill']}), cycle {out['cycle_s']:g} s, refresh {out['refresh_s']:g} "
        f"s: controller death -> new attempt elsewhere median {out['median_new_attempt_s']:.1f} "
        f"s = {out['median_intervals']:.1f} intervals (max {out['max_intervals']:.1f}; goal <= 2)"
    )
    for r in out["rounds"]:
        print(
            f"  {r['new_attempt_s']:.1f} s -> {r['new_site']}; site.offline stamped "
            f"{r['offline_stamp_minus_death_s']} s after death, site.online "
            f"{r['online_stamp_minus_back_s']} s after the controller was back"
        )


if __name__ == "__main__":
    main()
