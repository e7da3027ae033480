"""The daemon asks the schedulers (sbatch --test-only) on the real local federation: one batched
call per site, answers reused within a cycle, a slow or stopped controller falls back in time,
and the estimate that decided is named in the trace and in get_result."""

from __future__ import annotations

import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.collector import Collector
from fedhpc.domain import JobState, ResourceEnvelope, Shape
from fedhpc.domain.config import Site
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.orchestrator import Orchestrator
from fedhpc.orchestrator.records import TaskRecord, new_id
from fedhpc.placement import Placement
from fedhpc.profiles import load_federation
from fedhpc.store import Store
from tests.integration.daemon_util import drain, running, sbatch, wait_terminal

pytestmark = pytest.mark.devfed

GPU1 = {
    "gpus": {"min": 1, "max": 1},
    "cpus": {"min": 4, "max": 4},
    "wall_time": {"min": "10m", "max": "10m"},
}


class Counting:
    """A site's real transport, counting its remote calls by the command they run; a streamed
    call (`run_lines`, the user's accounting) also keeps the job ids of the rows it handed on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[str] = []
        self.streamed: list[list[str]] = []  # per streamed call, the first field of each row

    async def run(self, command: Command) -> CommandResult:
        self.calls.append(command.stdin or " ".join(command.argv))
        result: CommandResult = await self.inner.run(command)
        return result

    async def run_lines(
        self, command: Command, on_lines: Callable[[list[str]], Awaitable[None]]
    ) -> CommandResult:
        self.calls.append(" ".join(command.argv))
        ids: list[str] = []
        self.streamed.append(ids)

        async def seen(lines: list[str]) -> None:
            ids.extend(line.split("|", 1)[0] for line in lines)
            await on_lines(lines)

        result: CommandResult = await self.inner.run_lines(command, seen)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()

    def test_only_calls(self) -> int:
        return sum("--test-only" in c for c in self.calls)


@pytest.fixture
def fed(devfed: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    drain(devfed)
    yield devfed
    drain(devfed)


def _task(envelope: dict[str, Any]) -> TaskRecord:
    req = SubmitTaskRequest(command=("true",), envelope=ResourceEnvelope.model_validate(envelope))
    return TaskRecord(
        id=new_id("t"),
        request=req,
        idempotency_key=new_id("k"),
        state=JobState.QUEUED,
        created_at=datetime.now(UTC),
    )


@contextmanager
def silent_controller() -> Iterator[int]:
    """A port that accepts connections and never answers: a hung slurmctld."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


def _pointed_at(site: Site, port: int, tmp: Path) -> SiteAdapter:
    """`site`'s adapter with its Slurm commands sent to a controller on `port`."""
    src = Path(site.transport.env["SLURM_CONF"])
    conf_dir = tmp / f"{site.name}-conf"
    conf_dir.mkdir()
    for f in src.parent.glob("*.conf"):
        shutil.copy(f, conf_dir / f.name)
    text = (conf_dir / "slurm.conf").read_text()
    lines = [
        f"SlurmctldPort={port}" if ln.startswith("SlurmctldPort=") else ln
        for ln in text.splitlines()
    ]
    (conf_dir / "slurm.conf").write_text("\n".join(lines) + "\n")
    spec = site.transport.model_copy(update={"env": {"SLURM_CONF": str(conf_dir / "slurm.conf")}})
    return SiteAdapter(site, LocalTransport(spec))


@asynccontextmanager
async def _orchestrator(
    tmp: Path, swap: dict[str, SiteAdapter] | None = None, timeout_s: float = 2.0
) -> AsyncIterator[tuple[Orchestrator, dict[str, Counting]]]:
    sites = load_federation()
    probe = {n: open_adapter(s) for n, s in sites.items()}
    counted = {
        n: Counting((swap or {}).get(n, open_adapter(s)).transport) for n, s in sites.items()
    }
    adapters = {n: SiteAdapter(s, counted[n]) for n, s in sites.items()}
    store = await Store.open(tmp / "o.db")
    try:
        collector = Collector(sites, probe, store, refresh_s=60, probe_timeout_s=20)
        with anyio.fail_after(60):
            await collector.refresh(force=True)
        yield (
            Orchestrator(store, collector, adapters, cycle_s=30, estimate_timeout_s=timeout_s),
            counted,
        )
    finally:
        await store.close()
        for a in [*probe.values(), *adapters.values()]:
            await a.transport.aclose()


async def test_a_decision_asks_each_candidate_site_once_and_reuses_the_answer_in_the_cycle(
    fed: Any, tmp_path: Path
) -> None:
    async with _orchestrator(tmp_path) as (o, counted):
        with anyio.fail_after(60):
            d = await o.planner.decide(_task(GPU1))
        assert isinstance(d, Placement)
        asked = {c.site for c in d.trace.candidates if c.feasible}
        # One batched remote call per site with feasible candidates, none to the others.
        calls = {n: c.test_only_calls() for n, c in counted.items() if c.test_only_calls()}
        assert calls == dict.fromkeys(asked, 1)
        assert d.estimates.wait_source.startswith("scheduler")
        assert d.trace.estimates_note.startswith("scheduler estimates for ")
        n_sched = sum(
            1
            for c in d.trace.candidates
            if c.estimates and c.estimates.wait_source.startswith("scheduler")
        )
        assert n_sched >= len(asked)
        # The same shape again within the cycle: answered from the cache, no remote call.
        again = await o.planner.decide(_task(GPU1))
        assert isinstance(again, Placement)
        assert sum(c.test_only_calls() for c in counted.values()) == len(asked)
        assert again.estimates.wait_source == d.estimates.wait_source
        # A job placed on the chosen partition leaves its "start now" answer standing while
        # the probe's free GPUs hold that job and the next: no call.
        o.waits.mark_placed(d.site, d.partition, d.shape, "placed-0")
        third = await o.planner.decide(_task(GPU1))
        assert isinstance(third, Placement)
        assert counted[d.site].test_only_calls() == 1
        # Once the jobs placed there take the room it was told about: stale, asked again.
        state = o.collector.latest[d.site].partition(d.partition)
        assert state is not None and state.free_gpus >= 1
        for i in range(state.free_gpus):
            o.waits.mark_placed(d.site, d.partition, d.shape, f"placed-{i}")
        fourth = await o.planner.decide(_task(GPU1))
        assert isinstance(fourth, Placement)
        assert counted[d.site].test_only_calls() == 2


async def test_a_batch_of_children_shares_one_call_per_site(fed: Any, tmp_path: Path) -> None:
    async with _orchestrator(tmp_path) as (o, counted):
        tasks = [_task(GPU1) for _ in range(6)] + [_task({**GPU1, "cpus": {"min": 8, "max": 8}})]
        with anyio.fail_after(60):
            answer = await o.planner.prefetch(tasks, history=None, ledger=o.claims.ledger())
        assert answer is not None and answer.starts
        calls = {n: c.test_only_calls() for n, c in counted.items() if c.test_only_calls()}
        assert set(calls.values()) == {1}  # two shapes, seven tasks: one call per site
        ledger = o.claims.ledger()
        for t in tasks:
            d = await o.planner.decide(t, ledger=ledger, answer=answer)
            assert isinstance(d, Placement)
            ledger.claim(d.site, d.partition, d.account, d.shape, d.estimates.charge)
            o.waits.mark_placed(d.site, d.partition, d.shape, t.id)
        assert {n: c.test_only_calls() for n, c in counted.items() if c.test_only_calls()} == calls


@pytest.mark.parametrize("controller", ["hung", "stopped"])
async def test_a_slow_or_stopped_controller_falls_back_in_time_and_the_trace_says_why(
    fed: Any, tmp_path: Path, controller: str
) -> None:
    sites = load_federation()
    with silent_controller() as hung_port:
        if controller == "hung":
            port = hung_port
        else:  # nothing listens there: a controller that is down
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        swap = {"devdelta": _pointed_at(sites["devdelta"], port, tmp_path)}
        async with _orchestrator(tmp_path, swap, timeout_s=1.5) as (o, counted):
            t0 = anyio.current_time()
            with anyio.fail_after(30):
                d = await o.planner.decide(_task(GPU1))
            took = anyio.current_time() - t0
            assert isinstance(d, Placement)
            delta = [c for c in d.trace.candidates if c.feasible and c.site == "devdelta"]
            assert delta, "devdelta's GPU partitions should be feasible"
            for c in delta:
                assert c.estimates is not None
                src = c.estimates.wait_source
                assert not src.startswith("scheduler"), src
                assert "no scheduler estimate: " in src
                assert src.startswith(("learned", "paper"))
            assert "devdelta: " in d.trace.estimates_note
            # The other sites still answered.
            others = [c for c in d.trace.candidates if c.feasible and c.site != "devdelta"]
            assert any(
                c.estimates and c.estimates.wait_source.startswith("scheduler") for c in others
            )
            # The failure is remembered for the cycle: the next decision does not wait again.
            before = counted["devdelta"].test_only_calls()
            await o.planner.decide(_task(GPU1))
            assert counted["devdelta"].test_only_calls() == before == 1
            print(f"{controller}: decision took {took:.2f} s; note: {d.trace.estimates_note}")


async def test_get_result_names_the_estimate_that_decided(fed: Any, tmp_path: Path) -> None:
    async with running(tmp_path / "h") as client:
        handle = await client.submit_task(
            SubmitTaskRequest(command=("true",), envelope=ResourceEnvelope.model_validate(GPU1))
        )
        assert "est. wait" in handle.decision
        done = await wait_terminal(client, handle.task_id)
        assert done.provenance is not None
        assert "(scheduler" in done.provenance.decision, done.provenance.decision
        r = await client.get_result(ResultRequest(task_id=handle.task_id))
        assert r.provenance is not None and "(scheduler" in r.provenance.decision
        # Once accounting gives the observed wait, the estimators are judged on it.
        (att,) = r.attempts
        with anyio.fail_after(60):
            while True:
                body = await client.estimators()
                rows = [
                    e
                    for e in body["estimators"]
                    if (e["site"], e["partition"]) == (att.site, att.partition)
                ]
                if rows:
                    break
                await anyio.sleep(1)
        assert body["scheduler_calls"] >= 1
        assert {e["method"] for e in rows} >= {"scheduler", "paper"}
        assert all(e["n"] == 1 and e["median_abs_error_s"] >= 0 for e in rows)


async def test_the_learned_estimator_learns_from_the_users_other_jobs_in_accounting(
    fed: Any, tmp_path: Path
) -> None:
    # Three jobs fedhpc never submitted, on devvista/gh: the learned estimator counts them.
    ids = [
        sbatch(
            fed,
            "devvista",
            "-p",
            "gh",
            "-A",
            "fedhpc-gpu",
            "--gres=gpu:gh200:1",
            "-c",
            "4",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        )
        for _ in range(3)
    ]
    async with _orchestrator(tmp_path) as (o, counted):
        with anyio.fail_after(60):
            while True:
                await o.waits.learn_from_accounting(force=True)
                # Each job is its own observation, even three alike started in one second.
                seen = [w for w in o.waits.user_waits.get("devvista", []) if w.job in ids]
                if len(seen) == 3:
                    break
                await anyio.sleep(1)
        assert all(w.wait_s >= 0 and (w.partition, w.gpus) == ("gh", 1) for w in seen)
        # One sacct per site per read, and not again within ACCOUNTING_EVERY_S.
        reads = sum("sacct" in c and "--user=" in c for c in counted["devvista"].calls)
        await o.waits.learn_from_accounting()
        assert sum("sacct" in c and "--user=" in c for c in counted["devvista"].calls) == reads
        history = await o.waits.history()
        assert history is not None
        got = history.estimate("devvista", "gh", Shape(cpus=4, gpus=1, wall_time_s=600))
        assert got is not None and got.source.startswith("learned:gpu:1 (n=")
    assert ids


async def test_a_job_active_across_reads_is_kept_once_and_each_read_is_one_streamed_call(
    fed: Any, tmp_path: Path
) -> None:
    """A job that runs across several reads of the user's accounting is in each read's answer
    (sacct returns every job active in the window asked: a running one in all of them) and is
    kept once, as are short jobs the overlap between reads returns twice. The first read asks
    for the whole learned window, the later ones only since the last, each one streamed call."""
    args = ("-p", "gg", "-A", "fedhpc-cpu", "-c", "2", "-t", "5", "-o", "/dev/null", "--wrap")
    long = sbatch(fed, "devvista", *args, "sleep 120")
    short = [sbatch(fed, "devvista", *args, "true") for _ in range(2)]
    async with _orchestrator(tmp_path) as (o, counted):
        c = counted["devvista"]

        async def read_until(ids: list[str]) -> list[str]:
            with anyio.fail_after(60):
                while True:
                    await o.waits.learn_from_accounting(force=True)
                    kept = [w.job for w in o.waits.user_waits.get("devvista", [])]
                    if set(ids) <= set(kept):
                        return kept
                    await anyio.sleep(1)

        await read_until([long, *short])
        later = sbatch(fed, "devvista", *args, "true")
        await anyio.sleep(2)
        kept = await read_until([long, *short, later])
        reads = [x for x in c.calls if x.startswith("sacct") and "--user=" in x]
        assert len(reads) == len(c.streamed) >= 2  # every read one call, streamed
        assert o.adapters["devvista"].calls["user_jobs"] == len(reads)
        assert "--starttime=now-1209600seconds" in reads[0]
        assert all("--starttime=now-1209600seconds" not in x for x in reads[1:])
        # The long job was in the answer of at least two reads, and of the last one: kept once.
        assert sum(long in ids for ids in c.streamed) >= 2 and long in c.streamed[-1]
        for job in (long, *short, later):
            assert kept.count(job) == 1, (job, kept)
    running = fed.run("devvista", "squeue", "-h", "-j", long, "-o", "%T")
    assert running.stdout.strip() == "RUNNING"  # active across every read (drained after)
