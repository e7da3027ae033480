"""Slurm parsers on output recorded from the real local federation (tests/fixtures/slurm)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects import SchedulerRejected
from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.adapters.dialects.slurm_parse import map_state
from fedhpc.adapters.dialects.slurm_probe import parse_nodes
from fedhpc.domain import Health, JobState, aggregate_state
from fedhpc.profiles import load_profiles
from tests.probe_order import run_order

FIX = Path(__file__).parent.parent / "fixtures" / "slurm"
DIALECT = SlurmDialect()
AT = datetime(2026, 11, 29, tzinfo=UTC)


def _ok(name: str) -> CommandResult:
    return CommandResult(0, (FIX / name).read_text(), "")


def test_squeue_keeps_every_array_element_and_pending_reason() -> None:
    obs = DIALECT.parse_status(_ok("squeue_status.txt"))
    keys = [o.key for o in obs]
    assert keys == ["6_0", "6_1", "6_2", "6_3", "3", "2"]
    by_key = {o.key: o for o in obs}
    assert by_key["3"].state is JobState.PENDING
    assert by_key["3"].reason == "Resources"
    assert by_key["2"].state is JobState.RUNNING
    assert by_key["2"].nodes == "gh-1"
    assert by_key["6_2"].name == "fedhpc-rec-4"


def test_folded_pending_array_rows_are_expanded() -> None:
    folded = CommandResult(0, "6_[0-3%2]|PENDING|Priority|gh||fedhpc-rec-4\n", "")
    assert [o.key for o in DIALECT.parse_status(folded)] == ["6_0", "6_1", "6_2", "6_3"]
    stepped = CommandResult(0, "7_[1,4-8:2]|PENDING|Priority|gh||x\n", "")
    assert [o.array_index for o in DIALECT.parse_status(stepped)] == ["1", "4", "6", "8"]


def test_squeue_for_forgotten_jobs_is_an_empty_answer() -> None:
    result = CommandResult(1, "", (FIX / "squeue_invalid.stderr").read_text())
    assert DIALECT.parse_status(result) == []
    with pytest.raises(ValueError, match="squeue failed"):
        DIALECT.parse_status(CommandResult(1, "", "slurm_load_jobs error: Unable to contact"))


def test_sacct_gives_times_states_and_exit_codes_per_element() -> None:
    recs = DIALECT.parse_accounting(_ok("sacct.txt"))
    by_key = {(r.job_id, r.array_index): r for r in recs}
    running_cancelled = by_key[("2", None)]
    assert running_cancelled.state is JobState.CANCELLED
    assert running_cancelled.native_state == "CANCELLED by 0"
    assert running_cancelled.start == datetime.fromtimestamp(1795972879, tz=UTC)
    assert running_cancelled.runtime_s == 18
    assert running_cancelled.alloc_tres["gres/gpu"] == "1"
    never_started = by_key[("3", None)]
    assert never_started.start is None
    assert never_started.wait_s is None
    array = [by_key[("1", i)] for i in ("0", "1", "2")]
    assert [r.state for r in array] == [JobState.COMPLETED, JobState.FAILED, JobState.COMPLETED]
    assert array[1].exit_code == 1
    assert aggregate_state([r.state for r in array]) is JobState.FAILED
    # Elements that never started are folded by sacct into '6_[2-3%2]'; we list each one.
    assert {i for (j, i) in by_key if j == "6"} == {"0", "1", "2", "3"}
    assert by_key[("6", "3")].eligible is None


@pytest.mark.parametrize(
    ("native", "reason", "state"),
    [
        ("PENDING", "Priority", JobState.PENDING),
        ("PENDING", "PartitionTimeLimit", JobState.UNSCHEDULABLE),
        ("PENDING", "InvalidAccount", JobState.UNSCHEDULABLE),
        ("COMPLETING", None, JobState.RUNNING),
        ("CANCELLED by 1000", None, JobState.CANCELLED),
        ("OUT_OF_MEMORY", None, JobState.FAILED),
        ("NODE_FAIL", None, JobState.FAILED),
        ("TIMEOUT", None, JobState.TIMEOUT),
        ("REQUEUED", None, JobState.PENDING),
    ],
)
def test_native_states_map_to_job_states(native: str, reason: str | None, state: JobState) -> None:
    assert map_state(native, reason) is state


def test_submit_returns_the_job_id_and_rejection_carries_the_reason() -> None:
    assert DIALECT.parse_submit(CommandResult(0, "42\n", "")) == "42"
    assert DIALECT.parse_submit(CommandResult(0, "43;devdelta\n", "")) == "43"
    stderr = (FIX / "sbatch_rejected.stderr").read_text()
    with pytest.raises(SchedulerRejected, match="Invalid account") as info:
        DIALECT.parse_submit(CommandResult(1, "", stderr))
    assert info.value.code == "scheduler_rejected"


def test_scheduler_start_estimate_parses() -> None:
    test_only = DIALECT.parse_test_only(
        CommandResult(0, "", (FIX / "sbatch_test_only.txt").read_text())
    )
    assert test_only.partition == "gh"
    assert test_only.nodes == "gh-2"
    assert test_only.start == datetime.fromtimestamp(1795973308, tz=UTC)


def test_nodes_parse_gres_from_configured_and_allocated_tres() -> None:
    nodes = {n.name: n for n in parse_nodes((FIX / "scontrol_show_node.txt").read_text())}
    gh1, gh2, gg = nodes["gh-1"], nodes["gh-2"], nodes["gg-1"]
    assert (gh1.gpus_total, gh1.gpus_alloc) == (1, 1)
    assert gh1.gpus_by_type_alloc == {"gh200": 1}
    assert (gh2.gpus_total, gh2.gpus_alloc) == (1, 0)
    assert gh2.usable  # IDLE+PLANNED: the backfill scheduler has plans for it, still up
    assert gg.gpus_total == 0
    assert gg.features == ("aarch64",)


def test_probe_builds_partition_records_from_all_sections() -> None:
    vista = load_profiles()["devvista"]
    sections = {
        "nodes": BatchSection("nodes", 0, (FIX / "scontrol_show_node.txt").read_text()),
        "sinfo": BatchSection("sinfo", 0, (FIX / "sinfo.txt").read_text()),
        "queue": BatchSection("queue", 0, (FIX / "squeue_queue.txt").read_text()),
        "sshare": BatchSection("sshare", 0, (FIX / "sshare.txt").read_text()),
    }
    state = DIALECT.parse_probe(sections, vista, "root", AT)
    assert state.health is Health.OK
    assert state.arch is not None
    assert state.arch.value == "aarch64"  # the node feature label wins over the host's Arch
    assert {"fedhpc-cpu", "fedhpc-gpu"} <= set(state.accounts)
    gh = state.partition("gh")
    assert gh is not None
    assert (gh.total_gpus, gh.free_gpus, gh.free_gpus_by_type) == (2, 1, {"gh200": 1})
    assert gh.max_free_gpus_on_node == 1
    assert (gh.pending_jobs, gh.running_jobs) == (5, 1)
    assert (gh.user_pending_jobs, gh.user_running_jobs) == (5, 1)
    assert gh.nodes.mixed == 1
    assert gh.nodes.idle == 1
    assert gh.free_cpus == 71 + 72
    gg = state.partition("gg")
    assert gg is not None
    assert (gg.total_gpus, gg.free_cpus, gg.available) == (0, 144, True)


def test_probe_health_degrades_or_goes_offline_with_failed_sections() -> None:
    vista = load_profiles()["devvista"]
    nodes = BatchSection("nodes", 0, (FIX / "scontrol_show_node.txt").read_text())
    sinfo = BatchSection("sinfo", 0, (FIX / "sinfo.txt").read_text())
    degraded = DIALECT.parse_probe(
        {"nodes": nodes, "sinfo": sinfo, "queue": BatchSection("queue", 1, "")}, vista, "root", AT
    )
    assert degraded.health is Health.DEGRADED
    assert degraded.error is not None
    assert "queue" in degraded.error
    offline = DIALECT.parse_probe({"sinfo": sinfo}, vista, "root", AT)
    assert offline.health is Health.OFFLINE
    assert offline.partitions == ()


def test_a_probe_names_the_parts_it_could_not_read() -> None:
    """A refused sshare or squeue leaves the rest read: the state names what is missing, so the
    collector keeps the last reading instead of taking "no accounts" as the answer."""
    vista = load_profiles()["devvista"]
    read = {
        n: BatchSection(n, 0, (FIX / f).read_text())
        for n, f in (("nodes", "scontrol_show_node.txt"), ("sinfo", "sinfo.txt"))
    }
    busy = "sshare: error: Socket timed out on send/recv operation"
    refused = {
        "queue": BatchSection("queue", 1, "", stderr=busy.replace("sshare", "squeue")),
        "sshare": BatchSection("sshare", 1, "", stderr=busy),
    }
    state = DIALECT.parse_probe({**read, **refused}, vista, "root", AT)
    assert (state.health, state.unread, state.accounts) == (
        Health.DEGRADED,
        ("queue", "accounts"),
        (),
    )
    whole = {**read, "queue": BatchSection("queue", 0, ""), "sshare": BatchSection("sshare", 0, "")}
    assert DIALECT.parse_probe(whole, vista, "root", AT).unread == ()


def test_probe_sections_include_the_sites_balance_command() -> None:
    anvil = load_profiles()["anvil"]
    sections = DIALECT.probe_sections(anvil, "alice")
    assert set(sections) >= {"sinfo", "nodes", "queue", "sshare"}
    if anvil.conventions.balance_command:
        assert sections["balance"].argv == anvil.conventions.balance_command
    assert all(c.env["SLURM_TIME_FORMAT"] == "%s" for c in sections.values())


def test_probe_reads_the_queue_before_the_node_views() -> None:
    """squeue runs first: a job it shows running is then already allocated in `scontrol show
    node` (or has ended and freed its GPUs), so no probe shows a running job's GPUs free."""
    order = run_order(DIALECT.probe_sections(load_profiles()["anvil"], "alice"))
    assert order[0] == "queue"
    assert {"nodes", "sinfo"} <= set(order[1:])


def test_probe_parse_does_not_depend_on_section_order() -> None:
    vista = load_profiles()["devvista"]
    files = {
        "queue": "squeue_queue.txt",
        "sinfo": "sinfo.txt",
        "nodes": "scontrol_show_node.txt",
        "sshare": "sshare.txt",
    }
    sections = {n: BatchSection(n, 0, (FIX / f).read_text()) for n, f in files.items()}
    backwards = dict(reversed(sections.items()))
    assert DIALECT.parse_probe(backwards, vista, "root", AT) == DIALECT.parse_probe(
        sections, vista, "root", AT
    )


def test_balance_command_output_sets_credit_balance_per_account() -> None:
    anvil = load_profiles()["anvil"]
    sections = {
        "nodes": BatchSection("nodes", 0, (FIX / "scontrol_show_node.txt").read_text()),
        "sinfo": BatchSection("sinfo", 0, (FIX / "sinfo.txt").read_text()),
        "queue": BatchSection("queue", 0, ""),
        "sshare": BatchSection("sshare", 0, " abc123456|alice|1|3600\n"),
        "balance": BatchSection("balance", 0, (FIX / "mybalance.txt").read_text()),
    }
    state = DIALECT.parse_probe(sections, anvil, "alice", AT)
    credit = {c.account: c for c in state.credit}
    assert credit["abc123456"].balance == 8765.5
    assert credit["abc123456"].used == 1.0  # RawUsage 3600 billing-seconds
    assert credit["abc123456-gpu"].balance == 480.0
    assert state.accounts == ("abc123456", "abc123456-gpu")


def test_probe_counts_pending_jobs_that_cannot_start_as_blocked() -> None:
    """Recorded on the local federation: one job pending on Resources, one on a dependency, one
    held, one with a begin time (on two partitions): only the first is ahead of a new job."""
    vista = load_profiles()["devvista"]
    sections = {
        "nodes": BatchSection("nodes", 0, (FIX / "scontrol_show_node.txt").read_text()),
        "sinfo": BatchSection("sinfo", 0, (FIX / "sinfo.txt").read_text()),
        "queue": BatchSection("queue", 0, (FIX / "squeue_queue_reasons.txt").read_text()),
        "sshare": BatchSection("sshare", 0, (FIX / "sshare.txt").read_text()),
    }
    state = DIALECT.parse_probe(sections, vista, "root", AT)
    gh, dev = state.partition("gh"), state.partition("gh-dev")
    assert gh is not None
    assert dev is not None
    assert (gh.pending_jobs, gh.blocked_pending_jobs, gh.running_jobs) == (4, 3, 1)
    assert (dev.pending_jobs, dev.blocked_pending_jobs) == (1, 1)


def test_a_completing_job_is_neither_running_nor_pending() -> None:
    """A COMPLETING job has ended (its epilog runs) and its resources are being released: a
    probe that counted it running could show a running job's GPUs free."""
    vista = load_profiles()["devvista"]
    queue = (FIX / "squeue_queue.txt").read_text() + "gh|COMPLETING|root|None\n"
    sections = {
        "nodes": BatchSection("nodes", 0, (FIX / "scontrol_show_node.txt").read_text()),
        "sinfo": BatchSection("sinfo", 0, (FIX / "sinfo.txt").read_text()),
        "queue": BatchSection("queue", 0, queue),
        "sshare": BatchSection("sshare", 0, (FIX / "sshare.txt").read_text()),
    }
    gh = DIALECT.parse_probe(sections, vista, "root", AT).partition("gh")
    assert gh is not None
    assert (gh.running_jobs, gh.user_running_jobs, gh.pending_jobs) == (1, 1, 5)
