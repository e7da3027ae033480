"""The daemon's RSS with and without a dashboard reading it (docs/ui.md).

A real `fedhpc daemon` on the four local-process sites (no Slurm), holding a group of
--group-children children (default 5,000; placed nowhere: each child is unschedulable at once,
so no process runs), idle for --idle-s; then a real `fedhpc ui` and Debian's Chromium with one
tab per page (federation, the group's timeline, events), each polling as a person's would, for
--watch-s. Prints the daemon's RSS (VmRSS, MiB) every 30 s and its peak (VmHWM). Needs
playwright and /usr/bin/chromium (./dev test installs both).

    .venv/bin/python benchmarks/ui_memory.py [--idle-s 60] [--watch-s 240] [--group-children 5000]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from playwright.sync_api import sync_playwright

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest
from fedhpc.settings.daemon import DaemonSettings

# Two GPUs per node on devvista, whose nodes have one: unschedulable, so nothing runs.
NOWHERE = ResourceEnvelope.model_validate(
    {"gpus": {"min": 2, "max": 2}, "wall_time": {"min": "5m"}, "sites_include": ["devvista"]}
)


def _status(pid: int, key: str) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"{key}:\s+(\d+)", text)
    assert found, text
    return int(found.group(1)) / 1024


async def _group(home: Path, size: int) -> str:
    """A group of `size` children, every one judged (unschedulable) before it returns."""
    async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
        await client.wait_until_up(60)
        await client.refresh()
        group = await client.submit_group(
            SubmitGroupRequest(
                objective=f"{size} children for the dashboard",
                children=tuple(GroupChild(command=("true",)) for _ in range(size)),
                envelope=NOWHERE,
            )
        )
        with anyio.fail_after(600):
            while True:  # a poll of the daemon's answer: no event to wait on here
                if (await client.group(group.group_id, limit=1)).state != "placing":
                    return group.group_id
                await anyio.sleep(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=60)
    ap.add_argument("--watch-s", type=float, default=240)
    ap.add_argument("--group-children", type=int, default=5000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fedhpc-ui-memory-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    env |= {
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(tmp / "devfed"),
        "FEDHPC_HOME": str(tmp / "home"),
        "FEDHPC_REFRESH_S": "1",
        "FEDHPC_CYCLE_S": "1",
    }
    cli = [sys.executable, "-m", "fedhpc.cli.main"]
    daemon = subprocess.Popen([*cli, "daemon"], env=env, stderr=subprocess.DEVNULL)
    ui: subprocess.Popen[str] | None = None
    try:
        time.sleep(30)  # started, first probes stored
        gid = anyio.run(_group, tmp / "home", args.group_children) if args.group_children else None
        before = _status(daemon.pid, "VmRSS")
        time.sleep(args.idle_s)
        idle = _status(daemon.pid, "VmRSS")
        print(f"idle: {before:.1f} -> {idle:.1f} MiB in {args.idle_s:g} s", flush=True)
        ui = subprocess.Popen(
            [*cli, "ui", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert ui.stdout is not None
        url = ui.stdout.readline().split()[-1]
        samples = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
            )
            tabs = []
            tasks = f"tasks/group/{gid}" if gid else "tasks"
            for page in ("federation", tasks, "events"):
                tab = browser.new_page()
                tab.goto(url)
                tab.evaluate(f"location.hash = '#/{page}'")
                tabs.append(tab)
            started = time.monotonic()
            while time.monotonic() - started < args.watch_s:
                tabs[0].wait_for_timeout(30_000)
                samples.append(round(_status(daemon.pid, "VmRSS"), 1))
            browser.close()
        print(f"with the dashboard (3 tabs polling), every 30 s: {samples} MiB", flush=True)
        print(f"peak (VmHWM): {_status(daemon.pid, 'VmHWM'):.1f} MiB", flush=True)
    finally:
        if ui is not None:
            ui.send_signal(signal.SIGINT)
            ui.wait(timeout=30)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


if __name__ == "__main__":
    main()
