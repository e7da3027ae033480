"""The placement-quality experiment (the paper's Table IV in miniature) on the local federation.

Each round: probe every site once (one snapshot); ask every policy what it would pick; submit
the same fixed-shape job (`sleep N`) to EVERY feasible candidate partition within seconds
(matched submissions); wait for all of them; read Submit/Eligible/Start/End from sacct. Rounds
cycle CPU, 1-GPU and 4-GPU requests. Background load comes from `loadgen.py` (seeded).

Per policy: share of rounds it picked the fastest observed placement, median and mean
completion (End - Submit), mean wait (Start - Eligible), median and p95 additional completion
time vs the fastest placement of that round.

Run: .venv/bin/python benchmarks/matched_rounds.py [--rounds 15] [--seed 1] [--quick]
Writes benchmarks/results/matched_rounds{,-quick}.{md,csv,svg,png} (figures: matplotlib,
the `bench` extra) and, from each matched job's recorded wait forecasts, the calibration table
per estimator and site (`wait_calibration.py`: in the .md and wait_calibration{,-LOAD}.csv).
Cancels every job it submitted (matched and load) when done or interrupted.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("FEDHPC_DEVFED", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_policy import DaemonPolicy
from hedge_policy import hedge_copies, winner
from loadgen import LOADS, LoadGenerator
from plots import matched_rounds_figure
from trace_load import TraceLoad
from wait_calibration import METHODS, CalibrationRow, calibration_rows, markdown, write_csv

from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain import JobSpec, ResourceEnvelope, ResourceSnapshot
from fedhpc.domain.config import Site
from fedhpc.orchestrator.start_estimates import requests_from_trace, scheduler_estimates
from fedhpc.placement import Placement, PlacementInputs, Policy, WaitObservation, place
from fedhpc.profiles import load_federation
from fedhpc.settings import DEVFED_TEST_LOCK

RESULTS = Path(__file__).resolve().parent / "results"
# The integration tests drain every cluster (scancel --user root): hold their lock meanwhile.
LOCK = Path(DEVFED_TEST_LOCK.get() or "")
KINDS = ("cpu", "gpu1", "gpu4")
ENVELOPES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"cpus": {"min": 8, "max": 8}, "memory": {"min": "4G", "max": "4G"}},
    "gpu1": {
        "gpus": {"min": 1, "max": 1},
        "cpus": {"min": 4, "max": 4},
        "memory": {"min": "4G", "max": "4G"},
    },
    "gpu4": {
        "gpus": {"min": 4, "max": 4},
        "cpus": {"min": 8, "max": 8},
        "memory": {"min": "8G", "max": "8G"},
    },
}
POLICIES = (
    "fixed-site",
    "shortest-queue",
    "bf-paper",
    "bf-scheduler",
    "bf-learned",
    "daemon",
    "daemon+hedge",
)
BENCH = ("fixed-site", "shortest-queue", "bf-paper", "bf-scheduler", "bf-learned")
PAPER = {  # the paper's Table IV (19 rounds, 83 jobs, 4 production systems)
    "fixed-site": "median +42 s, p95 +5,873 s",
    "shortest-queue": "median +4 s, p95 +3,000 s, mean completion 738 s",
    "best-feasible": "median +4 s, p95 +3,000 s, mean completion 817 s",
}


def _policy(name: str, fixed: str) -> Policy:
    if name == "fixed-site":
        return Policy(kind="fixed-site", site=fixed, joint_sizing=False, wait="paper")
    if name == "shortest-queue":
        return Policy(kind="shortest-queue", joint_sizing=False, wait="paper")
    return Policy(joint_sizing=False, wait=name.removeprefix("bf-"))


@dataclass
class Job:
    round: int
    kind: str
    site: str
    partition: str
    job_id: str
    sleep_s: int
    submit: datetime | None = None
    eligible: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    state: str = ""
    censored: bool = False
    # What each wait estimator predicted for this partition at the round's snapshot (s).
    predicted: dict[str, float] = field(default_factory=dict)

    @property
    def completion(self) -> float | None:
        if self.submit is None or self.end is None:
            return None
        return (self.end - self.submit).total_seconds()

    @property
    def wait(self) -> float | None:
        base = self.eligible or self.submit
        # A censored job that never started waited at least until the cutoff (a lower bound).
        start = self.start or (self.end if self.censored else None)
        return None if base is None or start is None else (start - base).total_seconds()


@dataclass
class Round:
    index: int
    kind: str
    taken_at: datetime
    picks: dict[str, str] = field(default_factory=dict)  # policy -> "site/partition"
    jobs: dict[str, Job] = field(default_factory=dict)  # "site/partition" -> job
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)  # site -> (pending, free gpu)
    decisions: dict[str, str] = field(default_factory=dict)  # policy -> its one-line decision
    hedge: tuple[str, ...] = ()  # daemon+hedge: the daemon's pick, then its copies' partitions


async def probe_all(ads: Mapping[str, SiteAdapter]) -> ResourceSnapshot:
    states = {}

    async def one(n: str) -> None:
        states[n] = await ads[n].probe()

    async with anyio.create_task_group() as tg:
        for n in sorted(ads):
            tg.start_soon(one, n)
    return ResourceSnapshot(taken_at=datetime.now(UTC), sites=states)


def history_from(rounds: list[Round]) -> list[WaitObservation]:
    out = []
    for r in rounds:
        env = ENVELOPES[r.kind]
        for job in r.jobs.values():
            if job.wait is None or job.censored or job.start is None:
                continue
            out.append(
                WaitObservation(
                    site=job.site,
                    partition=job.partition,
                    gpus=env.get("gpus", {}).get("min", 0),
                    cpus=env["cpus"]["min"],
                    nodes=1,
                    wait_s=max(0.0, job.wait),
                    observed_at=job.start,
                )
            )
    return out


async def load_history(
    ads: Mapping[str, SiteAdapter], load: LoadGenerator | None
) -> list[WaitObservation]:
    """Waits of the background jobs that have started (sacct), for the learned estimator: what
    a daemon's history of the same queues would hold."""
    if load is None:
        return []
    out = []
    for site, ids in sorted(load.job_ids().items()):
        if site not in ads or not ids:
            continue
        for r in await ads[site].accounting(ids):
            if r.array_index is not None or r.start is None or r.wait_s is None or not r.partition:
                continue
            tres = r.alloc_tres
            gpus = int(tres.get("gres/gpu", "0") or 0)
            cpus = int(tres.get("cpu", "1") or 1)
            out.append(
                WaitObservation(
                    site=site,
                    partition=r.partition,
                    gpus=gpus,
                    cpus=cpus,
                    nodes=1,
                    wait_s=max(0.0, r.wait_s),
                    observed_at=r.start,
                )
            )
    return out


async def run_round(
    i: int,
    kind: str,
    sites: Mapping[str, Site],
    ads: Mapping[str, SiteAdapter],
    *,
    fixed: str,
    sleep_s: int,
    timeout_s: float,
    done: list[Round],
    load: LoadGenerator | None = None,
    daemon: DaemonPolicy | None = None,
) -> Round:
    env = ResourceEnvelope.model_validate(
        {**ENVELOPES[kind], "wall_time": {"min": f"{sleep_s + 300}s", "max": f"{sleep_s + 300}s"}}
    )
    snap = await probe_all(ads)
    now = snap.taken_at
    rnd = Round(i, kind, now)
    for n, st in snap.sites.items():
        rnd.queues[n] = (
            sum(p.pending_jobs for p in st.partitions),
            sum(p.free_gpus for p in st.partitions),
        )
    first = place(env, PlacementInputs(snap, sites, _policy("bf-paper", fixed), now=now))
    if not isinstance(first, Placement):
        print(f"round {i} ({kind}): unschedulable: {first.hint}")
        return rnd
    estimates = await scheduler_estimates(requests_from_trace(first.trace, top=16), ads)
    hist = history_from(done) + await load_history(ads, load)
    forecasts: dict[str, dict[str, float]] = {}  # "site/partition" -> estimator -> wait
    for name in BENCH:
        d = place(
            env,
            PlacementInputs(
                snap,
                sites,
                _policy(name, fixed),
                now=now,
                history=hist,
                estimates=estimates if name == "bf-scheduler" else None,
            ),
        )
        if isinstance(d, Placement):
            rnd.picks[name] = f"{d.site}/{d.partition}"
        if name == "bf-scheduler":  # its candidates carry every estimator's prediction
            for c in d.trace.candidates:
                if c.feasible and c.estimates is not None and c.estimates.wait_by:
                    forecasts.setdefault(f"{c.site}/{c.partition}", dict(c.estimates.wait_by))
    # The running daemon's own placement of the same request, through its real API: its job is
    # the matched job of the partition it chose (submitted a moment before the others).
    if daemon is not None:
        got = await daemon.place(i, env, sleep_s)
        if got is not None:
            key, job_id, site, part, decision = got
            rnd.picks["daemon"] = key
            rnd.decisions["daemon"] = decision
            rnd.jobs[key] = Job(i, kind, site, part, job_id, sleep_s)
            inputs = PlacementInputs(
                snap,
                sites,
                _policy("bf-scheduler", fixed),
                now=now,
                history=hist,
                estimates=estimates,
            )
            rnd.hedge = hedge_copies(
                env, inputs, key, copies=HEDGE_COPIES, min_gain_s=HEDGE_GAIN_S
            ).keys
    # Matched submissions: the same shape to every feasible (site, partition), concurrently.
    cands = {}
    for c in first.trace.candidates:
        key = f"{c.site}/{c.partition}"
        if c.feasible and key not in cands and key not in rnd.jobs:
            cands[key] = c

    async def submit(key: str) -> None:
        c = cands[key]
        spec = JobSpec(
            name=f"fedhpc-match-r{i}-{c.site}-{c.partition}",
            command=("sleep", str(sleep_s)),
            partition=c.partition,
            account=c.account,
            qos=c.qos,
            shape=c.shape,
            stdout="/dev/null",
            stderr="/dev/null",
        )
        job = await ads[c.site].submit(spec)
        rnd.jobs[key] = Job(i, kind, c.site, c.partition, job.job_id, sleep_s)

    async with anyio.create_task_group() as tg:
        for key in sorted(cands):
            tg.start_soon(submit, key)
    for key, job in rnd.jobs.items():
        job.predicted = forecasts.get(key, {})
    done.append(rnd)  # registered before waiting, so an interrupt still cancels its jobs
    await settle(rnd, ads, timeout_s)
    return rnd


async def settle(rnd: Round, ads: Mapping[str, SiteAdapter], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        by_site: dict[str, list[Job]] = {}
        for j in rnd.jobs.values():
            by_site.setdefault(j.site, []).append(j)
        pending = False
        for site, jobs in by_site.items():
            recs = {r.job_id: r for r in await ads[site].accounting([j.job_id for j in jobs])}
            for j in jobs:
                r = recs.get(j.job_id)
                if r is None:
                    pending = True
                    continue
                j.submit, j.eligible, j.start, j.end = r.submit, r.eligible, r.start, r.end
                j.state = r.native_state
                if not r.settled:
                    pending = True
        if not pending:
            return
        if time.monotonic() > deadline:
            cutoff = datetime.now(UTC)
            live = [j for j in rnd.jobs.values() if j.end is None]
            for j in live:  # censored: the completion is a lower bound
                j.censored = True
                j.end = cutoff if j.start is None else max(cutoff, j.start)
            await cancel_jobs(ads, live)
            return
        await anyio.sleep(2.0)


async def cancel_jobs(ads: Mapping[str, SiteAdapter], jobs: list[Job]) -> None:
    by_site: dict[str, list[str]] = {}
    for j in jobs:
        by_site.setdefault(j.site, []).append(j.job_id)
    for site, ids in by_site.items():
        try:
            live = [o.job_id for o in await ads[site].status(ids) if not o.state.terminal]
            live = sorted(set(live) & set(ids))
            if live:
                await ads[site].cancel(live)
        except Exception as exc:
            print(f"cancel on {site} failed: {exc}")


async def cancel_rounds(rounds: list[Round]) -> None:
    sites = load_federation()
    ads = {n: open_adapter(s) for n, s in sites.items()}
    try:
        await cancel_jobs(ads, [j for r in rounds for j in r.jobs.values()])
    finally:
        for ad in ads.values():
            await ad.transport.aclose()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)] if s else float("nan")


# daemon+hedge: at most this many sites per task, each copy gaining this much (expected).
HEDGE_COPIES = 2
HEDGE_GAIN_S = 15.0


def hedge_picks(rounds: list[Round]) -> dict[str, float]:
    """daemon+hedge's pick of each round (its copy that started first, `hedge_policy.winner`)
    and what hedging cost: extra submissions (each also a cancel) per task, hedged rounds."""
    extra = hedged = n = 0
    for r in rounds:
        keys = tuple(k for k in r.hedge if k in r.jobs)
        if not keys:
            continue
        n += 1
        extra += len(keys) - 1
        hedged += len(keys) > 1
        r.picks["daemon+hedge"] = winner(keys, {k: r.jobs[k].start for k in keys})
    return {"tasks": n, "extra_per_task": extra / n if n else float("nan"), "hedged": hedged}


def summarize(rounds: list[Round]) -> dict[str, dict[str, float]]:
    hedge_picks(rounds)
    out = {}
    for name in POLICIES:
        comps, waits, extra, fastest = [], [], [], 0
        n = 0
        for r in rounds:
            got = {k: j.completion for k, j in r.jobs.items() if j.completion is not None}
            pick = r.picks.get(name)
            if not got or pick not in got:
                continue
            if all(j.censored for j in r.jobs.values()):
                continue  # nothing finished: no fastest placement to compare against
            n += 1
            best = min(got.values())
            c = got[pick]
            comps.append(c)
            extra.append(c - best)
            fastest += c - best <= 1.0  # sacct has whole-second resolution
            w = r.jobs[pick].wait
            if w is not None:
                waits.append(w)
        out[name] = {
            "rounds": n,
            "fastest": fastest / n if n else float("nan"),
            "median_c": statistics.median(comps) if comps else float("nan"),
            "mean_c": statistics.fmean(comps) if comps else float("nan"),
            "mean_w": statistics.fmean(waits) if waits else float("nan"),
            "median_x": statistics.median(extra) if extra else float("nan"),
            "mean_x": statistics.fmean(extra) if extra else float("nan"),
            "p95_x": pct(extra, 0.95),
        }
    return out


def with_table(md: list[str], table: list[str]) -> list[str]:
    """The lines of an earlier result .md with its table replaced by `table`: --from-csv
    recomputes only what the CSV holds; the run's command, machine, load and the daemon's
    decision lines (none of them in the CSV) stay as the run wrote them. Without an earlier
    .md, the whole .md is written from the CSV and this invocation's flags (--load ...)."""
    rows = [i for i, line in enumerate(md) if line.startswith("|")]
    if not rows:
        return [*md, "", *table]
    end = rows[0]
    while end + 1 < len(md) and md[end + 1].startswith("|"):
        end += 1  # the first table only: the calibration tables follow it
    return [*md[: rows[0]], *table, *md[end + 1 :]]


CALIBRATION_HEADING = "## Wait forecasts: calibration per estimator and site"


def with_section(md: list[str], section: list[str]) -> list[str]:
    """`md` with its calibration section (from its heading to the daemon's own lines, which
    --from-csv cannot recompute) replaced by `section`, or `section` put before those lines."""
    tail = next((i for i, s in enumerate(md) if s.startswith("The daemon's")), len(md))
    if CALIBRATION_HEADING in md:
        return [*md[: md.index(CALIBRATION_HEADING)], *section, "", *md[tail:]]
    return [*md[:tail], *section, "", *md[tail:]] if tail < len(md) else [*md, "", *section]


def daemon_store_lines(own: list[dict[str, Any]] | None) -> list[str]:
    """The daemon's own calibration rows (`GET /v1/estimators`) as a table."""
    if not own:
        return []
    lines = [
        "",
        "The daemon's own store (`GET /v1/estimators`, as `fedhpc status` shows it: its "
        "placed jobs only, the last 20 per partition):",
        "",
        "| site | partition | estimator | jobs | median abs error | median bias | p10-p90 held |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in own:
        cov = e.get("coverage")
        held = "-" if cov is None else f"{cov * 100:.0f} % of {e.get('scored', 0)}"
        lines.append(
            f"| {e['site']} | {e['partition']} | {e['method']} | {e['n']} "
            f"| {e['median_abs_error_s']:.0f} s | {e['median_bias_s']:+.0f} s | {held} |"
        )
    return lines


def calibration_section(
    parts: Sequence[CalibrationRow], per_site: Sequence[CalibrationRow], csv_name: str
) -> list[str]:
    """The .md's calibration section (`wait_calibration.py`); none without forecasts."""
    if not per_site:
        return []
    return [
        CALIBRATION_HEADING,
        "",
        "Every matched job's wait as each estimator predicted it at the round's snapshot "
        "(bf-scheduler's candidates), against sacct's Start - Eligible; the p10-p90 band "
        "is the prediction shifted by the residuals of the partition's earlier jobs, as "
        "the daemon builds it (`placement/calibration.py` `AdaptiveBand`: 3 before a job is "
        "scored, the last 20, the level adapted on every judged job), goal 80 % ± 10; next "
        "to it the split conformal band used before (fixed level). bias = median(predicted "
        "- observed), positive: it predicted longer waits; |error| of the raw prediction "
        "(the start-time forecast) and of the band's p50. cut = jobs that never started "
        "before the round timeout and whose band's p90 was above the cutoff (their miss or "
        "hit unknown: left out; a p90 below it is counted a miss; the adaptive band learns "
        f"their lower bound). CSV: `{csv_name}`.",
        "",
        *markdown(parts, per_site),
    ]


def write_outputs(
    rounds: list[Round],
    summary: dict[str, dict[str, float]],
    args: argparse.Namespace,
    stem: str,
    started: datetime,
) -> list[Path]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    machine = (
        f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    njobs = sum(len(r.jobs) for r in rounds)
    ncens = sum(j.censored for r in rounds for j in r.jobs.values())
    cmd = "`" + ("python benchmarks/matched_rounds.py " + " ".join(sys.argv[1:])).strip() + "`"
    if getattr(args, "from_csv", None):
        run = "python benchmarks/matched_rounds.py" + (" --quick" if args.quick else "")
        cmd = f"`{run}` (table recomputed from its CSV: `--from-csv {args.from_csv.name}`)"
    lines = [
        f"# Matched-submission rounds ({'--quick' if args.quick else 'full'} run)",
        "",
        f"Command: {cmd}; seed {args.seed}; started {started:%Y-%m-%d %H:%M} UTC; "
        f"machine: {machine}; local federation (4 Slurm clusters) with seeded background load "
        f"(loadgen.py, load `{getattr(args, 'load', 'figure1')}`"
        f"{'; ' + args.trace_note if getattr(args, 'trace_note', '') else ''}). "
        f"{len(rounds)} rounds ({', '.join(r.kind for r in rounds)}), {njobs} "
        f"matched jobs, {ncens} censored at the round timeout (their completion is a lower "
        f"bound). Fixed site: {args.fixed_site}. Rounds where every job was censored "
        f"({sum(all(j.censored for j in r.jobs.values()) for r in rounds)}) are left out of "
        "the policy figures. Completion = sacct End - Submit; wait = Start - Eligible.",
        "",
    ]
    table = [
        "| policy | rounds | picked fastest | median completion | mean completion | mean wait "
        "| median additional | mean additional | p95 additional |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        if not s["rounds"]:
            continue  # a policy this run left out (--no-daemon, or a CSV from before it)
        table.append(
            f"| {name} | {s['rounds']} | {s['fastest'] * 100:.0f} % | {s['median_c']:.0f} s "
            f"| {s['mean_c']:.0f} s | {s['mean_w']:.0f} s | {s['median_x']:.0f} s "
            f"| {s['mean_x']:.0f} s | {s['p95_x']:.0f} s |"
        )
    lines += [
        *table,
        "",
        "Paper (Table IV, production systems): "
        + "; ".join(f"{k}: {v}" for k, v in PAPER.items())
        + ".",
    ]
    cost = hedge_picks(rounds)
    if cost["tasks"]:
        lines += [
            "",
            f"daemon+hedge (up to {HEDGE_COPIES} sites, a copy kept when it gains "
            f"≥ {HEDGE_GAIN_S:.0f} s by the forecasts; judged on the matched jobs: the copy that "
            f"started first wins): hedged {cost['hedged']} of {cost['tasks']} tasks, "
            f"{cost['extra_per_task']:.2f} extra submissions (and as many cancels) per task.",
        ]
    parts, per_site = calibration_rows(rounds)
    calib_csv = RESULTS / f"wait_calibration{stem.removeprefix('matched_rounds')}.csv"
    calib_lines = calibration_section(parts, per_site, calib_csv.name)
    if calib_lines:
        lines += ["", *calib_lines]
    lines += daemon_store_lines(getattr(args, "daemon_estimators", None))
    said = [(r.index, r.decisions["daemon"]) for r in rounds if "daemon" in r.decisions]
    if said:
        lines += ["", "The daemon's decisions (its `decision` line, as get_result shows it):", ""]
        lines += [f"- round {i}: {d}" for i, d in said]
    md = RESULTS / f"{stem}.md"
    if getattr(args, "from_csv", None) and md.exists():
        lines = with_table(md.read_text().splitlines(), table)
        if calib_lines:  # a CSV from before the recorded forecasts has none
            lines = with_section(lines, calib_lines)
    md.write_text("\n".join(lines) + "\n")
    calib = [write_csv(calib_csv, parts, per_site)] if per_site else []
    title = (
        f"Matched rounds: seed {args.seed}, {len(rounds)} rounds"
        f"{' (--quick)' if args.quick else ''}; {machine}"
    )
    if getattr(args, "from_csv", None):  # an older CSV has no queue snapshots: no scatter
        figs = matched_rounds_figure(rounds, POLICIES, title=title, out_stem=RESULTS / stem)
        return [md, *calib, *figs]
    csv_path = RESULTS / f"{stem}.csv"
    with csv_path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "seed",
                "round",
                "kind",
                "snapshot_at",
                "site",
                "partition",
                "job_id",
                "sleep_s",
                "submit",
                "eligible",
                "start",
                "end",
                "state",
                "censored",
                "wait_s",
                "completion_s",
                "fastest_s",
                "picked_by",
                "site_pending",
                "site_free_gpus",
                *(f"predicted_{m}_s" for m in METHODS),
            ]
        )
        for r in rounds:
            got = [j.completion for j in r.jobs.values() if j.completion is not None]
            best = min(got) if got else None
            for key, j in sorted(r.jobs.items()):
                iso = [t.isoformat() if t else "" for t in (j.submit, j.eligible, j.start, j.end)]
                w.writerow(
                    [
                        args.seed,
                        r.index,
                        r.kind,
                        r.taken_at.isoformat(),
                        j.site,
                        j.partition,
                        j.job_id,
                        j.sleep_s,
                        *iso,
                        j.state,
                        int(j.censored),
                        j.wait,
                        j.completion,
                        best,
                        " ".join(p for p, k in sorted(r.picks.items()) if k == key),
                        *r.queues.get(j.site, ("", "")),
                        *(j.predicted.get(m, "") for m in METHODS),
                    ]
                )
    figures = matched_rounds_figure(rounds, POLICIES, title=title, out_stem=RESULTS / stem)
    return [md, csv_path, *calib, *figures]


async def experiment(
    args: argparse.Namespace, rounds: list[Round], load: LoadGenerator | None = None
) -> None:
    sites = load_federation()
    ads = {n: open_adapter(s) for n, s in sites.items()}
    rng = random.Random(args.seed)  # noqa: S311 (seeded sleep durations)
    daemon = None if args.no_daemon else await DaemonPolicy.start()
    try:
        for i in range(args.rounds):
            if args.until and datetime.now(UTC).strftime("%H:%M") >= args.until:
                print(f"stopping before round {i}: it is past --until {args.until} UTC")
                break
            kind = KINDS[i % len(KINDS)]
            lo, hi = args.sleep or ((5, 15) if args.quick else (20, 90))
            sleep_s = rng.randint(lo, hi)
            t0 = time.monotonic()
            r = await run_round(
                i,
                kind,
                sites,
                ads,
                fixed=args.fixed_site,
                sleep_s=sleep_s,
                timeout_s=args.round_timeout,
                done=rounds,
                load=load,
                daemon=daemon,
            )
            comps = {k: j.completion for k, j in r.jobs.items()}
            print(
                f"round {i} {kind} sleep {sleep_s}s ({time.monotonic() - t0:.0f}s): "
                f"picks {r.picks} completions {comps}",
                flush=True,
            )
    finally:
        with anyio.CancelScope(shield=True):
            await cancel_jobs(ads, [j for r in rounds for j in r.jobs.values()])
            for ad in ads.values():
                await ad.transport.aclose()
            if daemon is not None:
                with anyio.move_on_after(30):
                    args.daemon_estimators = await daemon.estimators()
                daemon.stop()
                print(daemon.report(), flush=True)


def rounds_from_csv(path: Path) -> tuple[list[Round], int, datetime]:
    """Rounds back from a run's CSV: recompute the table (and, when the CSV has the queue
    snapshots, the figure) without rerunning."""

    def t(v: str) -> datetime | None:
        return datetime.fromisoformat(v) if v else None

    rounds: dict[int, Round] = {}
    seed = 0
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            seed, i = int(row["seed"]), int(row["round"])
            taken = datetime.fromisoformat(row["snapshot_at"])
            r = rounds.setdefault(i, Round(i, row["kind"], taken))
            key = f"{row['site']}/{row['partition']}"
            r.jobs[key] = Job(
                i,
                row["kind"],
                row["site"],
                row["partition"],
                row["job_id"],
                int(row["sleep_s"]),
                t(row["submit"]),
                t(row["eligible"]),
                t(row["start"]),
                t(row["end"]),
                row["state"],
                row["censored"] == "1",
                {m: float(v) for m in METHODS if (v := row.get(f"predicted_{m}_s"))},
            )
            for name in row["picked_by"].split():
                r.picks[name] = key
            if row.get("site_pending"):  # runs since the matplotlib figures record the queues
                r.queues[row["site"]] = (int(row["site_pending"]), int(row["site_free_gpus"]))
    done = [rounds[i] for i in sorted(rounds)]
    return done, seed, min(r.taken_at for r in done)


def from_csv(args: argparse.Namespace) -> None:
    done, args.seed, started = rounds_from_csv(args.from_csv)
    args.quick = args.from_csv.stem.endswith("-quick")
    for p in write_outputs(done, summarize(done), args, args.from_csv.stem, started):
        print(f"wrote {p}")
    print((RESULTS / f"{args.from_csv.stem}.md").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=None, help="default 15 (--quick: 3)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="3 rounds, short sleeps, a few minutes")
    ap.add_argument("--fixed-site", default="devdelta")
    ap.add_argument(
        "--load",
        choices=[*sorted(LOADS), "trace"],
        default="figure1",
        help="background load (trace: LCG.swf.gz replayed, trace_load.py)",
    )
    ap.add_argument("--no-daemon", action="store_true", help="leave out the daemon policy")
    ap.add_argument("--until", default=None, help="HH:MM UTC: start no round after it")
    ap.add_argument(
        "--sleep",
        default=None,
        type=lambda v: tuple(int(x) for x in v.split("-", 1)),
        help="LO-HI seconds of the matched job (default 20-90; --quick 5-15)",
    )
    ap.add_argument("--round-timeout", type=float, default=None, help="s; then jobs are censored")
    ap.add_argument("--warmup", type=float, default=None, help="s of load before round 0")
    ap.add_argument(
        "--from-csv",
        type=Path,
        default=None,
        help="recompute the policy table and the figure from a run's CSV (submits nothing); "
        "in an existing results/<csv stem>.md only the table is replaced: the run's command, "
        "machine, load and the daemon's decision lines are not in the CSV and stay as written",
    )
    args = ap.parse_args()
    if args.from_csv:
        from_csv(args)
        return
    args.rounds = args.rounds or (3 if args.quick else 15)
    args.round_timeout = args.round_timeout or (90 if args.quick else 120)
    args.warmup = args.warmup if args.warmup is not None else (10 if args.quick else 30)
    from fedhpc.logs import configure_logging

    configure_logging("warning")
    lock = LOCK.open("a")
    print(f"waiting for {LOCK} (integration tests drain the clusters)", flush=True)
    fcntl.flock(lock, fcntl.LOCK_EX)
    started = datetime.now(UTC)
    load: LoadGenerator
    if args.load == "trace":
        load = TraceLoad(seed=args.seed).start()
    else:
        load = LoadGenerator(
            seed=args.seed, scale=0.3 if args.quick else 1.0, streams=LOADS[args.load]
        ).start()
    rounds: list[Round] = []
    try:
        time.sleep(args.warmup)
        anyio.run(experiment, args, rounds, load)
    except KeyboardInterrupt:
        print("interrupted: cancelling submitted jobs", file=sys.stderr)
    finally:
        anyio.run(cancel_rounds, rounds)  # again, in case an interrupt skipped the first pass
        n = load.stop()
        print(
            f"load: {sum(len(v) for v in load.submitted.values())} jobs, {n} cancelled; "
            f"errors {load.errors[:3]}"
        )
        if isinstance(load, TraceLoad):
            args.trace_note = load.describe()
    report(args, rounds, started)


def report(args: argparse.Namespace, rounds: list[Round], started: datetime) -> None:
    done = [r for r in rounds if r.jobs]
    if not done:  # a federation that was down: keep the committed results as they are
        print("no round submitted a job: nothing written")
        return
    stem = "matched_rounds-quick" if args.quick else "matched_rounds"
    if args.load != "figure1":
        stem += f"-{args.load}"
    for p in write_outputs(done, summarize(done), args, stem, started):
        print(f"wrote {p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p}")
    print((RESULTS / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
