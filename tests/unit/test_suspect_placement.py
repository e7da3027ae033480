"""A suspect site (its controller missed the observation's ping) gets no new work while another
site fits: placement names it as suspect and goes elsewhere; work held to it (no fallback)
still goes there; once it answers an observation again it is trusted again. A real store and
placement; fake adapters (`test_slow_site`, `test_suspect_site`)."""

from __future__ import annotations

from datetime import timedelta

from fedhpc.orchestrator.service import Orchestrator
from fedhpc.orchestrator.suspect_sites import place_avoiding
from fedhpc.placement import Ledger, Placement, PolicyKind
from fedhpc.store import Store
from tests.unit.test_slow_site import _world
from tests.unit.test_submit_accept import _req
from tests.unit.test_suspect_site import _Hung, _waiting


async def _prefers_slow(o: Orchestrator, *, fallback: bool, n: int) -> Placement:
    """A new task asking for `slow` (elsewhere allowed with `fallback`), as placement decides
    it now."""
    req = _req(command=("echo", f"new{n}"), policy=PolicyKind.FIXED_SITE, fixed_site="slow")
    handle = await o.intake.submit_task(req.model_copy(update={"fallback": fallback}), wait_s=0)
    decision = await o.planner.decide(await o.book.load_task(handle.task_id))
    assert isinstance(decision, Placement), decision
    return decision


async def test_new_work_avoids_a_suspect_site_while_another_fits(store: Store) -> None:
    o, slow, _ = _world(store, slow_site=_Hung)
    await _waiting(o, fallback=True)
    assert isinstance(slow, _Hung)
    assert (await _prefers_slow(o, fallback=True, n=0)).site == "slow"  # trusted: its pick
    slow.silent = True
    await o.tick()  # the observation's ping misses its deadline: suspect
    elsewhere = await _prefers_slow(o, fallback=True, n=1)
    assert elsewhere.site == "fast"
    assert "slow is suspect" in elsewhere.trace.model_dump_json()  # the decision says why
    assert (await _prefers_slow(o, fallback=False, n=2)).site == "slow"  # held to it: stays
    slow.silent = False
    await o.tick()  # it answers again: trusted
    assert (await _prefers_slow(o, fallback=True, n=3)).site == "slow"


async def test_a_suspect_site_is_trusted_again_after_its_hold(store: Store) -> None:
    """A site with nothing left to observe is not avoided for ever: for three control cycles
    after its last missed ping."""
    o, _, _ = _world(store)
    o.planner.suspects.mark("slow", "the controller did not answer `scontrol ping`")
    assert (await _prefers_slow(o, fallback=True, n=0)).site == "fast"
    clock = o.clock
    clock.now += timedelta(seconds=3 * o.cycle_s + 1)  # type: ignore[attr-defined]
    assert (await _prefers_slow(o, fallback=True, n=1)).site == "slow"


async def test_a_groups_children_avoid_a_suspect_site_until_the_others_are_full(
    store: Store,
) -> None:
    """Alike children placed in one pass: none on the suspect site while another takes them;
    those left over (here `fast` takes one this cycle) go to the suspect site after all."""
    o, _, _ = _world(store)
    handle = await o.intake.submit_task(_req(), wait_s=0)
    task = await o.book.load_task(handle.task_id)
    env, _ = o.planner.envelope(task, (), None)
    inputs = o.planner.inputs(task, history=None, ledger=Ledger(), errors=None)
    suspects = {"slow": "the controller did not answer `scontrol ping`"}
    placed = place_avoiding([env] * 3, inputs, {"fast": 3, "slow": 3}, suspects)
    assert [p.site for p in placed if isinstance(p, Placement)] == ["fast"] * 3
    inputs = o.planner.inputs(task, history=None, ledger=Ledger(), errors=None)
    placed = place_avoiding([env] * 3, inputs, {"fast": 1, "slow": 3}, suspects)
    assert [p.site for p in placed if isinstance(p, Placement)] == ["fast", "slow", "slow"]
