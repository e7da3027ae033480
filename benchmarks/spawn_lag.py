"""How long the event loop is held when the daemon runs its scheduler commands, with the
machine's CPUs kept busy by other processes (a sweep's clusters and jobs): the transports' way
(fedhpc.adapters.transports.process: Popen on a worker thread, the child driven from the loop
through its fds and a pidfd) against asyncio's subprocesses, which the transports used before
(Popen on the loop's own thread; on Python 3.11 a waitpid thread per child by default, or a
pidfd with fedhpc.adapters.transports.children). A ticker asks the loop to wake every
millisecond; its lateness is what a REST request arriving then would wait. The same ticker with
no commands running shows what the busy CPUs alone cost.

Run: .venv/bin/python benchmarks/spawn_lag.py [--commands 400] [--parallel 8] [--hogs 4]
Prints, per way of running: the loop's lateness p50 / p99 / max and the wall time."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from fedhpc.adapters.transports.children import children_watched_by_pidfd  # noqa: E402
from fedhpc.adapters.transports.local import run_bounded  # noqa: E402


async def _drain(stream: ByteReceiveStream) -> None:
    async for _ in stream:
        pass


async def _by_asyncio(argv: list[str]) -> None:
    """What the transports did before: anyio.open_process (asyncio's subprocess), both streams
    read, then the exit awaited."""
    async with await anyio.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, process.stdout)
            tg.start_soon(_drain, process.stderr)
        await process.wait()


async def _by_transport(argv: list[str]) -> None:
    await run_bounded(argv, stdin=None, env=None, timeout_s=60)


WAYS: dict[str, tuple[Callable[[list[str]], Awaitable[None]] | None, bool]] = {
    "no commands": (None, False),
    "asyncio, thread per child": (_by_asyncio, False),
    "asyncio, pidfd watcher": (_by_asyncio, True),
    "off the loop + pidfd": (_by_transport, False),
}


async def _measure(args: argparse.Namespace, way: str) -> dict[str, float]:
    run, pidfd = WAYS[way]
    if not pidfd:
        return await _lateness(args, run)
    with children_watched_by_pidfd() as used:
        assert used, "no pidfds on this machine"
        return await _lateness(args, run)


async def _lateness(
    args: argparse.Namespace, run: Callable[[list[str]], Awaitable[None]] | None
) -> dict[str, float]:
    late: list[float] = []
    done = anyio.Event()

    async def tick() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await anyio.sleep(0.001)
            late.append((time.perf_counter() - asked - 0.001) * 1000)

    limiter = anyio.CapacityLimiter(args.parallel)

    async def one() -> None:
        assert run is not None
        async with limiter:
            await run(["true"])

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        if run is None:
            await anyio.sleep(args.idle_s)
        else:
            async with anyio.create_task_group() as cmds:
                for _ in range(args.commands):
                    cmds.start_soon(one)
        done.set()
    wall = time.perf_counter() - started
    q = statistics.quantiles(late, n=100, method="inclusive")
    return {"p50_ms": q[49], "p99_ms": q[98], "max_ms": max(late), "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=400)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--hogs", type=int, default=4, help="busy processes meanwhile")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=3.0, help="'no commands' runs this long")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        rows: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):  # interleaved, so all see the same machine
            for way, runs in rows.items():
                runs.append(anyio.run(_measure, args, way))
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
            f"  {name:26} p50 {med['p50_ms']:6.2f} ms  p99 {med['p99_ms']:6.1f} ms  "
            f"max {med['max_ms']:6.1f} ms  wall {med['wall_s']:5.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
