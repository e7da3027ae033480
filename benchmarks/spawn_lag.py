"""How long the event loop is held when the daemon runs its scheduler commands, as asyncio
watches each child by default on Python 3.11 (a thread per child) and by pidfd
(fedhpc.adapters.transports.children), with the machine's CPUs kept busy by other processes
(a sweep's clusters and jobs). A ticker asks the loop to wake every millisecond; its lateness
is what a REST request arriving then would wait.

Run: .venv/bin/python benchmarks/spawn_lag.py [--commands 400] [--parallel 8] [--hogs 4]
Prints, per way of watching: the loop's lateness p50 / p99 / max and the wall time."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from fedhpc.adapters.transports.children import watch_children_by_pidfd  # noqa: E402
from fedhpc.adapters.transports.local import run_bounded  # noqa: E402


async def _measure(args: argparse.Namespace, pidfd: bool) -> dict[str, float]:
    if pidfd:
        assert watch_children_by_pidfd(), "no pidfds on this machine"
    late: list[float] = []
    done = anyio.Event()

    async def tick() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await anyio.sleep(0.001)
            late.append((time.perf_counter() - asked - 0.001) * 1000)

    limiter = anyio.CapacityLimiter(args.parallel)

    async def one() -> None:
        async with limiter:
            await run_bounded(["true"], stdin=None, env=None, timeout_s=60)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        async with anyio.create_task_group() as cmds:
            for _ in range(args.commands):
                cmds.start_soon(one)
        done.set()
    wall = time.perf_counter() - started
    if pidfd:
        asyncio.set_child_watcher(None)
    q = statistics.quantiles(late, n=100)
    return {"p50_ms": q[49], "p99_ms": q[98], "max_ms": max(late), "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=400)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--hogs", type=int, default=4, help="busy processes meanwhile")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        rows: dict[str, list[dict[str, float]]] = {"thread per child": [], "pidfd": []}
        for _ in range(args.rounds):  # interleaved, so both see the same machine
            rows["thread per child"].append(anyio.run(_measure, args, False))
            rows["pidfd"].append(anyio.run(_measure, args, True))
    finally:
        for h in hogs:
            h.kill()
    print(
        f"{args.commands} commands, {args.parallel} at once, {args.hogs} busy processes, "
        f"median of {args.rounds} rounds; the loop's lateness:"
    )
    for name, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"  {name:17} p50 {med['p50_ms']:6.2f} ms  p99 {med['p99_ms']:6.1f} ms  "
            f"max {med['max_ms']:6.1f} ms  wall {med['wall_s']:5.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
