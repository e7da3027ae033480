"""What the SSH path costs: one site's probe (one batched remote call) through the local
transport, through ssh on a warm ControlMaster, and through ssh when the master has expired
(a new login per call), against the devfed SSH front. Prints medians; asserts nothing.

    .venv/bin/python benchmarks/ssh_path.py [--site devdelta] [--rounds 10]

Read-only on the cluster (probes only), so it needs no test lock; the federation must be up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from fedhpc.adapters.site import open_adapter
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.domain.site import Health
from fedhpc.logs import configure_logging
from fedhpc.profiles import load_federation
from fedhpc_dev.devfed.sshd import start_front


async def _median_ms(rounds: int, once: Callable[[], Awaitable[None]]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await once()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _measure(site: str, rounds: int) -> dict[str, float]:
    os.environ.pop("FEDHPC_DEVFED_SSH_CONFIG", None)
    local = open_adapter(load_federation()[site])
    conf = local.site.transport.env["SLURM_CONF"]
    front = start_front(Path(tempfile.mkdtemp(prefix="fedhpc-sshd-")), {site: {"SLURM_CONF": conf}})
    os.environ.update(front.env())
    state = Path(tempfile.mkdtemp(prefix="fedhpc-bench-"))
    os.environ["FEDHPC_HOME"] = str(state)
    try:
        remote = open_adapter(load_federation()[site])
        ssh = remote.transport
        assert isinstance(ssh, SshTransport)

        async def probe_local() -> None:
            assert (await local.probe()).health is not Health.OFFLINE

        async def probe_ssh() -> None:
            assert (await remote.probe()).health is not Health.OFFLINE

        async def probe_cold() -> None:
            await anyio.run_process(ssh.control_argv("exit"), check=False)
            await probe_ssh()

        await probe_ssh()  # opens the master
        out = {
            "local": await _median_ms(rounds, probe_local),
            "ssh, warm master": await _median_ms(rounds, probe_ssh),
            "ssh, master expired (new login each call)": await _median_ms(rounds, probe_cold),
        }
        await anyio.run_process(ssh.control_argv("exit"), check=False)
        return out
    finally:
        front.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="devdelta")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    configure_logging(None)
    os.environ["FEDHPC_DEVFED"] = "1"
    figures = anyio.run(_measure, args.site, args.rounds)
    print(f"probe of {args.site}, median of {args.rounds} (one batched remote call each):")
    for name, ms in figures.items():
        print(f"  {name:<44} {ms:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
