"""PBS Pro dialect: rendering, parsing recorded output, state mapping, probe, injection corpus."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.pbs import PbsDialect
from fedhpc.adapters.dialects.pbs_parse import STATE_TABLE, finished_state, map_state
from fedhpc.domain.job import ArraySpec, JobSpec, JobState, Shape
from fedhpc.domain.site import Health, SiteProfile
from tests.injection_corpus import corpus
from tests.probe_order import run_order

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pbs"
NOW = datetime(2025, 11, 27, 10, 0, tzinfo=UTC)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def ok(name: str) -> CommandResult:
    return CommandResult(0, fixture(name), "")


@pytest.fixture
def profile() -> SiteProfile:
    return SiteProfile.model_validate(
        {
            "name": "pbssite",
            "dialect": "pbs",
            "arch": "x86_64",
            "charge": {"kind": "node-hours"},
            "conventions": {"balance_command": ["sbank", "balance"]},
            "containers": {"exec_template": "printf %s\\n {image}"},
            "partitions": [
                {
                    "name": "gpu",
                    "max_wall_s": "24h",
                    "max_nodes_per_job": 4,
                    "node": {
                        "cpus": 64,
                        "memory_mib": "512G",
                        "count": 6,
                        "accelerator": {"type": "a100", "memory_gib": 40, "count": 4},
                    },
                },
                {"name": "cpu", "max_wall_s": "48h", "node": {"cpus": 128, "memory_mib": "244G"}},
                {"name": "debug", "max_wall_s": "1h", "node": {"cpus": 128, "memory_mib": "244G"}},
            ],
        }
    )


def spec(**overrides: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "train",
        "command": ("python", "train.py"),
        "partition": "gpu",
        "shape": Shape(nodes=2, cpus=32, gpus=4, memory_mib=65536, wall_time_s=5400),
        "account": "proj42",
        "stdout": "/home/alice/out.log",
        "stderr": "/home/alice/err.log",
    }
    base.update(overrides)
    return JobSpec.model_validate(base)


def directives(script: str) -> list[str]:
    return [line for line in script.split("\n") if line.startswith("#PBS")]


# --- rendering -------------------------------------------------------------------------------


def test_render_puts_every_request_in_a_directive(profile: SiteProfile) -> None:
    script = PbsDialect().render_script(
        spec(array=ArraySpec(start=0, stop=9, step=2, limit=3)), profile
    )
    assert directives(script) == [
        "#PBS -S /bin/bash",
        "#PBS -N train",
        "#PBS -q gpu",
        "#PBS -A proj42",
        "#PBS -l select=2:ncpus=32:ngpus=4:mem=65536mb",
        "#PBS -l place=scatter",
        "#PBS -l walltime=01:30:00",
        "#PBS -o /home/alice/out.log",
        "#PBS -e /home/alice/err.log",
        "#PBS -J 0-9:2%3",
    ]
    assert script.startswith("#!/bin/bash\n")
    assert 'cd "${PBS_O_WORKDIR:-$HOME}"' in script
    assert script.rstrip().endswith("python train.py")


def test_render_single_node_without_memory_request_has_no_scatter_nor_mem(
    profile: SiteProfile,
) -> None:
    no_mem = profile.model_copy(
        update={"conventions": profile.conventions.model_copy(update={"memory_request": False})}
    )
    shape = Shape(nodes=1, cpus=4, memory_mib=1024, wall_time_s=60)
    script = PbsDialect().render_script(spec(shape=shape, account=None, array=None), no_mem)
    assert "#PBS -l select=1:ncpus=4" in directives(script)
    assert not any("place=" in d or "-A" in d for d in directives(script))


def test_render_with_workdir_changes_into_it(profile: SiteProfile) -> None:
    script = PbsDialect().render_script(spec(workdir="/scratch/alice/run1"), profile)
    assert "cd /scratch/alice/run1" in script
    assert "PBS_O_WORKDIR" not in script


def test_render_adds_the_profile_site_directives(profile: SiteProfile) -> None:
    conv = profile.conventions.model_copy(
        update={"extra_directives": ("-l filesystems=home:eagle",)}
    )
    script = PbsDialect().render_script(spec(), profile.model_copy(update={"conventions": conv}))
    assert "#PBS -l filesystems=home:eagle" in directives(script)


def test_submit_feeds_the_script_on_stdin_and_is_not_idempotent() -> None:
    cmd = PbsDialect().submit_command("#!/bin/bash\n")
    assert cmd.argv == ("qsub",)
    assert cmd.stdin == "#!/bin/bash\n"
    assert cmd.idempotent is False


def test_parse_submit_returns_the_job_id() -> None:
    assert PbsDialect().parse_submit(ok("qsub_ok.txt")) == "4821.pbs01"
    assert PbsDialect().parse_submit(ok("qsub_array_ok.txt")) == "4822[].pbs01"


def test_parse_submit_rejection_carries_the_scheduler_message() -> None:
    result = CommandResult(170, "", fixture("qsub_reject_stderr.txt"))
    with pytest.raises(SchedulerRejected, match="Unknown queue") as info:
        PbsDialect().parse_submit(result)
    assert info.value.code == "scheduler_rejected"


def test_status_and_cancel_commands_pass_ids_as_argv() -> None:
    d = PbsDialect()
    assert d.status_command(["4810.pbs01", "4822[].pbs01"]).argv == (
        "qstat",
        "-f",
        "-F",
        "json",
        "-x",
        "-t",
        "4810.pbs01",
        "4822[].pbs01",
    )
    assert d.cancel_command(["4810.pbs01"]).argv == ("qdel", "4810.pbs01")
    with pytest.raises(ValueError, match="not a PBS job id"):
        d.status_command(["4810; rm -rf ~"])


# --- status ----------------------------------------------------------------------------------


def test_parse_status_lists_every_job_and_every_subjob() -> None:
    obs = {o.key: o for o in PbsDialect().parse_status(ok("qstat_jobs.json"))}
    assert set(obs) == {
        "4810.pbs01",
        "4811.pbs01",
        "4812.pbs01",
        "4800.pbs01",
        "4801.pbs01",
        "4802.pbs01",
        "4803.pbs01",
        # A subjob's key is its own id, what qstat and qdel take (PbsDialect.element_id).
        "4822[0].pbs01",
        "4822[1].pbs01",
        "4822[2].pbs01",
        "4822[3].pbs01",
    }
    states = {k: o.state for k, o in obs.items()}
    assert states["4810.pbs01"] is JobState.RUNNING
    assert states["4811.pbs01"] is JobState.PENDING
    assert states["4812.pbs01"] is JobState.PENDING
    assert states["4800.pbs01"] is JobState.COMPLETED
    assert states["4801.pbs01"] is JobState.TIMEOUT
    assert states["4802.pbs01"] is JobState.CANCELLED
    assert states["4803.pbs01"] is JobState.FAILED
    assert [states[f"4822[{i}].pbs01"] for i in range(4)] == [
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.RUNNING,
        JobState.PENDING,
    ]
    assert obs["4811.pbs01"].reason == "Not Running: Insufficient amount of resource: ngpus"
    assert obs["4822[1].pbs01"].exit_code == 2
    assert (obs["4822[1].pbs01"].job_id, obs["4822[1].pbs01"].array_index) == ("4822[].pbs01", "1")
    assert obs["4810.pbs01"].partition == "gpu"


def test_an_array_without_listed_subjobs_is_one_row_with_its_pending_range() -> None:
    [obs] = PbsDialect().parse_status(ok("qstat_array_parent_only.json"))
    assert (obs.job_id, obs.array_index, obs.state) == ("4830[].pbs01", "1-10", JobState.PENDING)


def test_jobs_the_server_forgot_are_absent() -> None:
    assert PbsDialect().parse_status(ok("qstat_no_jobs.json")) == []
    gone = CommandResult(153, "", "qstat: Unknown Job Id 4700.pbs01\n")
    assert PbsDialect().parse_status(gone) == []


@pytest.mark.parametrize(
    ("letter", "expected"),
    [
        ("Q", JobState.PENDING),
        ("H", JobState.PENDING),
        ("W", JobState.PENDING),
        ("T", JobState.PENDING),
        ("M", JobState.PENDING),
        ("U", JobState.PENDING),
        ("S", JobState.RUNNING),
        ("R", JobState.RUNNING),
        ("B", JobState.RUNNING),
        ("E", JobState.RUNNING),
        ("F", None),
        ("X", None),
    ],
)
def test_state_table_follows_qstat_man_page(letter: str, expected: JobState | None) -> None:
    assert STATE_TABLE[letter] is expected


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        ({"Exit_status": 0}, JobState.COMPLETED),
        ({"Exit_status": -29, "stime": "x"}, JobState.TIMEOUT),
        ({"Exit_status": 271, "comment": "walltime 70 exceeded limit 60"}, JobState.TIMEOUT),
        ({"Exit_status": 271, "substate": 91}, JobState.CANCELLED),
        # OpenPBS 23.06 (devpolaris): a job qdel'd as it started ends with Exit_status 0.
        ({"Exit_status": 0, "substate": 91}, JobState.CANCELLED),
        ({"Exit_status": 265}, JobState.CANCELLED),
        ({"Exit_status": 1}, JobState.FAILED),
        ({"Exit_status": -27}, JobState.FAILED),
        ({}, JobState.CANCELLED),
    ],
)
def test_finished_jobs_are_classified_by_exit_status(
    attrs: dict[str, object], expected: JobState
) -> None:
    assert finished_state(attrs) is expected
    assert map_state({"job_state": "F", **attrs}) is expected


# --- accounting ------------------------------------------------------------------------------


def test_accounting_times_are_utc_and_exit_codes_kept() -> None:
    records = {
        r.job_id + (r.array_index or ""): r
        for r in PbsDialect().parse_accounting(ok("qstat_jobs.json"))
    }
    prep = records["4800.pbs01"]
    assert prep.submit == datetime(2025, 11, 27, 8, 0, tzinfo=UTC)
    assert prep.eligible == datetime(2025, 11, 27, 8, 0, 1, tzinfo=UTC)
    assert prep.start == datetime(2025, 11, 27, 8, 5, tzinfo=UTC)
    assert prep.end == datetime(2025, 11, 27, 8, 15, tzinfo=UTC)
    assert (prep.elapsed_s, prep.exit_code, prep.account) == (600, 0, "proj42")
    assert prep.wait_s == 299.0
    assert records["4810.pbs01"].end is None  # still running
    assert records["4810.pbs01"].alloc_tres["select"] == "1:ncpus=32:ngpus=2:mem=65536mb"
    assert records["4822[].pbs011"].exit_code == 2
    assert records["4822[].pbs011"].end == datetime(2025, 11, 27, 9, 12, 30, tzinfo=UTC)


def test_accounting_reads_times_in_the_server_time_zone() -> None:
    central = timezone(timedelta(hours=-6))
    records = PbsDialect(tz=central).parse_accounting(ok("qstat_jobs.json"))
    prep = next(r for r in records if r.job_id == "4800.pbs01")
    assert prep.start == datetime(2025, 11, 27, 14, 5, tzinfo=UTC)
    assert prep.start is not None and prep.start.tzinfo is UTC


# --- probe -----------------------------------------------------------------------------------


def sections(**replace: BatchSection) -> dict[str, BatchSection]:
    out = {
        "nodes": BatchSection("nodes", 0, fixture("pbsnodes.json")),
        "queues": BatchSection("queues", 0, fixture("qstat_queues.json")),
        "jobs": BatchSection("jobs", 0, fixture("qstat_user_jobs.json")),
        "balance": BatchSection("balance", 0, "proj42 1000\n"),
    }
    out.update(replace)
    return out


def test_probe_sections_are_identifiers_with_the_balance_command(profile: SiteProfile) -> None:
    cmds = PbsDialect().probe_sections(profile, "alice")
    assert set(cmds) == {"nodes", "queues", "jobs", "balance"}
    assert cmds["nodes"].argv == ("pbsnodes", "-a", "-F", "json")
    # qstat refuses -f with -u: qselect -u finds the user's ids (the name as its own argv).
    assert cmds["jobs"].argv[0] == "sh" and cmds["jobs"].argv[-1] == "alice"
    assert 'qselect -u "$1"' in cmds["jobs"].argv[2]
    assert cmds["balance"].argv == ("sbank", "balance")
    with pytest.raises(ValueError, match="user"):
        PbsDialect().probe_sections(profile, "-x")


def test_probe_reads_the_jobs_before_the_nodes(profile: SiteProfile) -> None:
    """qstat runs before pbsnodes: a job it shows running is then already assigned in the node
    view (or has ended and freed it), so no probe shows a running job's GPUs free."""
    order = run_order(PbsDialect().probe_sections(profile, "alice"))
    assert order.index("nodes") > max(order.index("queues"), order.index("jobs"))


def test_probe_parse_does_not_depend_on_section_order(profile: SiteProfile) -> None:
    backwards = dict(reversed(sections().items()))
    dialect = PbsDialect()
    assert dialect.parse_probe(backwards, profile, "alice", NOW) == dialect.parse_probe(
        sections(), profile, "alice", NOW
    )


def test_probe_counts_nodes_gpus_cpus_and_jobs_per_queue(profile: SiteProfile) -> None:
    state = PbsDialect().parse_probe(sections(), profile, "alice", NOW)
    assert state.health is Health.OK
    assert state.accounts == ("proj42", "proj7")
    gpu = state.partition("gpu")
    assert gpu is not None
    assert gpu.nodes.model_dump() == {
        "idle": 1,
        "mixed": 2,
        "allocated": 1,
        "down": 1,
        "drain": 1,
        "other": 0,
    }
    assert (gpu.total_gpus, gpu.free_gpus, gpu.free_gpus_by_type) == (24, 9, {"a100": 9})
    assert (gpu.total_cpus, gpu.free_cpus) == (384, 152)
    assert gpu.free_memory_mib == (512 - 64) * 1024 + 512 * 1024 + 512 * 1024
    assert (gpu.max_free_gpus_on_node, gpu.max_free_cpus_on_node) == (4, 64)
    assert (gpu.pending_jobs, gpu.running_jobs) == (6, 4)
    assert gpu.blocked_pending_jobs == 1  # Held:1: a hold or a dependency, not ahead of anyone
    assert (gpu.user_pending_jobs, gpu.user_running_jobs) == (1, 2)
    assert gpu.available
    cpu = state.partition("cpu")
    assert cpu is not None
    assert (cpu.nodes.mixed, cpu.nodes.allocated, cpu.free_cpus, cpu.total_gpus) == (1, 1, 124, 0)
    assert cpu.free_memory_mib == 250000 - 1024
    # Running:7; its Exiting:1 job is neither running nor pending (see the test below).
    assert (cpu.pending_jobs, cpu.running_jobs, cpu.user_pending_jobs) == (3, 7, 1)
    assert cpu.blocked_pending_jobs == 1  # Waiting:1 (a start time)
    debug = state.partition("debug")
    assert debug is not None
    assert (debug.available, debug.nodes.total) == (False, 0)


def test_an_exiting_job_is_neither_running_nor_pending(profile: SiteProfile) -> None:
    """A job in E has finished and PBS is cleaning up after it (qstat(1B); pbs_job_attributes
    job_state): no work in progress and no one waits behind it, as Slurm's COMPLETING. Its
    vnodes stay assigned until then, so its GPUs are not shown free either (pbsnodes)."""
    queues = fixture("qstat_queues.json").replace(
        "Running:3 Exiting:0 Begun:1", "Running:3 Exiting:2 Begun:1"
    )
    jobs = json.loads(fixture("qstat_user_jobs.json"))
    jobs["Jobs"]["4813.pbs01"] = {
        **jobs["Jobs"]["4810.pbs01"],
        "job_state": "E",
        "Exit_status": 0,
    }
    state = PbsDialect().parse_probe(
        sections(
            queues=BatchSection("queues", 0, queues),
            jobs=BatchSection("jobs", 0, json.dumps(jobs)),
        ),
        profile,
        "alice",
        NOW,
    )
    gpu = state.partition("gpu")
    assert gpu is not None
    # As without the two exiting jobs: Running:3 + Begun:1, the user's R job and B array.
    assert (gpu.pending_jobs, gpu.running_jobs) == (6, 4)
    assert (gpu.user_pending_jobs, gpu.user_running_jobs) == (1, 2)
    assert gpu.free_gpus == 9  # from pbsnodes' resources_assigned, which still holds them
    assert map_state(jobs["Jobs"]["4813.pbs01"]) is JobState.RUNNING  # our job: not ended yet


def test_probe_is_offline_when_pbsnodes_failed(profile: SiteProfile) -> None:
    state = PbsDialect().parse_probe(
        sections(nodes=BatchSection("nodes", 1, "")), profile, "alice", NOW
    )
    assert state.health is Health.OFFLINE
    assert state.partitions == ()


def test_probe_is_degraded_when_a_secondary_section_failed(profile: SiteProfile) -> None:
    state = PbsDialect().parse_probe(
        sections(queues=BatchSection("queues", 2, "")), profile, "alice", NOW
    )
    assert state.health is Health.DEGRADED
    assert state.error is not None and "queues" in state.error
    gpu = state.partition("gpu")
    assert gpu is not None and gpu.available  # unknown is not closed


# --- injection -------------------------------------------------------------------------------


def run_body(script: str, cwd: Path) -> bytes:
    path = cwd.parent / "job.sh"
    path.write_text(script)
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "PBS_O_WORKDIR": str(cwd)}
    done = subprocess.run(["bash", str(path)], cwd=cwd, env=env, capture_output=True, check=True)
    return done.stdout


def assert_only_our_directives(script: str, benign: str) -> None:
    # Split as a scheduler would and as Python's splitlines would: both must agree.
    for lines in (script.split("\n"), script.splitlines()):
        assert [ln for ln in lines if ln.startswith("#PBS")] == directives(benign)


def test_hostile_argv_env_and_image_render_inert(profile: SiteProfile, canary_dir: Path) -> None:
    d = PbsDialect()
    for hostile in corpus(canary_dir):
        as_argv = spec(command=("printf", "%s\n", hostile), shape=Shape())
        script = d.render_script(as_argv, profile)
        assert_only_our_directives(script, d.render_script(spec(shape=Shape()), profile))
        assert run_body(script, canary_dir) == (hostile + "\n").encode()

        as_env = spec(command=("printenv", "HOSTILE"), env={"HOSTILE": hostile}, shape=Shape())
        script = d.render_script(as_env, profile)
        assert_only_our_directives(script, d.render_script(spec(shape=Shape()), profile))
        assert run_body(script, canary_dir) == (hostile + "\n").encode()

        as_image = spec(command=("end",), container_image=hostile, shape=Shape())
        script = d.render_script(as_image, profile)
        assert_only_our_directives(script, d.render_script(spec(shape=Shape()), profile))
        assert run_body(script, canary_dir) == (hostile + "\nend\n").encode()


@pytest.mark.parametrize("field", ["name", "stdout", "stderr", "workdir", "account", "partition"])
def test_hostile_names_and_paths_are_refused(
    field: str, profile: SiteProfile, canary_dir: Path
) -> None:
    for hostile in corpus(canary_dir):
        # pydantic's ValidationError is a ValueError; so is the directive guard's refusal.
        with pytest.raises(ValueError, match=rf"{field}|unsafe value") as info:
            PbsDialect().render_script(spec(**{field: hostile}), profile)
        if isinstance(info.value, ValidationError):
            assert info.value.errors()[0]["loc"][0] == field
        else:
            assert "unsafe value" in str(info.value)
