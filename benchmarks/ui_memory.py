"""The daemon's RSS with and without a dashboard reading it (docs/ui.md).

A real `fedhpc daemon` on the four local-process sites (no Slurm), idle for --idle-s; then a
real `fedhpc ui` and Debian's Chromium with one tab per page (federation, tasks, events), each
polling as a person's would, for --watch-s. Prints the daemon's RSS (VmRSS, MiB) every 30 s and
its peak (VmHWM). Needs playwright and /usr/bin/chromium (./dev test installs both).

    .venv/bin/python benchmarks/ui_memory.py [--idle-s 60] [--watch-s 240]
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

from playwright.sync_api import sync_playwright


def _status(pid: int, key: str) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"{key}:\s+(\d+)", text)
    assert found, text
    return int(found.group(1)) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=60)
    ap.add_argument("--watch-s", type=float, default=240)
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
            for page in ("federation", "tasks", "events"):
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
