"""Dispatch over a slow link (issue 33): 100 single-CPU tasks handed to the local Slurm
federation's clusters through SSH, each connection's data delayed by `--delay-ms` (150 ms)
each way, as a center reached over the internet or through a bastion.

The clusters stand behind the devfed sshd (one login host per cluster, `fedhpc_dev.devfed.sshd`);
between the ssh client and that sshd sits a proxy in this process that holds every chunk of
data `--delay-ms` before passing it on, in both directions (a round trip costs twice that). A
real `fedhpc daemon` reaches the clusters through it (ControlMaster and all, as in production).
`--tasks` tasks (`true`, 1 CPU) are submitted at once from `--sessions` clients over REST; the
figure is the time from the first submit until every task's job id is recorded in the
daemon's store, with the submit calls the daemon made per site. Then every job name is looked
up in the clusters' queues and accounting: each must be there exactly once.

Run: .venv/bin/python benchmarks/dispatch_ssh.py [--tasks 100] [--delay-ms 150] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import closing, suppress
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev.devfed.sshd import SSH_CONFIG_ENV, start_front
from fedhpc_dev.profiles import devfed_root

SITES = ("devanvil", "devdelta", "devdeltaai", "devvista")


class DelayProxy:
    """TCP on 127.0.0.1: each listen port forwards to its upstream port, every chunk held
    `delay_s` before it is written on (order kept, throughput not limited by the delay)."""

    def __init__(self, upstreams: dict[int, int], delay_s: float) -> None:
        self.upstreams = upstreams  # listen port -> upstream port
        self.delay_s = delay_s
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        for listen, upstream in self.upstreams.items():
            self.loop.run_until_complete(
                asyncio.start_server(partial(self._conn, upstream=upstream), "127.0.0.1", listen)
            )
        self.ready.set()
        self.loop.run_forever()

    async def _conn(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: int
    ) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_w), self._pump(up_r, writer))

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not data:
                    with suppress(OSError):
                        dst.write_eof()
                    return
                dst.write(data)
                with suppress(OSError):
                    await dst.drain()

        task = asyncio.ensure_future(deliver())
        try:
            while data := await src.read(65536):
                queue.put_nowait((time.monotonic() + self.delay_s, data))
        except OSError:
            pass
        queue.put_nowait((time.monotonic() + self.delay_s, b""))
        with suppress(Exception):
            await task


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [int(s.getsockname()[1]) for s in socks]
    for s in socks:
        s.close()
    return ports


def _slow_config(front_config: Path, ports: dict[int, int], out: Path) -> None:
    """The front's ssh_config with each Host's port swapped for its proxy's."""
    lines = []
    for line in front_config.read_text().splitlines():
        key, _, value = line.strip().partition(" ")
        swap = key == "Port" and int(value) in ports
        lines.append(f"    Port {ports[int(value)]}" if swap else line)
    out.write_text("\n".join(lines) + "\n")


def _job_ids(db: Path) -> dict[str, tuple[str, str | None]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT task_id, site, job_id, job_name FROM attempts").fetchall()
    return {name: (site, job) for _, site, job, name in rows}


def _seen(names: set[str]) -> Counter[str]:
    """How often each job name is in the clusters' accounting (every job, ended or not)."""
    found: Counter[str] = Counter()
    for site in SITES:
        env = {**os.environ, "SLURM_CONF": str(devfed_root() / site / "slurm.conf")}
        out = subprocess.run(
            ["sacct", "-n", "-X", "-P", "--starttime=now-1hours", "-o", "JobName"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        found.update(n for n in out if n in names)
    return found


def _start_daemon(log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="fedhpc-sshb-"))
    logins = {s: {"SLURM_CONF": str(devfed_root() / s / "slurm.conf")} for s in SITES}
    front = start_front(root / "front", logins)
    proxies = dict(zip(_free_ports(len(SITES)), (front.port(s) for s in SITES), strict=True))
    proxy = DelayProxy(proxies, args.delay_ms / 1000)
    proxy.start()
    slow = root / "ssh_config_slow"
    _slow_config(front.ssh_config, {u: p for p, u in proxies.items()}, slow)
    home = root / "h"
    home.mkdir()
    env = {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": "1",
        SSH_CONFIG_ENV: str(slow),
        "FEDHPC_CYCLE_S": "2",
        "FEDHPC_REFRESH_S": "2",
        "FEDHPC_LOG_LEVEL": "info",
    }
    daemon = _start_daemon(root / "daemon.log", env)
    (root / "daemon.pid").write_text(f"{daemon.pid}\n")  # for a profiler (py-spy --pid)
    settings = DaemonSettings.from_env(home=home)
    envelope = ResourceEnvelope.model_validate(
        {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
    )
    try:
        async with DaemonClient(settings, timeout_s=60) as client:
            await client.wait_until_up(120)
            await client.refresh()
            ids: list[str] = []

            async def session(k: int) -> None:
                for i in range(k, args.tasks, args.sessions):
                    req = SubmitTaskRequest(
                        command=("true",),
                        name=f"ssh{i}",
                        envelope=envelope,
                        idempotency_key=f"sshbench-{i}",
                    )
                    ids.append((await client.submit_task(req)).task_id)

            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for k in range(args.sessions):
                    tg.start_soon(session, k)
            answered = time.monotonic() - started
            with anyio.fail_after(600):
                while True:
                    rows = _job_ids(settings.db_path)
                    if len(rows) >= args.tasks and all(j for _, j in rows.values()):
                        break
                    await anyio.sleep(0.05)
            dispatched = time.monotonic() - started
            health = await client.health()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    calls = {
        site: int(v.get("total", {}).get("submit", 0))
        for site, v in (health.get("remote_calls") or {}).items()
    }
    names = set(rows)
    per_site = Counter(site for site, _ in rows.values())
    for _ in range(30):
        seen = _seen(names)
        if len(seen) >= len(names):
            break
        await anyio.sleep(1)
    front.close()
    return {
        "tasks": args.tasks,
        "sessions": args.sessions,
        "delay_ms_each_way": args.delay_ms,
        "all_answered_s": round(answered, 2),
        "all_dispatched_s": round(dispatched, 2),
        "jobs_per_site": dict(sorted(per_site.items())),
        "submit_calls_per_site": calls,
        "job_names_in_accounting": len(seen),
        "submitted_more_than_once": sum(1 for c in seen.values() if c > 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--delay-ms", type=float, default=150.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = anyio.run(_run, args)
    if args.json:
        print(json.dumps(out))
        return
    for key, value in out.items():
        print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
