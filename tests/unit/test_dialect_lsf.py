"""LSF dialect: rendering, parsing recorded output, state mapping, probe, injection corpus."""

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
from fedhpc.adapters.dialects.lsf import LsfDialect
from fedhpc.adapters.dialects.lsf_parse import STATE_TABLE, exit_state, lsf_time
from fedhpc.domain.job import ArraySpec, JobSpec, JobState, Shape
from fedhpc.domain.site import Health, SiteProfile
from tests.injection_corpus import corpus
from tests.probe_order import run_order

FIXTURES = Path(__file__).parent.parent / "fixtures" / "lsf"
NOW = datetime(2025, 11, 27, 10, 0, tzinfo=UTC)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def ok(name: str) -> CommandResult:
    return CommandResult(0, fixture(name), "")


@pytest.fixture
def profile() -> SiteProfile:
    return SiteProfile.model_validate(
        {
            "name": "lsfsite",
            "dialect": "lsf",
            "arch": "x86_64",
            "charge": {"kind": "node-hours"},
            "containers": {"exec_template": "printf %s\\n {image}"},
            "partitions": [
                {
                    "name": "gpu",
                    "max_wall_s": "24h",
                    "max_nodes_per_job": 4,
                    "node": {
                        "cpus": 64,
                        "memory_mib": "512G",
                        "accelerator": {"type": "v100", "memory_gib": 16, "count": 4},
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
        "stdout": "/home/alice/out.%J.log",
        "stderr": "/home/alice/err.%J.log",
        "workdir": "/scratch/alice/run1",
    }
    base.update(overrides)
    return JobSpec.model_validate(base)


def directives(script: str) -> list[str]:
    return [line for line in script.split("\n") if line.startswith("#BSUB")]


# --- rendering -------------------------------------------------------------------------------


def test_render_puts_every_request_in_a_directive(profile: SiteProfile) -> None:
    job = spec(array=ArraySpec(start=1, stop=9, step=2, limit=3))
    script = LsfDialect().render_script(job, profile)
    assert directives(script) == [
        "#BSUB -J train[1-9:2]%3",
        "#BSUB -q gpu",
        "#BSUB -P proj42",
        "#BSUB -W 90",
        "#BSUB -n 64",
        "#BSUB -R span[ptile=32]",
        "#BSUB -gpu num=4",
        "#BSUB -M 65536MB",
        "#BSUB -R rusage[mem=2048MB]",
        "#BSUB -o /home/alice/out.%J.log",
        "#BSUB -e /home/alice/err.%J.log",
        "#BSUB -cwd /scratch/alice/run1",
    ]
    assert script.startswith("#!/bin/bash\n")
    assert script.rstrip().endswith("python train.py")


def test_render_single_node_keeps_the_job_on_one_host(profile: SiteProfile) -> None:
    shape = Shape(nodes=1, cpus=4, wall_time_s=61)
    script = LsfDialect().render_script(spec(shape=shape, account=None, workdir=None), profile)
    assert "#BSUB -R span[hosts=1]" in directives(script)
    assert "#BSUB -W 2" in directives(script)
    assert not any(d.startswith(("#BSUB -P", "#BSUB -gpu", "#BSUB -M")) for d in directives(script))


def test_render_refuses_an_array_starting_at_zero(profile: SiteProfile) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        LsfDialect().render_script(spec(array=ArraySpec(start=0, stop=3)), profile)


def test_submit_feeds_the_script_on_stdin_and_is_not_idempotent() -> None:
    cmd = LsfDialect().submit_command("#!/bin/bash\n")
    assert (cmd.argv, cmd.stdin, cmd.idempotent) == (("bsub",), "#!/bin/bash\n", False)


def test_parse_submit_returns_the_job_id() -> None:
    assert LsfDialect().parse_submit(ok("bsub_ok.txt")) == "5123"


def test_parse_submit_rejection_carries_the_scheduler_message() -> None:
    result = CommandResult(255, "", fixture("bsub_reject.txt"))
    with pytest.raises(SchedulerRejected, match="Project name <nosuch> is not valid"):
        LsfDialect().parse_submit(result)


def test_status_and_cancel_commands_pass_ids_as_argv() -> None:
    d = LsfDialect()
    argv = d.status_command(["5110", "5124[2]"]).argv
    assert argv[:4] == ("bjobs", "-a", "-json", "-o")
    assert argv[-2:] == ("5110", "5124[2]")
    assert d.cancel_command(["5124"]).argv == ("bkill", "5124")
    with pytest.raises(ValueError, match="not a LSF job id"):
        d.cancel_command(["-u all"])


# --- status ----------------------------------------------------------------------------------


def test_parse_status_lists_every_job_and_every_array_element() -> None:
    obs = {o.key: o for o in LsfDialect().parse_status(ok("bjobs_status.json"))}
    assert set(obs) == {
        "5110",
        "5111",
        "5100",
        "5101",
        "5102",
        "5103",
        "5124[1]",
        "5124[2]",
        "5124[3]",
        "5124[4]",
    }
    assert {k: o.state for k, o in obs.items()} == {
        "5110": JobState.RUNNING,
        "5111": JobState.PENDING,
        "5100": JobState.COMPLETED,
        "5101": JobState.CANCELLED,
        "5102": JobState.TIMEOUT,
        "5103": JobState.FAILED,
        "5124[1]": JobState.COMPLETED,
        "5124[2]": JobState.FAILED,
        "5124[3]": JobState.RUNNING,
        "5124[4]": JobState.PENDING,
    }
    assert (
        obs["5111"].reason
        == "Job requirements for reserving resources (gpu) not satisfied: 3 hosts"
    )
    assert obs["5102"].reason is not None and obs["5102"].reason.startswith("TERM_RUNLIMIT")
    assert (obs["5124[2]"].exit_code, obs["5110"].exit_code) == (2, None)


def test_element_ids_written_inside_jobid_are_split() -> None:
    out = '{"COMMAND":"bjobs","JOBS":1,"RECORDS":[{"JOBID":"77[3]","STAT":"RUN","QUEUE":"q"}]}'
    [obs] = LsfDialect().parse_status(CommandResult(0, out, ""))
    assert (obs.job_id, obs.array_index) == ("77", "3")


def test_jobs_lsf_forgot_are_absent() -> None:
    gone = CommandResult(255, "", "Job <4000> is not found\n")
    assert LsfDialect().parse_status(gone) == []


@pytest.mark.parametrize(
    ("stat", "expected"),
    [
        ("PEND", JobState.PENDING),
        ("PSUSP", JobState.PENDING),
        ("WAIT", JobState.PENDING),
        ("PROV", JobState.PENDING),
        ("RUN", JobState.RUNNING),
        ("USUSP", JobState.RUNNING),
        ("SSUSP", JobState.RUNNING),
        ("UNKWN", JobState.RUNNING),
        ("ZOMBI", JobState.RUNNING),
        ("DONE", JobState.COMPLETED),
        ("EXIT", None),
    ],
)
def test_state_table_follows_bjobs_man_page(stat: str, expected: JobState | None) -> None:
    assert STATE_TABLE[stat] is expected


@pytest.mark.parametrize(
    ("reason", "code", "expected"),
    [
        ("TERM_OWNER: job killed by owner", 130, JobState.CANCELLED),
        ("TERM_ADMIN: job killed by root or LSF administrator", 130, JobState.CANCELLED),
        ("TERM_RUNLIMIT: job killed after reaching LSF run time limit", 140, JobState.TIMEOUT),
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit", 137, JobState.FAILED),
        ("", 1, JobState.FAILED),
        ("", 130, JobState.CANCELLED),
        ("", None, JobState.CANCELLED),
    ],
)
def test_exit_is_classified_by_its_reason(
    reason: str, code: int | None, expected: JobState
) -> None:
    assert exit_state(reason, code) is expected


# --- accounting ------------------------------------------------------------------------------


def test_accounting_places_year_less_times_before_now_in_utc() -> None:
    parsed = LsfDialect().parse_accounting(ok("bjobs_accounting.json"), now=NOW)
    records = {r.key: r for r in parsed}
    prep = records["5100"]
    assert (prep.submit, prep.start, prep.end) == (
        datetime(2025, 11, 27, 8, 0, tzinfo=UTC),
        datetime(2025, 11, 27, 8, 5, tzinfo=UTC),
        datetime(2025, 11, 27, 8, 15, tzinfo=UTC),
    )
    assert (prep.elapsed_s, prep.account, prep.exit_code) == (600, "proj42", None)
    assert prep.alloc_tres == {"slots": "4", "exec_host": "4*cpu01"}
    assert records["5110"].end is None  # running: FINISH_TIME is only a forecast
    newyear = records["5090"]
    assert newyear.submit == datetime(2024, 12, 31, 23, 50, tzinfo=UTC)
    assert newyear.end == datetime(2025, 1, 1, 0, 5, tzinfo=UTC)
    assert records["5124[2]"].exit_code == 2


def test_accounting_reads_times_in_the_cluster_time_zone() -> None:
    central = timezone(timedelta(hours=-6))
    records = LsfDialect(tz=central).parse_accounting(ok("bjobs_accounting.json"), now=NOW)
    prep = next(r for r in records if r.job_id == "5100")
    assert prep.start == datetime(2025, 11, 27, 14, 5, tzinfo=UTC)


def test_time_stamps_with_a_year_need_no_reference() -> None:
    assert lsf_time("Nov 27 08:05:30 2025", UTC, None) == datetime(
        2025, 11, 27, 8, 5, 30, tzinfo=UTC
    )
    assert lsf_time("Nov 27 08:05", UTC, None) is None
    assert lsf_time("", UTC, NOW) is None


# --- probe -----------------------------------------------------------------------------------


def sections(**replace: BatchSection) -> dict[str, BatchSection]:
    files = {
        "hosts": "bhosts.json",
        "gpus": "bhosts_gpu.json",
        "queues": "bqueues.json",
        "queuehosts": "bqueues_l.txt",
        "groups": "bmgroup.txt",
        "load": "lsload.txt",
        "jobs": "bjobs_all.json",
    }
    out = {name: BatchSection(name, 0, fixture(f)) for name, f in files.items()}
    out.update(replace)
    return out


def test_probe_sections_are_identifiers(profile: SiteProfile) -> None:
    cmds = LsfDialect().probe_sections(profile, "alice")
    assert all(name.isidentifier() for name in cmds)
    assert cmds["jobs"].argv[:3] == ("bjobs", "-u", "all")
    assert cmds["queuehosts"].argv == ("bqueues", "-l", "gpu", "cpu", "debug")


def test_probe_reads_the_jobs_before_the_hosts(profile: SiteProfile) -> None:
    """bjobs runs before bhosts and lsload: a job it shows running is then already counted on
    its host (or has ended and freed it), so no probe shows a running job's GPUs free."""
    order = run_order(LsfDialect().probe_sections(profile, "alice"))
    assert order[0] == "jobs"
    assert {"hosts", "gpus", "load"} <= set(order[1:])


def test_probe_parse_does_not_depend_on_section_order(profile: SiteProfile) -> None:
    backwards = dict(reversed(sections().items()))
    dialect = LsfDialect()
    assert dialect.parse_probe(backwards, profile, "alice", NOW) == dialect.parse_probe(
        sections(), profile, "alice", NOW
    )


def test_probe_counts_hosts_gpus_slots_and_jobs_per_queue(profile: SiteProfile) -> None:
    state = LsfDialect().parse_probe(sections(), profile, "alice", NOW)
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
    assert (gpu.total_gpus, gpu.free_gpus, gpu.free_gpus_by_type) == (24, 9, {"v100": 9})
    assert (gpu.total_cpus, gpu.free_cpus) == (384, 152)
    assert gpu.free_memory_mib == (448 + 500 + 512) * 1024
    assert (gpu.max_free_gpus_on_node, gpu.max_free_cpus_on_node) == (4, 64)
    assert (gpu.pending_jobs, gpu.running_jobs) == (3, 3)
    assert (gpu.user_pending_jobs, gpu.user_running_jobs) == (2, 2)
    cpu = state.partition("cpu")
    assert cpu is not None
    assert (cpu.nodes.mixed, cpu.nodes.allocated, cpu.nodes.total) == (1, 1, 2)
    assert (cpu.free_cpus, cpu.free_memory_mib, cpu.total_gpus) == (124, 240 * 1024, 0)
    assert (cpu.pending_jobs, cpu.running_jobs, cpu.user_pending_jobs) == (2, 1, 1)
    assert (cpu.blocked_pending_jobs, gpu.blocked_pending_jobs) == (1, 0)  # carol's PSUSP job
    debug = state.partition("debug")
    assert debug is not None
    assert (debug.available, debug.nodes.total) == (False, 2)


def test_a_finished_job_is_neither_running_nor_pending(profile: SiteProfile) -> None:
    """DONE/EXIT while post-execution runs (bjobs -a lists them too): ended, not work in
    progress, as PBS's E and Slurm's COMPLETING; LSF has already released their slots."""
    ended = [
        {"JOBID": "5130", "STAT": "DONE", "QUEUE": "gpu", "USER": "alice", "PROJ_NAME": "x"},
        {"JOBID": "5131", "STAT": "EXIT", "QUEUE": "gpu", "USER": "bob", "PROJ_NAME": "x"},
    ]
    jobs = json.loads(fixture("bjobs_all.json"))
    jobs["RECORDS"] += ended
    state = LsfDialect().parse_probe(
        sections(jobs=BatchSection("jobs", 0, json.dumps(jobs))), profile, "alice", NOW
    )
    gpu = state.partition("gpu")
    assert gpu is not None
    assert (gpu.pending_jobs, gpu.running_jobs) == (3, 3)
    assert (gpu.user_pending_jobs, gpu.user_running_jobs) == (2, 2)


def test_probe_is_offline_when_bhosts_failed(profile: SiteProfile) -> None:
    state = LsfDialect().parse_probe(
        sections(hosts=BatchSection("hosts", 255, "")), profile, "alice", NOW
    )
    assert state.health is Health.OFFLINE


def test_probe_is_degraded_without_gpu_numbers(profile: SiteProfile) -> None:
    state = LsfDialect().parse_probe(
        sections(gpus=BatchSection("gpus", 255, "")), profile, "alice", NOW
    )
    assert state.health is Health.DEGRADED
    gpu = state.partition("gpu")
    assert gpu is not None and gpu.free_gpus == 0 and gpu.free_cpus == 152


# --- injection -------------------------------------------------------------------------------


def run_body(script: str, cwd: Path) -> bytes:
    path = cwd.parent / "job.sh"
    path.write_text(script)
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    done = subprocess.run(["bash", str(path)], cwd=cwd, env=env, capture_output=True, check=True)
    return done.stdout


def assert_only_our_directives(script: str, benign: str) -> None:
    for lines in (script.split("\n"), script.splitlines()):
        assert [ln for ln in lines if ln.startswith("#BSUB")] == directives(benign)


def test_hostile_argv_env_and_image_render_inert(profile: SiteProfile, canary_dir: Path) -> None:
    d = LsfDialect()
    plain = {"shape": Shape(), "workdir": None}
    benign = d.render_script(spec(**plain), profile)
    for hostile in corpus(canary_dir):
        cases = [
            (spec(command=("printf", "%s\n", hostile), **plain), hostile + "\n"),
            (spec(command=("printenv", "H"), env={"H": hostile}, **plain), hostile + "\n"),
            (spec(command=("end",), container_image=hostile, **plain), hostile + "\nend\n"),
        ]
        for job, expected in cases:
            script = d.render_script(job, profile)
            assert_only_our_directives(script, benign)
            assert run_body(script, canary_dir) == expected.encode()


@pytest.mark.parametrize("field", ["name", "stdout", "stderr", "workdir", "account", "partition"])
def test_hostile_names_and_paths_are_refused(
    field: str, profile: SiteProfile, canary_dir: Path
) -> None:
    for hostile in corpus(canary_dir):
        # pydantic's ValidationError is a ValueError; so is the directive guard's refusal.
        with pytest.raises(ValueError, match=rf"{field}|unsafe value") as info:
            LsfDialect().render_script(spec(**{field: hostile}), profile)
        if isinstance(info.value, ValidationError):
            assert info.value.errors()[0]["loc"][0] == field
        else:
            assert "unsafe value" in str(info.value)
