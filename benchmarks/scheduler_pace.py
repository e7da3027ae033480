"""Scheduler commands per minute for a 1,000-child sweep on one real-center site, before and
after the per-site etiquette (issue 40): the daemon's schedule of remote calls replayed in
virtual time through the real `CommandPace` and the profile's defaults.

Run: .venv/bin/python benchmarks/scheduler_pace.py [--children 1000] [--seed 1] [--json]

A model of the calls, not a run on a scheduler: submissions go in batched calls of up to 25
jobs (`submit_many`), the control cycle asks every 2 s (status of the bound jobs, then
accounting of those that left the queue), the collector probes every `min_refresh_s`. "Before"
sends each call when the daemon makes it; "after" observes only once per `status_floor` and
sends every call through the site's cap. Each send is also replayed into Slurm's rate limiter
with its defaults (rl_enable: a bucket of 30 per user, refilled 2/s) to count what it refuses.
Both count scheduler commands, not remote calls: a probe is one call of ~8 commands (it never
waits, `CommandPace.take`), a batched submission one `sbatch` per job, an observation its
`squeue` and the ping before it, accounting one `sacct`.
"""

from __future__ import annotations

import argparse
import json
import random
import tomllib
from collections import deque
from dataclasses import asdict, dataclass

import anyio

from fedhpc.adapters.pace import CommandPace
from fedhpc.domain.site import SiteProfile
from fedhpc.profiles.loader import shipped_profiles_dir

CYCLE_S = 2.0
BATCH = 20  # jobs per submit call: 25 (submitter.BATCH_MAX), at most the cap's burst (20)
RL_BUCKET, RL_REFILL = 30.0, 2.0  # slurm.conf rl_bucket_size, rl_refill_rate per second
PROBE_RPCS = 8  # one probe call runs ~8 Slurm commands (sinfo, squeue, sprio, sshare, ...)


@dataclass
class Outcome:
    label: str
    calls: int  # remote calls
    commands: int  # scheduler commands they ran
    peak_per_min: int
    mean_per_min: float
    refused_by_rl: int
    end_seen_after_s: float  # mean delay from a job's end to its observation
    wall_s: float


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.now += s


def _profile() -> SiteProfile:
    """NCSA Delta as shipped: min_refresh_s 120, the default cap."""
    path = shipped_profiles_dir() / "delta.toml"
    return SiteProfile.model_validate(tomllib.loads(path.read_text()))


def _peak_per_minute(rpcs: list[float]) -> int:
    """The most scheduler commands in any 60 s, as the cap and Slurm's limiter count them."""
    window: deque[float] = deque()
    peak = 0
    for at in rpcs:
        window.append(at)
        while window[0] <= at - 60.0:
            window.popleft()
        peak = max(peak, len(window))
    return peak


def _refused_by_limiter(rpcs: list[float]) -> int:
    """How many of those commands Slurm's rate limiter (rl_enable) would have refused."""
    bucket, last, refused = RL_BUCKET, 0.0, 0
    for at in rpcs:
        bucket = min(RL_BUCKET, bucket + (at - last) * RL_REFILL)
        last = at
        if bucket >= 1.0:
            bucket -= 1.0
        else:
            refused += 1
    return refused


async def _sweep(children: int, seed: int, etiquette: bool) -> Outcome:
    rng = random.Random(seed)  # noqa: S311  (runtimes, not secrets)
    runtimes = [rng.uniform(300, 1800) for _ in range(children)]
    prof = _profile()
    t = Clock()
    pace = CommandPace(prof.command_cap if etiquette else 10**6, clock=t.clock, sleep=t.sleep)
    floor = float(prof.status_floor) if etiquette else 0.0
    sent: list[float] = []
    rpcs: list[float] = []  # what Slurm's limiter counts: every command, a probe's 8 too

    async def send(weight: int = 1, *, probe: bool = False, urgent: bool = False) -> None:
        if probe:
            pace.take(weight)
        else:
            await pace.acquire(weight, urgent=urgent)
        sent.append(t.now)
        rpcs.extend([t.now] * weight)

    ends: list[float] = []
    for i in range(0, children, BATCH):
        await send(len(runtimes[i : i + BATCH]))  # one sbatch per job, in one call
        ends.extend(t.now + r for r in runtimes[i : i + BATCH])
    pending = sorted(ends)
    seen_delay: list[float] = []
    next_probe = last_observe = -1e18
    cycle = 0.0
    while pending:
        cycle = max(cycle + CYCLE_S, t.now)
        t.now = max(t.now, cycle)
        if t.now >= next_probe:
            await send(PROBE_RPCS, probe=True)
            next_probe = t.now + prof.min_refresh_s
        if t.now - last_observe < floor:
            continue
        last_observe = t.now
        await send(2, urgent=True)  # status of the bound jobs, behind the ping
        ended = [e for e in pending if e <= t.now]
        if ended:
            await send(urgent=True)  # accounting of those that left the queue
            seen_delay.extend(t.now - e for e in ended)
            pending = pending[len(ended) :]
    peak, refused = _peak_per_minute(rpcs), _refused_by_limiter(rpcs)
    wall = max(sent[-1], 1.0)
    return Outcome(
        label="after" if etiquette else "before",
        calls=len(sent),
        commands=len(rpcs),
        peak_per_min=peak,
        mean_per_min=round(len(rpcs) / wall * 60.0, 1),
        refused_by_rl=refused,
        end_seen_after_s=round(sum(seen_delay) / len(seen_delay), 1),
        wall_s=round(wall, 1),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = [anyio.run(_sweep, args.children, args.seed, e) for e in (False, True)]
    if args.json:
        print(json.dumps([asdict(o) for o in out], indent=2))
        return
    print(
        f"{args.children}-child sweep on one site (cap {_profile().command_cap}/min, "
        f"status floor {_profile().status_floor} s)"
    )
    print(
        f"{'':8}{'calls':>8}{'commands':>10}{'peak/min':>10}{'mean/min':>10}{'rl refused':>12}"
        f"{'end seen after':>16}{'wall':>9}"
    )
    for o in out:
        print(
            f"{o.label:8}{o.calls:>8}{o.commands:>10}{o.peak_per_min:>10}{o.mean_per_min:>10}"
            f"{o.refused_by_rl:>12}{o.end_seen_after_s:>14} s{o.wall_s:>7} s"
        )


if __name__ == "__main__":
    main()
