"""The Slurm site adapter (profile x slurm dialect x local transport) against the real local
federation: submit, observe, account, cancel, probe, reject, arrays, and injection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.dialects import SchedulerRejected
from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain.job import AccountingRecord, JobSpec, JobState, Shape, aggregate_state
from fedhpc.profiles import load_federation
from tests.injection_corpus import corpus

pytestmark = pytest.mark.devfed


@pytest.fixture
async def site(
    devfed: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[str], SiteAdapter]]:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    sites = load_federation()
    opened: list[SiteAdapter] = []

    def make(name: str) -> SiteAdapter:
        adapter = open_adapter(sites[name])
        opened.append(adapter)
        return adapter

    yield make
    for adapter in opened:
        await adapter.transport.aclose()


def _spec(
    name: str,
    partition: str,
    argv: list[str],
    *,
    gpus: int = 0,
    seconds: int = 300,
    account: str | None = None,
    out: Path | None = None,
    **kw: Any,
) -> JobSpec:
    return JobSpec(
        name=name,
        command=tuple(argv),
        partition=partition,
        account=account or ("fedhpc-gpu" if gpus else "fedhpc-cpu"),
        shape=Shape(cpus=1, gpus=gpus, memory_mib=128, wall_time_s=seconds),
        stdout=str(out) if out else "/dev/null",
        **kw,
    )


async def _until_terminal(adapter: SiteAdapter, job_id: str, limit: float = 90) -> AccountingRecord:
    with anyio.fail_after(limit):
        while True:
            recs = [r for r in await adapter.accounting([job_id]) if r.array_index is None]
            if recs and recs[0].settled:
                return recs[0]
            await anyio.sleep(0.5)


async def test_job_goes_pending_then_running_then_completed(
    site: Callable[[str], SiteAdapter],
) -> None:
    anvil = site("devanvil")
    # Both H100s busy, so the second job has to queue behind the first.
    blocker = await anvil.submit(_spec("fedhpc-block-1", "ai", ["sleep", "6"], gpus=2))
    job = await anvil.submit(_spec("fedhpc-queued-1", "ai", ["sleep", "2"], gpus=1))
    seen: list[JobState] = []
    with anyio.fail_after(90):
        while True:
            obs = await anvil.status([job.job_id])
            if obs:
                state = obs[0].state
                if not seen or seen[-1] is not state:
                    seen.append(state)
            else:
                break  # left squeue: accounting decides
            await anyio.sleep(0.3)
    record = await _until_terminal(anvil, job.job_id)
    assert seen[0] is JobState.PENDING
    assert JobState.RUNNING in seen
    assert record.state is JobState.COMPLETED
    assert (await _until_terminal(anvil, blocker.job_id)).state is JobState.COMPLETED


async def test_accounting_reports_submit_eligible_start_and_end(
    site: Callable[[str], SiteAdapter],
) -> None:
    delta = site("devdelta")
    job = await delta.submit(_spec("fedhpc-acct-1", "cpu", ["sleep", "2"]))
    rec = await _until_terminal(delta, job.job_id)
    assert rec.state is JobState.COMPLETED and rec.exit_code == 0
    assert rec.submit and rec.eligible and rec.start and rec.end
    assert rec.submit <= rec.start <= rec.end
    assert rec.runtime_s is not None and rec.runtime_s >= 1
    assert rec.wait_s is not None and rec.wait_s >= 0
    assert rec.account == "fedhpc-cpu" and rec.partition == "cpu"
    assert rec.name == "fedhpc-acct-1"


async def test_failed_job_reports_failure_and_exit_code(site: Callable[[str], SiteAdapter]) -> None:
    vista = site("devvista")
    job = await vista.submit(_spec("fedhpc-fail-1", "gg", ["bash", "-c", "exit 3"]))
    rec = await _until_terminal(vista, job.job_id)
    assert rec.state is JobState.FAILED
    assert rec.exit_code == 3


async def test_cancel_ends_a_running_job(site: Callable[[str], SiteAdapter]) -> None:
    ai = site("devdeltaai")
    job = await ai.submit(_spec("fedhpc-cancel-1", "ghx4", ["sleep", "120"], gpus=1))
    with anyio.fail_after(30):
        while not [o for o in await ai.status([job.job_id]) if o.state is JobState.RUNNING]:
            await anyio.sleep(0.3)
    await ai.cancel([job.job_id])
    rec = await _until_terminal(ai, job.job_id)
    assert rec.state is JobState.CANCELLED


async def test_probe_counts_free_gpus_from_allocated_gres(
    site: Callable[[str], SiteAdapter],
) -> None:
    delta = site("devdelta")
    before = (await delta.probe()).partition("gpuA100x4")
    assert before is not None and before.total_gpus >= 4
    job = await delta.submit(_spec("fedhpc-hold-1", "gpuA100x4", ["sleep", "60"], gpus=2))
    try:
        with anyio.fail_after(30):
            while not [o for o in await delta.status([job.job_id]) if o.state is JobState.RUNNING]:
                await anyio.sleep(0.3)
        state = await delta.probe()
        part = state.partition("gpuA100x4")
        assert part is not None
        assert part.free_gpus == before.free_gpus - 2
        assert part.free_gpus_by_type.get("a100") == before.free_gpus - 2
        assert part.running_jobs >= 1 and part.user_running_jobs >= 1
        assert state.health.value == "ok"
        assert {"fedhpc-cpu", "fedhpc-gpu"} <= set(state.accounts)
        assert state.latency_s is not None
    finally:
        await delta.cancel([job.job_id])


async def test_unknown_account_is_rejected_with_the_schedulers_reason(
    site: Callable[[str], SiteAdapter],
) -> None:
    delta = site("devdelta")
    with pytest.raises(SchedulerRejected) as info:
        await delta.submit(_spec("fedhpc-bad-1", "cpu", ["true"], account="nosuchaccount"))
    assert "account" in info.value.message.lower()


async def test_array_job_is_observed_element_by_element(site: Callable[[str], SiteAdapter]) -> None:
    delta = site("devdelta")
    from fedhpc.domain.job import ArraySpec

    spec = _spec(
        "fedhpc-array-1",
        "cpu",
        ["bash", "-c", "exit $(( SLURM_ARRAY_TASK_ID == 2 ))"],
        array=ArraySpec(start=0, stop=3),
    )
    job = await delta.submit(spec)
    with anyio.fail_after(90):
        while True:
            recs = [r for r in await delta.accounting([job.job_id]) if r.array_index is not None]
            if len(recs) == 4 and all(r.settled for r in recs):
                break
            await anyio.sleep(0.5)
    by_index = {r.array_index: r.state for r in recs}
    assert set(by_index) == {"0", "1", "2", "3"}
    assert by_index["2"] is JobState.FAILED
    assert aggregate_state(list(by_index.values())) is JobState.FAILED


async def test_injection_corpus_reaches_the_job_as_literal_text(
    site: Callable[[str], SiteAdapter], devfed: Any, canary_dir: Path
) -> None:
    delta = site("devdelta")
    hostile = corpus(canary_dir)
    out = Path(delta.site.profile.storage[0].path) / "fedhpc-inject-%j.out"
    spec = _spec(
        "fedhpc-inject-1",
        "cpu",
        ["printf", "%s\\n", *hostile],
        out=out,
        env={"HOSTILE": hostile[0]},
        workdir=str(canary_dir),
    )
    job = await delta.submit(spec)
    rec = await _until_terminal(delta, job.job_id)
    assert rec.state is JobState.COMPLETED
    text = Path(str(out).replace("%j", job.job_id)).read_bytes().decode()
    assert text == "".join(f"{h}\n" for h in hostile)
    assert not list(canary_dir.iterdir())
