"""Seeded background load for the local federation, shaped like the paper's Figure 1.

Each site gets its own arrival process (one stream per partition): jobs of different sizes and
durations arrive as a Poisson process and are submitted with `sbatch`, named
`fedhpc-load-<site>-<partition>-<n>`. The shapes are chosen so that the queue length a site
shows says little about how soon a new job starts there, as on the paper's production systems:

- devdelta has MANY pending jobs and MANY free GPUs. `gpuA40x4` is idle but holds a queue of
  pipeline stages waiting on a running upstream job (Reason=Dependency: pending in squeue,
  holding nothing); `gpuA100x4` holds one small long job with 4-GPU jobs queued behind it
  (three GPUs free, but a backfilled job must end before the queued job's reservation: the
  case where "free GPUs" mislead); `cpu` is full with a real queue behind it;
- devdeltaai has FEW pending jobs and ONE free GPU: a long 3-GPU job holds `ghx4`, with at
  most one 2-GPU job waiting behind it;
- devvista has FEW pending jobs and MANY free GPUs (`gh`, `gh-dev` idle), but its CPU node
  `gg` is held by one long whole-node job with nothing queued (busy, queue empty);
- devanvil: `shared` holds a queue of pipeline stages waiting on an upstream job (many
  pending, CPUs free); `ai` gets a light load (one H100 busy now and then).

A second load, `churn` (`LOADS["churn"]`, `matched_rounds.py --load churn`), has the opposite
shape without any blocked job: the long queues are lines of short jobs that drain within a
minute or two (devdelta `cpu`, `gpuA100x4`, `gpuA40x4`), and every partition with an empty
queue is held by long jobs for the whole experiment (devanvil `shared`, `debug`, `ai`;
devdeltaai `ghx4`, `ghx4-interactive`; devvista `gg`, `gh`, `gh-dev`).

Seeded with `random.Random(seed)` per stream, so the arrival sequence is reproducible (the
scheduler's reaction to it is real, so queues differ a little between runs).

API: `gen = LoadGenerator(seed); gen.start(); ...; gen.stop()` runs it in a background thread
and `stop()` cancels only the jobs this generator submitted, by id. Module-level `start(seed)` /
`stop()` wrap one shared instance.

Run alone: .venv/bin/python benchmarks/loadgen.py [--seed 1] [--duration 300] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Self

import anyio

os.environ.setdefault("FEDHPC_DEVFED", "1")

from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain import JobSpec, Shape
from fedhpc.profiles import load_federation


@dataclass(frozen=True)
class Stream:
    """One partition's arrival process."""

    site: str
    partition: str
    rate_per_min: float  # Poisson arrival rate
    sizes: tuple[tuple[int, int], ...]  # (cpus, gpus) choices, drawn uniformly
    duration_s: tuple[float, float]  # sleep range (before --scale)
    max_pending: int  # stop arriving while this many jobs pend in the partition
    initial: tuple[tuple[int, int, float], ...] = ()  # (cpus, gpus, duration_s) burst at start
    gpu: bool = False
    blocked: bool = False  # pipeline stages: depend (afterok) on the site's upstream job


# Where each site's upstream job runs (1 CPU, for the whole experiment): the stages of
# `blocked` streams wait on it.
UPSTREAM = {"devdelta": "interactive", "devanvil": "shared"}
UPSTREAM_S = 3300  # under devdelta interactive's 1 h MaxTime with the 120 s wall margin

# The Figure-1 shape. Durations are in seconds before scaling.
STREAMS: tuple[Stream, ...] = (
    # devdelta: many pending, many free GPUs.
    Stream(
        "devdelta",
        "cpu",
        4.0,
        ((64, 0), (48, 0), (32, 0)),
        (120, 400),
        12,
        initial=((64, 0, 600),) + ((64, 0, 300),) * 6,
    ),
    Stream(
        "devdelta",
        "gpuA100x4",
        1.5,
        ((8, 4),),
        (200, 500),
        5,
        initial=((4, 1, 2400), (8, 4, 400), (8, 4, 400)),
        gpu=True,
    ),
    Stream(
        "devdelta",
        "gpuA40x4",
        1.5,
        ((8, 4), (8, 2)),
        (200, 500),
        10,
        initial=((8, 4, 400),) * 6,
        gpu=True,
        blocked=True,
    ),
    # devdeltaai: few pending, one free GPU.
    Stream("devdeltaai", "ghx4", 0.3, ((8, 2),), (60, 200), 1, initial=((12, 3, 2400),), gpu=True),
    # devvista: few pending, many free GPUs; its CPU node busy with an empty queue.
    Stream("devvista", "gg", 0.0, ((144, 0),), (60, 240), 0, initial=((144, 0, 2400),)),
    # devanvil: a queue of pipeline stages next to free CPUs; a light GPU load.
    Stream("devanvil", "ai", 0.3, ((8, 1),), (60, 240), 1, gpu=True),
    Stream(
        "devanvil",
        "shared",
        1.0,
        ((64, 0), (32, 0)),
        (60, 300),
        8,
        initial=((64, 0, 300),) * 5,
        blocked=True,
    ),
)


# A second shape ("churn"), the other way round: the queues that LOOK long are long lines of
# short jobs that drain within a minute or two, and every partition with an empty queue is held
# by long jobs (whole nodes, all GPUs) for the whole experiment. Queue length now says the
# opposite of how soon a new job starts, without any dependency-blocked job.
CHURN: tuple[Stream, ...] = (
    # CPU: devdelta cpu, a line of quarter-node 15-40 s jobs; the empty CPU queues are held.
    Stream("devdelta", "cpu", 12.0, ((16, 0),), (10, 25), 8, initial=((16, 0, 20),) * 8),
    Stream("devanvil", "shared", 0.0, ((128, 0),), (60, 60), 0, initial=((128, 0, 2400),)),
    Stream("devanvil", "debug", 0.0, ((128, 0),), (60, 60), 0, initial=((128, 0, 1650),)),
    Stream("devvista", "gg", 0.0, ((144, 0),), (60, 60), 0, initial=((144, 0, 2400),)),
    # GPU: devdelta's two partitions, lines of short 1- and 2-GPU jobs; the rest held.
    Stream(
        "devdelta",
        "gpuA100x4",
        8.0,
        ((8, 2), (4, 1)),
        (10, 25),
        6,
        initial=((8, 2, 20),) * 6,
        gpu=True,
    ),
    Stream(
        "devdelta",
        "gpuA40x4",
        8.0,
        ((8, 2), (8, 4)),
        (10, 25),
        6,
        initial=((8, 2, 20),) * 6,
        gpu=True,
    ),
    Stream("devdeltaai", "ghx4", 0.0, ((8, 4),), (60, 60), 0, initial=((8, 4, 2400),), gpu=True),
    Stream(
        "devdeltaai",
        "ghx4-interactive",
        0.0,
        ((8, 4),),
        (60, 60),
        0,
        initial=((8, 4, 3300),),
        gpu=True,
    ),
    Stream("devvista", "gh", 0.0, ((8, 1),), (60, 60), 0, initial=((8, 1, 2400),) * 2, gpu=True),
    Stream("devvista", "gh-dev", 0.0, ((8, 1),), (60, 60), 0, initial=((8, 1, 2400),), gpu=True),
    Stream("devanvil", "ai", 0.0, ((8, 2),), (60, 60), 0, initial=((8, 2, 2400),), gpu=True),
)

LOADS = {"figure1": STREAMS, "churn": CHURN}


def _account(stream: Stream) -> str:
    return "fedhpc-gpu" if stream.gpu else "fedhpc-cpu"


@dataclass
class LoadGenerator:
    seed: int = 1
    scale: float = 1.0  # multiplies durations (quick runs use < 1)
    tick_s: float = 2.0
    streams: tuple[Stream, ...] = STREAMS
    submitted: dict[str, list[str]] = field(default_factory=dict)  # site -> job ids
    upstream: dict[str, str] = field(default_factory=dict)  # site -> upstream job id
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self, *, wait_initial: bool = True) -> Self:
        self._thread = threading.Thread(target=self._main, name="loadgen", daemon=True)
        self._thread.start()
        if wait_initial:
            self._ready.wait(timeout=60)
        return self

    def stop(self) -> int:
        """Stop arrivals and cancel every job this generator submitted that is still live."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        return anyio.run(self._cancel_all)

    def job_ids(self) -> dict[str, list[str]]:
        return {s: list(v) for s, v in self.submitted.items()}

    # ---- internals -------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            anyio.run(self._run)
        except Exception as exc:  # keep the benchmark alive; report later
            self.errors.append(f"loadgen stopped: {exc!r}")
            self._ready.set()

    async def _submit(
        self, ad: SiteAdapter, st: Stream, n: int, *, cpus: int, gpus: int, dur: float
    ) -> None:
        dur = max(5, round(dur * self.scale))
        spec = JobSpec(
            name=f"fedhpc-load-{st.site}-{st.partition}-{n}",
            command=("sleep", str(dur)),
            partition=st.partition,
            account=_account(st),
            shape=Shape(cpus=cpus, gpus=gpus, memory_mib=1024, wall_time_s=dur + 120),
            stdout="/dev/null",
            stderr="/dev/null",
        )
        try:
            if st.blocked:  # a pipeline stage: pending on the upstream job, holding nothing
                sbatch = ad.dialect.submit_command(ad.render(spec))
                after = f"--dependency=afterok:{self.upstream[st.site]}"
                command = replace(sbatch, argv=(*sbatch.argv, after))
                job_id = ad.dialect.parse_submit(await ad.transport.run(command))
            else:
                job_id = (await ad.submit(spec)).job_id
        except Exception as exc:
            self.errors.append(f"{st.site}/{st.partition}: {exc}")
            return
        self.submitted.setdefault(st.site, []).append(job_id)

    async def _upstream(self, ad: SiteAdapter, partition: str) -> None:
        """The running job a site's pipeline stages wait on: 1 CPU, the whole experiment."""
        spec = JobSpec(
            name=f"fedhpc-load-{ad.name}-upstream",
            command=("sleep", str(UPSTREAM_S)),
            partition=partition,
            account="fedhpc-cpu",
            shape=Shape(cpus=1, memory_mib=1024, wall_time_s=UPSTREAM_S + 120),
            stdout="/dev/null",
            stderr="/dev/null",
        )
        job = await ad.submit(spec)
        self.upstream[ad.name] = job.job_id
        self.submitted.setdefault(ad.name, []).append(job.job_id)

    async def _run(self) -> None:
        sites = load_federation()
        ads = {n: open_adapter(s) for n, s in sites.items() if n in {s.site for s in self.streams}}
        rngs = {
            (s.site, s.partition): random.Random(f"{self.seed}:{s.site}:{s.partition}")  # noqa: S311
            for s in self.streams
        }
        counters: dict[tuple[str, str], int] = {}
        try:
            for site in sorted({st.site for st in self.streams if st.blocked} & set(ads)):
                await self._upstream(ads[site], UPSTREAM[site])
            for st in self.streams:  # the initial burst shapes the queues right away
                if st.site not in ads:
                    continue
                for cpus, gpus, dur in st.initial:
                    k = counters[(st.site, st.partition)] = (
                        counters.get((st.site, st.partition), 0) + 1
                    )
                    await self._submit(ads[st.site], st, k, cpus=cpus, gpus=gpus, dur=dur)
            self._ready.set()
            # Next arrival time per stream (Poisson: exponential gaps).
            t0 = time.monotonic()
            nxt = {
                key: t0 + rngs[key].expovariate(max(st.rate_per_min, 1e-9) / 60)
                for st in self.streams
                for key in [(st.site, st.partition)]
            }
            while not self._stop.is_set():
                now = time.monotonic()
                due = [st for st in self.streams if nxt[(st.site, st.partition)] <= now]
                pending = await self._pending(ads, {st.site for st in due})
                for st in due:
                    key = (st.site, st.partition)
                    rng = rngs[key]
                    nxt[key] = now + rng.expovariate(max(st.rate_per_min, 1e-9) / 60)
                    cpus, gpus = rng.choice(st.sizes)
                    dur = rng.uniform(*st.duration_s)
                    if st.site not in ads or pending.get(key, 0) >= st.max_pending:
                        continue  # draw anyway so the sequence stays seed-determined
                    counters[key] = counters.get(key, 0) + 1
                    await self._submit(
                        ads[st.site], st, counters[key], cpus=cpus, gpus=gpus, dur=dur
                    )
                await anyio.sleep(self.tick_s)
        finally:
            self._ready.set()
            for ad in ads.values():
                await ad.transport.aclose()

    async def _pending(
        self, ads: Mapping[str, SiteAdapter], names: set[str]
    ) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for name in sorted(names):
            if name not in ads:
                continue
            state = await ads[name].probe()
            for p in state.partitions:
                out[(name, p.name)] = p.pending_jobs
        return out

    async def _cancel_all(self) -> int:
        sites = load_federation()
        cancelled = 0
        for name, ids in sorted(self.submitted.items()):
            if not ids or name not in sites:
                continue
            ad = open_adapter(sites[name])
            try:
                live = [o.job_id for o in await ad.status(ids) if not o.state.terminal]
                live = sorted(set(live) & set(ids))
                if live:
                    await ad.cancel(live)
                    cancelled += len(live)
            except Exception as exc:
                self.errors.append(f"cancel on {name}: {exc}")
            finally:
                await ad.transport.aclose()
        return cancelled


_SHARED: dict[str, LoadGenerator] = {}


def start(seed: int = 1, scale: float = 1.0) -> LoadGenerator:
    """Start the shared generator (see `LoadGenerator`)."""
    if "default" in _SHARED:
        raise RuntimeError("load generator already running")
    _SHARED["default"] = LoadGenerator(seed=seed, scale=scale).start()
    return _SHARED["default"]


def stop() -> int:
    """Stop the shared generator and cancel its jobs; returns how many were cancelled."""
    gen = _SHARED.pop("default", None)
    return 0 if gen is None else gen.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=300, help="seconds to run")
    ap.add_argument("--scale", type=float, default=1.0, help="duration multiplier")
    args = ap.parse_args()
    from fedhpc.logs import configure_logging

    configure_logging("warning")
    gen = start(args.seed, args.scale)
    try:
        time.sleep(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        total = sum(len(v) for v in gen.submitted.values())
        n = stop()
        print(f"submitted {total} load jobs, cancelled {n} still live; errors: {gen.errors[:5]}")


if __name__ == "__main__":
    main()
