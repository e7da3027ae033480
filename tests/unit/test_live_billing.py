"""What a partition charges, read live (issue 42): the daemon's Slurm probe reads each
partition's `TRESBillingWeights` (`scontrol --oneliner show partition`, every few probes), the
collector keeps them, and a charge the profile marks `follow_scheduler` follows them; a charge
the operator stated wins."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from fedhpc.adapters.command import BATCH_MARK, BatchSection, Command, CommandResult
from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.adapters.dialects.slurm_probe import parse_partition_weights
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.site_view import BILLING_EVERY_S
from fedhpc.collector import Collector
from fedhpc.collector.carry import carry_forward
from fedhpc.domain import ChargeKind, ChargeModel, JobState, SiteProfile
from fedhpc.domain.config import Site
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, PlacementInputs, Policy, place
from fedhpc.placement.spend import ledger_rows
from fedhpc.profiles import load_profiles
from fedhpc.store import Store
from tests.unit.test_placement_world import (
    NOW,
    cpu_partition,
    env,
    gpu_partition,
    profile,
    site,
    snapshot,
    state,
)
from tests.unit.test_slow_site import _Site
from tests.unit.test_submit_accept import Clock, _req

FIX = Path(__file__).parent.parent / "fixtures" / "slurm"
AT = datetime(2026, 11, 29, tzinfo=UTC)
FIRST = (FIX / "scontrol_show_partition_billing.txt").read_text()
UPDATED = (FIX / "scontrol_show_partition_billing_updated.txt").read_text()
FOLLOW = ChargeModel(kind=ChargeKind.GPU_HOURS, follow_scheduler=True)
STATED = ChargeModel(kind=ChargeKind.GPU_HOURS, rate=2.0)


def _read(name: str, file: str) -> BatchSection:
    return BatchSection(name, 0, (FIX / file).read_text())


def _core() -> dict[str, BatchSection]:
    return {"nodes": _read("nodes", "scontrol_show_node.txt"), "sinfo": _read("sinfo", "sinfo.txt")}


def test_the_probe_reads_each_partitions_billing_weights_from_scontrol() -> None:
    assert parse_partition_weights(FIRST) == {
        "cpu": (("CPU", 1.0), ("Mem", 0.25)),
        "gpuA100x4": (("CPU", 1.0), ("Mem", 0.25), ("Node", 8.0)),
        "plain": (),
    }
    devdelta = load_profiles()["devdelta"]
    answer = {**_core(), "partitions": BatchSection("partitions", 0, FIRST)}
    read = SlurmDialect().parse_probe(answer, devdelta, "root", AT)
    weights = {p.name: p.billing_weights for p in read.partitions}
    assert weights["gpuA100x4"] == (("CPU", 1.0), ("Mem", 0.25), ("Node", 8.0))
    assert weights["interactive"] == ()  # the answer sets none for it
    assert "billing" not in read.unread


def test_refused_weights_keep_their_last_reading_and_do_not_degrade_the_site() -> None:
    devdelta = load_profiles()["devdelta"]
    whole = {
        **_core(),
        "queue": BatchSection("queue", 0, ""),
        "sshare": BatchSection("sshare", 0, ""),
    }
    before = SlurmDialect().parse_probe(
        {**whole, "partitions": BatchSection("partitions", 0, FIRST)}, devdelta, "root", AT
    )
    busy = "scontrol: error: Socket timed out on send/recv operation"
    refused = BatchSection("partitions", 1, "", stderr=busy)
    now = SlurmDialect().parse_probe({**whole, "partitions": refused}, devdelta, "root", AT)
    assert now.unread == ("billing",)
    assert now.health is before.health  # only the weights are missing
    kept = carry_forward(before, now).partition("gpuA100x4")
    assert kept is not None
    assert kept.billing_weights == (("CPU", 1.0), ("Mem", 0.25), ("Node", 8.0))


def _probe_answer(command: Command, partitions: str) -> str:
    """The recorded probe, with `partitions` as the answer to `scontrol show partition` when
    the probe asked for it."""
    files = {
        "sinfo": "sinfo.txt",
        "nodes": "scontrol_show_node.txt",
        "queue": "squeue_queue.txt",
        "sshare": "sshare.txt",
    }
    out = [
        f"{BATCH_MARK} begin {n}\n{(FIX / f).read_text()}{BATCH_MARK} end {n} 0\n"
        for n, f in files.items()
    ]
    if f"{BATCH_MARK} begin partitions" in (command.stdin or ""):
        out.append(f"{BATCH_MARK} begin partitions\n{partitions}{BATCH_MARK} end partitions 0\n")
    return "".join(out)


class _Slurm:
    """A transport answering the batched probe with recorded output; `partitions` is what
    `scontrol show partition` says now."""

    name = "fake"

    def __init__(self) -> None:
        self.partitions = FIRST
        self.calls: list[Command] = []

    async def run(self, command: Command) -> CommandResult:
        self.calls.append(command)
        return CommandResult(0, _probe_answer(command, self.partitions), "")

    async def aclose(self) -> None:
        return None

    def asked(self) -> list[bool]:
        return [f"{BATCH_MARK} begin partitions" in (c.stdin or "") for c in self.calls]


def _billed(charge: ChargeModel) -> tuple[SiteProfile, Site]:
    p = profile("alpha", gpu_partition("gpuA100x4", cpus=64, count=1), charge=charge)
    return p, site(p)


async def test_the_weights_are_asked_for_at_the_first_probe_and_then_every_ten_minutes() -> None:
    _, alpha = _billed(FOLLOW)
    fake = _Slurm()
    adapter = SiteAdapter(alpha, fake, clock=lambda: NOW)
    first = await adapter.probe()
    second = await adapter.probe()
    assert fake.asked() == [True, False]
    # The occasional section is one scheduler command, counted against the site's pace.
    assert fake.calls[0].commands == fake.calls[1].commands + 1
    read = first.partition("gpuA100x4")
    carried = second.partition("gpuA100x4")
    assert read is not None and carried is not None
    assert (
        carried.billing_weights
        == read.billing_weights
        == (
            ("CPU", 1.0),
            ("Mem", 0.25),
            ("Node", 8.0),
        )
    )
    assert BILLING_EVERY_S == 600.0
    adapter.billing_every_s = 0.0  # ten minutes later
    fake.partitions = UPDATED
    third = await adapter.probe()
    assert fake.asked() == [True, False, True]
    changed = third.partition("gpuA100x4")
    assert changed is not None and changed.billing_weights[0] == ("CPU", 2.0)


def _charge(alpha: Site, p: SiteProfile, partitions: str | None) -> tuple[float, float]:
    """The decision's charge for one A100 for an hour, and its hours, at the weights of
    `partitions` (None: none read)."""
    weights = parse_partition_weights(partitions)["gpuA100x4"] if partitions else ()
    snap = snapshot(state(p, gpuA100x4={"billing_weights": weights}))
    decision = place(
        env(gpus=1, cpus=8, wall_time="1h"),
        PlacementInputs(snap, {"alpha": alpha}, Policy(), now=NOW),
    )
    assert isinstance(decision, Placement)
    return decision.estimates.charge, decision.shape.wall_time_s / 3600


def test_a_charge_that_follows_the_scheduler_changes_when_its_weights_change() -> None:
    p, alpha = _billed(FOLLOW)
    # A node's billing per hour shared over its 4 GPUs: 64 CPUs x w + 256 GiB x 0.25 + node 8.
    charge, hours = _charge(alpha, p, FIRST)
    assert charge == round((64 * 1.0 + 256 * 0.25 + 8) / 4 * hours, 4) == 34.0 * hours
    charge, hours = _charge(alpha, p, UPDATED)  # CPU weight 1.0 -> 2.0 between two probes
    assert charge == 50.0 * hours
    charge, hours = _charge(alpha, p, None)  # nothing read: the profile's rate
    assert charge == 1.0 * hours


def test_a_charge_the_operator_stated_wins_over_the_weights() -> None:
    p, alpha = _billed(STATED)
    for answer in (FIRST, UPDATED):
        charge, hours = _charge(alpha, p, answer)
        assert charge == 2.0 * hours
    # A partition's own stated charge wins over a site charge that follows the scheduler.
    spec = gpu_partition("gpuA100x4", cpus=64, count=1, charge=STATED)
    mixed = profile("alpha", spec, cpu_partition("cpu", cpus=64), charge=FOLLOW)
    charge, hours = _charge(site(mixed), mixed, FIRST)
    assert charge == 2.0 * hours


def test_the_ledger_commits_a_live_attempt_at_the_live_charge() -> None:
    p, alpha = _billed(FOLLOW)
    shape = {"nodes": 1, "gpus": 1, "cpus": 8, "memory_mib": 1024, "wall_time_s": 3600}
    attempt: dict[str, Any] = {
        "task_id": "t1",
        "owner": "ann",
        "site": "alpha",
        "partition": "gpuA100x4",
        "state": "running",
        "body": {"account": "proj", "shape": shape},
    }
    weights = parse_partition_weights(UPDATED)["gpuA100x4"]
    live = snapshot(state(p, gpuA100x4={"billing_weights": weights})).sites
    (row,) = ledger_rows([attempt], {"alpha": alpha}, states=live)
    assert row["committed"] == 50.0
    (row,) = ledger_rows([attempt], {"alpha": alpha})  # no probe: the profile's rate
    assert row["committed"] == 1.0


async def test_a_persons_budget_counts_their_live_jobs_at_the_live_charge(store: Store) -> None:
    """alice may spend 14 SU at alpha, whose cores bill 2.0 an hour by its live weights (the
    profile says 1.0): her first 4-core hour holds 8 SU, so a second (8 more) is refused."""
    charge = ChargeModel(kind=ChargeKind.CORE_HOURS, follow_scheduler=True)
    alpha = site(profile("alpha", cpu_partition("cpu"), charge=charge), person_budget=14.0)
    collector = Collector({"alpha": alpha}, {}, store, clock=Clock())
    live = state(alpha.profile, cpu={"billing_weights": (("CPU", 2.0),)})
    collector.latest = {"alpha": live}
    collector.ready.set()
    o = Orchestrator(store, collector, {"alpha": cast(Any, _Site(alpha))}, clock=Clock())
    placed = []
    for n in range(2):  # one pass each: the second reads what the first holds from the store
        req = _req(command=("echo", str(n)), envelope=env(cpus=4, wall_time="1h"))
        handle = await o.intake.submit_task(req, wait_s=0, owner="alice")
        await o.place_queued()
        placed.append(await o.book.load_task(handle.task_id))
    assert placed[0].state is JobState.SUBMITTED and "8 SU" in placed[0].decision
    assert placed[1].state is JobState.UNSCHEDULABLE
    assert "per-person budget 14 - 8 your jobs there used or hold" in placed[1].reasons[0]
