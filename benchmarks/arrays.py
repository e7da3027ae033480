"""Scheduler commands per task for a sweep, with and without job arrays (issue 40).

A real `fedhpc daemon` on the local Slurm federation (devanvil only) runs one group of N
children (`true`, 1 CPU, spread off) twice: with arrays (FEDHPC_ARRAY_MAX=1000, the default)
and without (FEDHPC_ARRAY_MAX=1: one sbatch per child, as before issue 40). Counted per run:

- submit commands: sbatch runs (one per array, one per single job), from the children's job
  ids (an element's id is ARRAY_INDEX: distinct arrays + single jobs);
- observation commands: every other scheduler command the daemon ran at devanvil, from
  GET /v1/health's remote calls by kind (status = squeue, accounting = sacct, find = squeue +
  sacct, cancel = scancel, probe = its sections) plus the controller ping (scontrol ping)
  ahead of each probe, status and find call;
- remote calls (bash -s calls: what the pace cap counts) for reference.

Goal: at least 20x fewer scheduler commands per task with arrays. Holds the federation's test
lock while it runs; cancels nothing but its own jobs.

Run: .venv/bin/python benchmarks/arrays.py [--tasks 5000] [--cycle 2] [--refresh 2]
     [--modes arrays,singles]   (--cycle 0 / --refresh 0: the daemon's defaults, 10 s / 60 s)
On the devfed instance FEDHPC_DEVFED_DIR names (instance 1 by default), under its test lock.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration.conftest import lock_of  # noqa: E402

from fedhpc.adapters.dialects import get_dialect  # noqa: E402
from fedhpc.client.daemon_client import DaemonClient  # noqa: E402
from fedhpc.domain import ResourceEnvelope  # noqa: E402
from fedhpc.domain.site import SiteProfile  # noqa: E402
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest  # noqa: E402
from fedhpc.settings.daemon import DaemonSettings  # noqa: E402
from fedhpc_dev.devfed.manager import plan_at  # noqa: E402
from fedhpc_dev.profiles import dev_profiles_dir, devfed_root  # noqa: E402

SITE = "devanvil"
GOAL = 20.0
OFF = ("devdelta", "devdeltaai", "devvista")


def _home(root: Path) -> Path:
    home = root / "h"
    home.mkdir(parents=True)
    off = "".join(f"[sites.{s}]\nenabled = false\n" for s in OFF)
    (home / "config.toml").write_text(f"[sites.{SITE}]\n{off}")
    return home


def _probe_sections() -> int:
    text = (dev_profiles_dir() / f"{SITE}.toml").read_text()
    profile = SiteProfile.model_validate(tomllib.loads(text))
    return len(get_dialect("slurm").probe_sections(profile, "root"))


async def _children_ids(client: DaemonClient, gid: str) -> list[str | None]:
    out: list[str | None] = []
    after: str | None = None
    while True:
        view = await client.group(gid, after=after, limit=500)
        out += [c.job_id for c in view.children]
        if view.next_after is None:
            return out
        after = view.next_after


def _start_daemon(home: Path, **env: str) -> subprocess.Popen[bytes]:
    """A daemon for `home` on the dev federation, in a session of its own (as `fedhpc serve`
    starts it), with `env` over this process's environment."""
    for name in ("FEDHPC_CYCLE_S", "FEDHPC_REFRESH_S"):
        os.environ.pop(name, None)  # only what `env` says: the daemon's defaults otherwise
    full = {**os.environ, **env, "FEDHPC_HOME": str(home), "FEDHPC_DEVFED": "1"}
    with (home / "daemon.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env={**full, "FEDHPC_LOG_LEVEL": "warning"},
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )  # fmt: skip


def _cadence(cycle: float, refresh: float) -> dict[str, str]:
    """FEDHPC_CYCLE_S / FEDHPC_REFRESH_S as asked; 0: unset (the daemon's own default)."""
    return {
        **({"FEDHPC_CYCLE_S": f"{cycle:g}"} if cycle else {}),
        **({"FEDHPC_REFRESH_S": f"{refresh:g}"} if refresh else {}),
    }


async def _one(mode: str, tasks: int, cycle: float, refresh: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fedhpc-arrays-") as tmp:
        home = _home(Path(tmp))
        daemon = _start_daemon(
            home,
            FEDHPC_ARRAY_MAX="1000" if mode == "arrays" else "1",
            FEDHPC_SUBMITS_PER_CYCLE=str(tasks),
            **_cadence(cycle, refresh),
        )
        try:
            async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
                await client.wait_until_up(60)
                await client.refresh()
                before = (await client.health())["remote_calls"].get(SITE, {}).get("total", {})
                env = ResourceEnvelope.model_validate(
                    {"wall_time": {"min": "5m"}, "cpus": {"min": 1, "max": 1}}
                )
                started = time.monotonic()
                group = await client.submit_group(
                    SubmitGroupRequest(
                        objective=f"benchmark sweep ({mode})",
                        children=tuple(GroupChild(command=("true",)) for _ in range(tasks)),
                        envelope=env,
                        spread=False,
                    )
                )
                with anyio.fail_after(3600):
                    while True:
                        view = await client.group(group.group_id, limit=1)
                        if view.state not in ("placing", "running"):
                            break
                        await anyio.sleep(2)
                wall = time.monotonic() - started
                total = (await client.health())["remote_calls"][SITE]["total"]
                ids = await _children_ids(client, group.group_id)
        finally:
            daemon.terminate()
            daemon.wait(60)
    calls = {k: int(total.get(k, 0)) - int(before.get(k, 0)) for k in total}
    submits = len({j.split("_", 1)[0] for j in ids if j})
    pings = sum(calls.get(k, 0) for k in ("probe", "status", "find"))
    observe = (
        calls.get("status", 0)
        + calls.get("accounting", 0)
        + 2 * calls.get("find", 0)
        + calls.get("cancel", 0)
        + calls.get("probe", 0) * _probe_sections()
        + pings
    )
    return {
        "mode": mode,
        "tasks": tasks,
        "state": view.state,
        "counts": view.counts,
        "wall_s": round(wall, 1),
        "submit_commands": submits,
        "observation_commands": observe,
        "scheduler_commands": submits + observe,
        "per_task": round((submits + observe) / tasks, 4),
        "submit_per_task": round(submits / tasks, 4),
        "remote_calls": calls,
    }


async def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [await _one(m, args.tasks, args.cycle, args.refresh) for m in args.modes.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--cycle", type=float, default=2.0, help="FEDHPC_CYCLE_S; 0: default")
    ap.add_argument("--refresh", type=float, default=2.0, help="FEDHPC_REFRESH_S; 0: default")
    ap.add_argument("--modes", default="arrays,singles")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    lock_path = lock_of(plan_at(devfed_root()).instance.number)
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"arrays: waiting for {lock_path} (a test run holds it)\n")
            fcntl.flock(lock, fcntl.LOCK_EX)
        out = anyio.run(_run, args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("| mode | tasks | state | wall s | submit cmds | other sched cmds | sched cmds / task |")
    print("|---|---|---|---|---|---|---|")
    for r in out:
        print(
            f"| {r['mode']} | {r['tasks']} | {r['state']} | {r['wall_s']} | "
            f"{r['submit_commands']} | {r['observation_commands']} | {r['per_task']} |"
        )
    by = {r["mode"]: r for r in out}
    if {"arrays", "singles"} <= set(by):
        ratio = by["singles"]["per_task"] / max(by["arrays"]["per_task"], 1e-9)
        mark = "pass" if ratio >= GOAL else "FAIL"
        print(
            f"\nscheduler commands per task, without / with arrays: {ratio:.1f}x "
            f"(goal >= {GOAL:g}x): {mark}"
        )
    for r in out:
        print(f"{r['mode']}: remote calls {r['remote_calls']}")


if __name__ == "__main__":
    main()
