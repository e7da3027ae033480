"""Process-mode dev sites (FEDHPC_DEVFED=process): the same four sites with dialect `process`,
driven through the real site adapter, local transport and scheduler."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.site import open_adapter
from fedhpc.domain.job import JobSpec, JobState, Shape
from fedhpc.domain.site import Health
from fedhpc.profiles import load_federation
from fedhpc_dev.profiles import devfed_process_root

DEV_SITES = ["devanvil", "devdelta", "devdeltaai", "devvista"]


@pytest.fixture
def process_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "devfed"
    monkeypatch.setenv("FEDHPC_DEVFED", "process")
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(root))
    return root


def test_process_mode_swaps_dialect_and_transport_and_keeps_the_partitions(
    process_mode: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites = load_federation()
    assert sorted(sites) == sorted(DEV_SITES)
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    slurm = load_federation()
    for name in DEV_SITES:
        p, s = sites[name].profile, slurm[name].profile
        assert p.dialect == "process" and s.dialect == "slurm"
        assert p.partitions == s.partitions
        assert p.transport.kind == "local"
        assert p.transport.env == {"FEDHPC_LOCALSCHED_ROOT": f"{process_mode}/{name}/localsched"}
        assert [r.path for r in p.storage] == [f"{process_mode}/{name}/storage"]
        assert s.transport.env == {"SLURM_CONF": f"{process_mode}/{name}/slurm.conf"}


def test_an_unwritable_devfed_dir_falls_back_to_a_folder_of_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(blocker / "devfed"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert devfed_process_root() == tmp_path / "state" / "fedhpc" / "devfed"
    monkeypatch.delenv("FEDHPC_DEVFED_DIR")
    assert devfed_process_root() == tmp_path / "state" / "fedhpc" / "devfed"


def test_without_the_variable_no_dev_site_is_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDHPC_DEVFED", raising=False)
    assert not set(load_federation()) & set(DEV_SITES)


async def test_adapter_probes_submits_queues_finds_and_accounts_on_a_process_site(
    process_mode: Path,
) -> None:
    site = load_federation()["devanvil"]
    storage = Path(site.profile.storage[0].path)
    adapter = open_adapter(site)
    try:
        state = await adapter.probe()
        assert state.health is Health.OK, state.error
        ai = state.partition("ai")
        assert ai is not None and (ai.total_gpus, ai.free_gpus) == (2, 2)
        assert state.accounts == ("fedhpc-cpu", "fedhpc-gpu")

        # The first job holds both GPUs until the test opens its gate (a fixed sleep ended
        # before a loaded machine read the queue); the second waits behind it.
        gate = storage / "w" / "gate"

        def job(name: str, hold: bool) -> JobSpec:
            wait = f"until [ -e {gate} ]; do sleep 0.1; done" if hold else "true"
            return JobSpec(
                name=name,
                command=("bash", "-c", f"echo gpus=$CUDA_VISIBLE_DEVICES; {wait}"),
                partition="ai",
                account="fedhpc-gpu",
                shape=Shape(gpus=2, wall_time_s=60),
                stdout=f"{storage}/w/%j.out",
                workdir=f"{storage}/w",
            )

        first = await adapter.submit(job("fedhpc-a-1", True), ensure_dirs=[f"{storage}/w"])
        second = await adapter.submit(job("fedhpc-b-1", False), ensure_dirs=[f"{storage}/w"])
        live = {o.job_id: o for o in await adapter.status([first.job_id, second.job_id])}
        assert live[first.job_id].state is JobState.RUNNING
        assert live[second.job_id].state is JobState.PENDING
        assert live[second.job_id].reason == "Resources"
        busy = (await adapter.probe()).partition("ai")
        assert busy is not None and (busy.free_gpus, busy.pending_jobs) == (0, 1)
        assert await adapter.find(["fedhpc-b-1", "fedhpc-x-1"]) == {"fedhpc-b-1": second.job_id}
        gate.touch()
        with anyio.fail_after(60):
            while True:
                recs = await adapter.accounting([first.job_id, second.job_id])
                if all(r.settled for r in recs) and len(recs) == 2:
                    break
                await anyio.sleep(0.2)
        by_id = {r.job_id: r for r in recs}
        earlier, later = by_id[first.job_id], by_id[second.job_id]
        assert later.state is JobState.COMPLETED
        assert later.start is not None
        assert earlier.end is not None
        assert later.start >= earlier.end
        assert later.wait_s is not None and later.wait_s > 0
        text = (storage / "w" / f"{second.job_id}.out").read_text()
        assert text == "gpus=0,1\n"
        assert await adapter.status([first.job_id, second.job_id]) == []
    finally:
        await adapter.transport.aclose()


async def test_cancel_through_the_adapter_ends_a_running_job(process_mode: Path) -> None:
    site = load_federation()["devvista"]
    adapter = open_adapter(site)
    try:
        await adapter.probe()
        spec = JobSpec(
            name="fedhpc-c-1",
            command=("sleep", "60"),
            partition="gh",
            account="fedhpc-gpu",
            shape=Shape(gpus=1, wall_time_s=120),
            stdout=f"{process_mode}/c.out",
        )
        job = await adapter.submit(spec)
        await adapter.cancel([job.job_id])
        (rec,) = await adapter.accounting([job.job_id])
        assert rec.state is JobState.CANCELLED and rec.settled
    finally:
        await adapter.transport.aclose()
