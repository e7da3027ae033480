"""A real daemon on the four local-process sites (no Slurm, so no devfed lock) and a real
`fedhpc ui` reading it, for the Chromium tests of the dashboard (test_ui_failures.py,
test_ui_views.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import start, stop

FEDHPC = [sys.executable, "-m", "fedhpc.cli.main"]
T = TypeVar("T")


@dataclass
class Dashboard:
    home: Path
    env: dict[str, str]
    url: str
    daemon: subprocess.Popen[bytes]
    ui: subprocess.Popen[str]

    def restart_daemon(self) -> None:
        """Start the daemon again and wait until it answers (up to 30 s, `client`): a page
        that stays red afterwards is the page's fault, not a slow start on a loaded machine."""
        self.daemon = start(self.home, **self.env)
        self.client(lambda client: client.health())

    def client(self, work: Callable[[DaemonClient], Awaitable[T]], limit: float = 180) -> T:
        """`work` with a client of the daemon, run to its end on its own thread (the browser's
        sync API keeps an event loop on this one)."""

        async def run() -> T:
            async with DaemonClient(DaemonSettings.from_env(home=self.home)) as client:
                await client.wait_until_up(30)
                await client.refresh()  # placement sees the sites from the start
                return await work(client)

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(anyio.run, run).result(timeout=limit)


def process_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    # The local-process sites in a private folder: the Slurm federation is never looked at.
    return {
        **env,
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(tmp / "devfed"),
        "FEDHPC_HOME": str(tmp / "home"),
    }


def serve_dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    """A daemon and `fedhpc ui --port 0` on it, up and every site probed; both stopped after."""
    env = process_env(tmp_path)
    home = Path(env["FEDHPC_HOME"])
    daemon = start(home, **env)
    ui = subprocess.Popen(
        [*FEDHPC, "ui", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running: Dashboard | None = None
    try:
        assert ui.stdout is not None and ui.stderr is not None
        first = ui.stdout.readline()
        found = re.match(r"fedhpc ui: (http://127\.0\.0\.1:\d+/\?token=\S+)$", first.strip())
        assert found, first + (ui.stderr.read() if ui.poll() is not None else "")
        running = Dashboard(home, env, found.group(1), daemon, ui)
        # Up, and every site probed once (in the history too): a test that starts at once
        # met "no daemon at ..." or a scatter without a site on a loaded machine.
        running.client(lambda client: client.health())
        yield running
    finally:
        if ui.poll() is None:
            ui.send_signal(signal.SIGINT)
            ui.wait(timeout=30)
        for stream in (ui.stdout, ui.stderr):
            if stream is not None:
                stream.close()
        stop(daemon)
        if running is not None:  # the test may have restarted it
            stop(running.daemon)
