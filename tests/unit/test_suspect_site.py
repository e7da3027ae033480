"""A suspect site (issue 40, item 4): a controller that misses the observation's short ping
deadline is not lost, but its queued work that may run elsewhere gets a hedged copy there at
once; the first copy to start runs, the other is cancelled. No `site.offline` is written: only
the probe's pings decide that. A real store and placement; fake adapters (`test_slow_site`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.liveness import ControllerSilent, suspect_ping_s
from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain import Health, UserConfig
from fedhpc.domain.config import Site
from fedhpc.domain.job import JobObservation, JobState
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import PolicyKind
from fedhpc.profiles import load_federation
from fedhpc.store import Store
from tests.unit.test_liveness import UP, Bash, _controller, bin_dir, devvista
from tests.unit.test_slow_site import LIMIT_S, _Site, _world
from tests.unit.test_submit_accept import _req

__all__ = ["bin_dir", "devvista"]  # fixtures, used by name


class _Hung(_Site):
    """Its jobs wait in the queue; `silent`: the ping misses its deadline."""

    silent = False

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        self.calls["status"] += 1
        if self.silent:
            raise ControllerSilent(f"{self.name}: the controller did not answer `scontrol ping`")
        return [
            JobObservation(job_id=j, state=JobState.PENDING, native_state="PD") for j in job_ids
        ]


async def _waiting(o: Orchestrator, *, fallback: bool) -> str:
    """A task held to `slow` (with or without fallback), bound there and seen pending."""
    req = _req(command=("echo", "x"), policy=PolicyKind.FIXED_SITE, fixed_site="slow")
    task_id = (
        await o.intake.submit_task(req.model_copy(update={"fallback": fallback}), wait_s=0)
    ).task_id
    await o.place_queued()
    with anyio.fail_after(LIMIT_S):
        while (await o.book.load_attempts(task_id))[0].job_id is None:
            await anyio.sleep(0.01)
    await o.tick()
    assert (await o.book.load_attempts(task_id))[0].state is JobState.PENDING
    return task_id


async def _attempts(o: Orchestrator, task_id: str, n: int) -> list[AttemptRecord]:
    with anyio.fail_after(LIMIT_S):
        while len(atts := await o.book.load_attempts(task_id)) < n or any(
            a.job_id is None for a in atts
        ):
            await o.dispatcher.send_later()
            await anyio.sleep(0.01)
    return atts


async def test_a_silent_ping_hedges_queued_work_elsewhere_without_taking_the_site_offline(
    store: Store,
) -> None:
    o, slow, _ = _world(store, slow_site=_Hung)
    task_id = await _waiting(o, fallback=True)
    assert isinstance(slow, _Hung)
    slow.silent = True
    await o.tick()  # the observation's ping misses its deadline: suspect, not lost
    first, copy = await _attempts(o, task_id, 2)
    assert copy.site == "fast" and copy.copy_of == first.n
    assert not first.superseded  # still in play: its site may answer yet
    assert [e.kind for e in await store.events_after(0) if e.kind.startswith("site.")] == []
    await o.tick()  # suspect again: no second copy
    assert len(await o.book.load_attempts(task_id)) == 2
    slow.silent = False
    await o.tick()  # the copy on fast runs first: the one on slow is cancelled
    first, copy = await o.book.load_attempts(task_id)
    assert copy.state is JobState.RUNNING
    assert first.superseded and first.outrun_by == copy.n
    assert slow.cancelled == [first.job_id]


async def test_work_held_to_a_suspect_site_without_fallback_stays(store: Store) -> None:
    o, slow, _ = _world(store, slow_site=_Hung)
    task_id = await _waiting(o, fallback=False)
    assert isinstance(slow, _Hung)
    slow.silent = True
    await o.tick()
    await o.dispatcher.send_later()
    assert len(await o.book.load_attempts(task_id)) == 1


def test_the_observations_ping_deadline_is_half_a_cycle_within_bounds() -> None:
    assert [suspect_ping_s(c) for c in (0.5, 2, 4, 10, 60)] == [1.0, 1.0, 2.0, 5.0, 5.0]


async def test_the_observations_ping_gets_its_short_deadline_and_the_probes_the_full_one(
    devvista: Site, bin_dir: Path
) -> None:
    """A controller that answers its ping in 1.5 s: silent to an observation given 1 s (the
    site suspect), alive to the probe given 5 s (never offline for it)."""
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    adapter.observe_ping_s = suspect_ping_s(2.0)
    _controller(bin_dir, "sleep 1.5; " + UP)
    with pytest.raises(ControllerSilent, match="within 1 s"):
        await adapter.status(["1"])
    assert (await adapter.probe()).health is not Health.OFFLINE


async def test_accounting_waits_behind_the_ping_where_it_asks_the_controller(
    devvista: Site, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PBS's `qstat -x` asks the server a hung controller holds (so would the whole cycle,
    until its deadline): it runs behind the ping. Slurm's `sacct` asks slurmdbd: it does not."""
    monkeypatch.setenv("FEDHPC_DEVFED", "slurm+pbs")
    polaris = load_federation(UserConfig())["devpolaris"]
    (bin_dir / "qstat").write_text('#!/bin/bash\nif [ "$1" = -B ]; then sleep 5; fi\necho "{}"\n')
    (bin_dir / "qstat").chmod(0o755)
    pbs = SiteAdapter(polaris, Bash(bin_dir))
    pbs.observe_ping_s = 0.5
    with pytest.raises(ControllerSilent, match="qstat -B"):
        await pbs.accounting(["1.pbs"])
    slurm = SiteAdapter(devvista, Bash(bin_dir))
    slurm.observe_ping_s = 0.5
    _controller(bin_dir, "sleep 5; " + UP)
    assert await slurm.accounting(["1"]) == []  # sacct ran, no ping waited for


class _HungAfterPing(_Hung):
    """`hang`: the controller stops answering after an observation's ping answered: its
    squeue never returns, and the ping asked alone is silent."""

    hang = False
    observe_ping_s = 5.0  # the control cycle sets it (`suspect_ping_s`)

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        if self.hang:
            await anyio.sleep_forever()
        return await super().status(job_ids)

    async def ping_alone(self, ping_s: float) -> ControllerSilent | None:
        return ControllerSilent(f"{self.name}: silent") if self.hang else None


async def test_an_observation_that_hangs_after_its_ping_makes_the_site_suspect(
    store: Store,
) -> None:
    o, slow, _ = _world(store, slow_site=_HungAfterPing)
    task_id = await _waiting(o, fallback=True)
    assert isinstance(slow, _HungAfterPing)
    slow.hang, slow.observe_ping_s = True, 0.1
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tick)  # its squeue at slow never answers
            first, copy = await _attempts(o, task_id, 2)
            tg.cancel_scope.cancel()
    assert copy.site == "fast" and copy.copy_of == first.n and not first.superseded
    assert [e.kind for e in await store.events_after(0) if e.kind.startswith("site.")] == []


async def test_a_cancel_waits_while_the_controller_is_silent(devvista: Site, bin_dir: Path) -> None:
    """A cancel to a controller whose last ping went unanswered is not sent (a hung one
    would hold it, and the control cycle, until its deadline): it stays owed."""
    (bin_dir / "scancel").write_text("#!/bin/bash\ntrue\n")
    (bin_dir / "scancel").chmod(0o755)
    adapter = SiteAdapter(devvista, Bash(bin_dir))
    adapter.observe_ping_s = 0.3
    _controller(bin_dir, "sleep 2; " + UP)
    with pytest.raises(ControllerSilent):
        await adapter.status(["1"])
    with pytest.raises(ControllerSilent):
        await adapter.cancel(["1"])
    assert adapter.calls["cancel"] == 0
    _controller(bin_dir, UP)
    await adapter.status(["1"])  # answered: cancels go again
    await adapter.cancel(["1"])
    assert adapter.calls["cancel"] == 1
