"""The PBS site adapter (devpolaris profile x pbs dialect x local transport) against the real
OpenPBS server of the local federation: probe, submit, status, accounting of finished jobs,
cancel, find by name, and qsub's refusals as typed errors."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.dialects import SchedulerRejected
from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain.job import AccountingRecord, ArraySpec, JobSpec, JobState, Shape
from fedhpc.domain.site import Health
from fedhpc.profiles import load_federation
from tests.integration.pbs_support import SITE, Devpolaris, devpolaris

__all__ = ["devpolaris"]  # the fixture, imported for pytest

OUT = Path(tempfile.gettempdir()) / "fedhpc-pbs-tests"


@pytest.fixture(autouse=True)
def _out_folder() -> None:
    OUT.mkdir(exist_ok=True)
    OUT.chmod(0o1777)


@pytest.fixture
async def site(
    devpolaris: Devpolaris, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SiteAdapter]:
    monkeypatch.setenv("FEDHPC_DEVFED", "pbs")
    adapter = open_adapter(load_federation()[SITE])
    yield adapter
    await adapter.transport.aclose()


def _spec(
    name: str,
    argv: list[str],
    *,
    partition: str = "prod",
    gpus: int = 1,
    seconds: int = 300,
    nodes: int = 1,
    out: Path | None = None,
    **kw: Any,
) -> JobSpec:
    return JobSpec(
        name=name,
        command=tuple(argv),
        partition=partition,
        account="fedhpc-gpu",
        shape=Shape(nodes=nodes, cpus=2, gpus=gpus, wall_time_s=seconds),
        # A folder: PBS names the files in it (arrays too), never in the checkout (qsub's cwd).
        stdout=str(out) if out else f"{OUT}/",
        stderr=f"{OUT}/",
        **kw,
    )


async def _until_terminal(
    adapter: SiteAdapter, job_id: str, limit: float = 120
) -> AccountingRecord:
    with anyio.fail_after(limit):
        while True:
            recs = [r for r in await adapter.accounting([job_id]) if r.array_index is None]
            if recs and recs[0].settled:
                return recs[0]
            await anyio.sleep(0.5)


async def _until_running(adapter: SiteAdapter, job_id: str, limit: float = 60) -> None:
    with anyio.fail_after(limit):
        while not [o for o in await adapter.status([job_id]) if o.state is JobState.RUNNING]:
            await anyio.sleep(0.3)


async def test_probe_sees_both_queues_with_their_vnodes_and_gpus(site: SiteAdapter) -> None:
    state = await site.probe()
    assert state.health is Health.OK, state.error
    prod, debug = state.partition("prod"), state.partition("debug")
    assert prod is not None and debug is not None
    assert prod.total_gpus == 8 and debug.total_gpus == 4
    assert prod.available and debug.available
    assert state.latency_s is not None


async def test_a_job_runs_and_its_accounting_comes_from_qstat_x(
    site: SiteAdapter, tmp_path: Path
) -> None:
    tmp_path.chmod(0o777)
    out = tmp_path / "acct.out"
    job = await site.submit(_spec("fedhpc-pbs-acct", ["bash", "-c", "echo ran; sleep 2"], out=out))
    assert job.job_id.split(".")[0].isdigit()
    rec = await _until_terminal(site, job.job_id)
    assert rec.state is JobState.COMPLETED and rec.exit_code == 0
    assert rec.account == "fedhpc-gpu" and rec.partition == "prod"
    assert rec.name == "fedhpc-pbs-acct"
    assert rec.submit and rec.start and rec.end
    assert rec.submit <= rec.start <= rec.end
    assert rec.alloc_tres.get("ngpus") == "1"
    with anyio.fail_after(30):  # the mom copies the output file back after the job ends
        while not out.exists():
            await anyio.sleep(0.3)
    assert "ran" in out.read_text()


async def test_a_failing_job_reports_failed_with_its_exit_code(site: SiteAdapter) -> None:
    job = await site.submit(_spec("fedhpc-pbs-fail", ["bash", "-c", "exit 3"], gpus=0))
    rec = await _until_terminal(site, job.job_id)
    assert rec.state is JobState.FAILED
    assert rec.exit_code == 3


async def test_probe_counts_gpus_a_running_job_holds(site: SiteAdapter) -> None:
    before = (await site.probe()).partition("prod")
    assert before is not None
    job = await site.submit(_spec("fedhpc-pbs-hold", ["sleep", "60"], gpus=3))
    try:
        await _until_running(site, job.job_id)
        state = await site.probe()
        part = state.partition("prod")
        assert part is not None
        assert part.free_gpus == before.free_gpus - 3
        assert part.user_running_jobs >= 1 and part.running_jobs >= 1
        assert "fedhpc-gpu" in state.accounts
    finally:
        await site.cancel([job.job_id])


async def test_one_qdel_cancels_a_running_and_a_queued_job(site: SiteAdapter) -> None:
    # 4 GPUs on the one debug vnode: the second job must queue behind the first.
    running = await site.submit(_spec("fedhpc-pbs-c1", ["sleep", "120"], partition="debug", gpus=4))
    queued = await site.submit(_spec("fedhpc-pbs-c2", ["sleep", "120"], partition="debug", gpus=4))
    await _until_running(site, running.job_id)
    (obs,) = await site.status([queued.job_id])
    assert obs.state is JobState.PENDING
    await site.cancel([running.job_id, queued.job_id])
    assert (await _until_terminal(site, running.job_id)).state is JobState.CANCELLED
    assert (await _until_terminal(site, queued.job_id)).state is JobState.CANCELLED


async def test_a_job_is_found_again_by_its_name(site: SiteAdapter) -> None:
    name = f"fedhpc-pbs-find-{uuid.uuid4().hex[:8]}"  # finished jobs stay in qselect -x
    job = await site.submit(_spec(name, ["true"], gpus=0))
    found = await site.find([name, "fedhpc-pbs-nosuch"])
    assert found.get(name) == job.job_id
    assert "fedhpc-pbs-nosuch" not in found
    await _until_terminal(site, job.job_id)


async def test_qsub_refusals_are_typed_errors_with_the_servers_words(site: SiteAdapter) -> None:
    too_long = _spec("fedhpc-pbs-long", ["true"], partition="debug", seconds=2 * 3600)
    with pytest.raises(SchedulerRejected) as over:
        await site.submit(too_long)
    # OpenPBS 23.06's words (recordings of older PBS Pro say "exceeds queue resource limits").
    assert "violates queue" in over.value.message.lower()
    # A queue the server does not have (the adapter refuses one the profile lacks, so the
    # script is edited after rendering, as a stale profile would send it).
    script = site.render(_spec("fedhpc-pbs-noq", ["true"], gpus=0))
    script = script.replace("#PBS -q prod", "#PBS -q nosuchq")
    result = await site.transport.run(Command(("qsub",), stdin=script))
    with pytest.raises(SchedulerRejected) as unknown:
        site.dialect.parse_submit(result)
    assert "unknown queue" in unknown.value.message.lower()


async def test_an_unknown_job_id_is_simply_absent(site: SiteAdapter) -> None:
    assert await site.status(["999999.nosuchserver"]) == []
    assert await site.accounting(["999999"]) == []


async def test_an_array_reports_each_subjob_and_their_accounting(site: SiteAdapter) -> None:
    spec = _spec(
        "fedhpc-pbs-array",
        ["bash", "-c", "exit $(( PBS_ARRAY_INDEX == 2 ? 4 : 0 ))"],
        gpus=0,
        array=ArraySpec(start=1, stop=3, limit=2),
    )
    job = await site.submit(spec)
    assert job.job_id.split(".")[0].endswith("[]")  # qsub -J answers '123[].server'
    with anyio.fail_after(120):
        while True:
            recs = await site.accounting([job.job_id])
            done = {r.array_index: r for r in recs if r.array_index and r.settled}
            if len(done) == 3:
                break
            await anyio.sleep(0.5)
    assert {i: r.state for i, r in done.items()} == {
        "1": JobState.COMPLETED,
        "2": JobState.FAILED,
        "3": JobState.COMPLETED,
    }
    assert done["2"].exit_code == 4


async def test_a_held_job_is_pending_and_blocked_then_cancelled_unrun(site: SiteAdapter) -> None:
    script = site.render(_spec("fedhpc-pbs-held", ["true"], partition="debug", gpus=0))
    result = await site.transport.run(Command(("qsub", "-h"), stdin=script))  # a user hold
    job_id = site.dialect.parse_submit(result)
    try:
        (obs,) = await site.status([job_id])
        assert obs.state is JobState.PENDING and obs.native_state == "H"
        debug = (await site.probe()).partition("debug")
        assert debug is not None and debug.blocked_pending_jobs >= 1
        assert debug.user_pending_jobs >= 1
    finally:
        await site.cancel([job_id])
    rec = await _until_terminal(site, job_id)
    assert rec.state is JobState.CANCELLED and rec.start is None


async def test_a_two_node_job_is_scattered_over_both_prod_vnodes(site: SiteAdapter) -> None:
    # place=scatter needs a host per chunk: each devpolaris vnode is its own host.
    job = await site.submit(_spec("fedhpc-pbs-two", ["true"], nodes=2, gpus=4))
    rec = await _until_terminal(site, job.job_id)
    assert rec.state is JobState.COMPLETED
    assert rec.alloc_tres["select"] == "2:ncpus=2:ngpus=4"
    assert rec.alloc_tres["nodect"] == "2"
