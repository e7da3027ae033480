"""The `process` dialect: rendering, argv, parsing localsched's JSON, the probe's SiteState,
and the injection corpus through the dialect and the real scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects import get_dialect
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.process import ProcessDialect, accounts_of, config_of
from fedhpc.domain.job import ArraySpec, JobSpec, JobState, Shape
from fedhpc.domain.site import Health, SiteProfile
from tests.injection_corpus import corpus

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PY = "/opt/py/bin/python"


@pytest.fixture
def profile() -> SiteProfile:
    return SiteProfile.model_validate(
        {
            "name": "procsite",
            "dialect": "process",
            "arch": "x86_64",
            "charge": {"kind": "core-hours", "unit": "SU"},
            "conventions": {"account_pattern": "fedhpc-{cpu|gpu}"},
            "containers": {"exec_template": "printf %s\\n {image}"},
            "partitions": [
                {
                    "name": "ai",
                    "max_wall_s": "4h",
                    "node": {
                        "cpus": 48,
                        "memory_mib": "128G",
                        "count": 1,
                        "accelerator": {"type": "h100", "memory_gib": 80, "count": 2},
                    },
                },
                {"name": "cpu", "max_wall_s": "1h", "node": {"cpus": 64, "memory_mib": "64G"}},
            ],
        }
    )


def spec(**overrides: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "fedhpc-t1-1",
        "command": ("python", "eval.py", "--ckpt", "a b"),
        "partition": "ai",
        "shape": Shape(nodes=1, cpus=4, gpus=1, memory_mib=2048, wall_time_s=600),
        "account": "fedhpc-gpu",
        "stdout": "/scratch/t1/1.out",
        "stderr": "/scratch/t1/1.err",
        "workdir": "/scratch/t1",
    }
    base.update(overrides)
    return JobSpec.model_validate(base)


def directives(script: str) -> list[str]:
    return [line for line in script.split("\n") if line.startswith("#LOCALSCHED")]


def test_registered_under_its_profile_name() -> None:
    assert get_dialect("process").name == "process"


def test_render_puts_every_request_in_a_directive(profile: SiteProfile) -> None:
    script = ProcessDialect(PY).render_script(spec(env={"SEED": "1"}), profile)
    assert directives(script) == [
        "#LOCALSCHED --job-name=fedhpc-t1-1",
        "#LOCALSCHED --partition=ai",
        "#LOCALSCHED --account=fedhpc-gpu",
        "#LOCALSCHED --nodes=1",
        "#LOCALSCHED --cpus=4",
        "#LOCALSCHED --gpus=1",
        "#LOCALSCHED --mem=2048",
        "#LOCALSCHED --time=600",
        "#LOCALSCHED --output=/scratch/t1/1.out",
        "#LOCALSCHED --error=/scratch/t1/1.err",
        "#LOCALSCHED --chdir=/scratch/t1",
    ]
    assert script.startswith("#!/bin/bash\n")
    body = script.split("\n")[len(directives(script)) + 1 :]
    assert body[:3] == ["set -euo pipefail", "export SEED=1", "cd /scratch/t1"]
    assert script.rstrip().endswith("python eval.py --ckpt 'a b'")


def test_render_leaves_out_what_was_not_asked(profile: SiteProfile) -> None:
    bare = spec(
        shape=Shape(cpus=1, wall_time_s=60),
        account=None,
        stdout=None,
        stderr=None,
        workdir=None,
        partition="cpu",
    )
    assert directives(ProcessDialect(PY).render_script(bare, profile)) == [
        "#LOCALSCHED --job-name=fedhpc-t1-1",
        "#LOCALSCHED --partition=cpu",
        "#LOCALSCHED --nodes=1",
        "#LOCALSCHED --cpus=1",
        "#LOCALSCHED --time=60",
    ]


def test_arrays_are_refused(profile: SiteProfile) -> None:
    with pytest.raises(ValueError, match="no job arrays"):
        ProcessDialect(PY).render_script(spec(array=ArraySpec(stop=3)), profile)


def test_commands_are_argv_of_the_scheduler_module() -> None:
    d = ProcessDialect(PY)
    sub = d.submit_command("#!/bin/bash\n")
    assert sub.argv == (PY, "-m", "fedhpc_dev.localsched", "submit")
    assert sub.stdin == "#!/bin/bash\n" and sub.idempotent is False
    assert d.status_command(["3", "12"]).argv[3:] == ("queue", "--jobs", "3,12")
    assert d.accounting_command(["3"]).argv[3:] == ("acct", "--jobs", "3")
    assert d.cancel_command(["3", "4"]).argv[3:] == ("cancel", "3", "4")
    assert d.find_command(["fedhpc-a-1"]).argv[3:] == ("find", "fedhpc-a-1")
    with pytest.raises(ValueError, match="not a localsched job id"):
        d.status_command(["3; rm -rf /"])
    with pytest.raises(ValueError, match="not job names"):
        d.find_command(["-rf"])


def test_parse_submit_returns_the_id_or_the_scheduler_reason() -> None:
    d = ProcessDialect(PY)
    assert d.parse_submit(CommandResult(0, "17\n", "")) == "17"
    msg = "localsched: error: invalid account 'x' (accounts: fedhpc-cpu, fedhpc-gpu)\n"
    with pytest.raises(SchedulerRejected, match="invalid account"):
        d.parse_submit(CommandResult(1, "", msg))
    with pytest.raises(SchedulerRejected, match="no job id"):
        d.parse_submit(CommandResult(0, "hello\n", ""))


# Recorded from `python -m fedhpc_dev.localsched queue` / `acct`.
QUEUE = (
    '[{"id": 1, "name": "fedhpc-a-1", "nodes": "ai-1", "partition": "ai", "reason": null, '
    '"state": "RUNNING", "user": "alice"}, {"id": 2, "name": "fedhpc-b-1", "nodes": null, '
    '"partition": "ai", "reason": "Resources", "state": "PENDING", "user": "alice"}]'
)
ACCT = (
    '[{"account": "fedhpc-gpu", "alloc_tres": {"cpu": "1", "gres/gpu": "1", "gres/gpu:h100": '
    '"1", "mem": "1024M", "node": "1"}, "elapsed_s": 5.012, "eligible": '
    '"2026-01-05T12:00:00.250000+00:00", "end": "2026-01-05T12:00:06.262000+00:00", '
    '"exit_code": 0, "gpu_indices": [1], "id": 1, "name": "fedhpc-a-1", "nodes": "ai-1", '
    '"partition": "ai", "reason": null, "start": "2026-01-05T12:00:01.250000+00:00", '
    '"state": "COMPLETED", "stderr": "/s/1.err", "stdout": "/s/1.out", '
    '"submit": "2026-01-05T12:00:00.250000+00:00", "time_limit_s": 600, "user": "alice"}, '
    '{"account": "fedhpc-gpu", "alloc_tres": {}, "elapsed_s": null, "eligible": '
    '"2026-01-05T12:00:00.500000+00:00", "end": "2026-01-05T12:00:03+00:00", "exit_code": null, '
    '"gpu_indices": [], "id": 2, "name": "fedhpc-b-1", "nodes": null, "partition": "ai", '
    '"reason": null, "start": null, "state": "CANCELLED", "stderr": "/s/2.err", "stdout": '
    '"/s/2.out", "submit": "2026-01-05T12:00:00.500000+00:00", "time_limit_s": 600, '
    '"user": "alice"}]'
)


def test_parse_status_maps_states_and_reasons() -> None:
    rows = ProcessDialect(PY).parse_status(CommandResult(0, QUEUE, ""))
    assert [(r.job_id, r.state, r.reason, r.nodes) for r in rows] == [
        ("1", JobState.RUNNING, None, "ai-1"),
        ("2", JobState.PENDING, "Resources", None),
    ]
    assert ProcessDialect(PY).parse_status(CommandResult(0, "[]", "")) == []


def test_parse_accounting_keeps_sub_second_utc_times_and_exit_codes() -> None:
    done, cancelled = ProcessDialect(PY).parse_accounting(CommandResult(0, ACCT, ""))
    assert done.state is JobState.COMPLETED and done.exit_code == 0
    assert done.start == datetime(2026, 1, 5, 12, 0, 1, 250000, tzinfo=UTC)
    assert done.wait_s == pytest.approx(1.0)
    assert done.runtime_s == pytest.approx(5.012)
    assert done.settled and done.alloc_tres["gres/gpu:h100"] == "1"
    assert cancelled.state is JobState.CANCELLED and cancelled.start is None
    assert cancelled.settled


def test_parse_find_and_failures() -> None:
    d = ProcessDialect(PY)
    found = d.parse_find(CommandResult(0, '[{"id": 4, "name": "a"}, {"id": 9, "name": "a"}]', ""))
    assert found == {"a": "4"}
    with pytest.raises(ValueError, match="queue failed"):
        d.parse_status(CommandResult(1, "", "localsched: error: boom"))


@pytest.mark.parametrize(
    ("pattern", "accounts"),
    [
        ("fedhpc-{cpu|gpu}", ["fedhpc-cpu", "fedhpc-gpu"]),
        ("fedhpc-gpu", ["fedhpc-gpu"]),
        ("{a|b}-{x|y}", ["a-x", "a-y", "b-x", "b-y"]),
        ("", []),
    ],
)
def test_accounts_come_from_the_account_pattern(
    profile: SiteProfile, pattern: str, accounts: list[str]
) -> None:
    conv = profile.conventions.model_copy(update={"account_pattern": pattern})
    assert accounts_of(profile.model_copy(update={"conventions": conv})) == accounts


def test_probe_carries_the_profile_capacity(profile: SiteProfile) -> None:
    sections = ProcessDialect(PY).probe_sections(profile, "alice")
    assert list(sections) == ["probe"]
    argv = sections["probe"].argv
    assert argv[3:5] == ("probe", "--user=alice")
    config = json.loads(argv[5].removeprefix("--config="))
    assert config == config_of(profile)
    assert config["partitions"][0] == {
        "name": "ai",
        "nodes": 1,
        "cpus": 48,
        "memory_mib": 131072,
        "max_wall_s": 14400,
        "gpus": 2,
        "gpu_type": "h100",
    }


PROBE = {
    "accounts": ["fedhpc-cpu", "fedhpc-gpu"],
    "usage_cpu_s": {"fedhpc-gpu": 7200},
    "partitions": [
        {
            "name": "ai",
            "nodes": {"mixed": 1},
            "gpu_type": "h100",
            "total_cpus": 48,
            "free_cpus": 46,
            "max_free_cpus_on_node": 46,
            "total_gpus": 2,
            "free_gpus": 0,
            "max_free_gpus_on_node": 0,
            "free_memory_mib": 129024,
            "running": 2,
            "pending": 3,
            "user_running": 1,
            "user_pending": 2,
        },
        {
            "name": "cpu",
            "nodes": {"idle": 1},
            "gpu_type": None,
            "total_cpus": 64,
            "free_cpus": 64,
            "max_free_cpus_on_node": 64,
            "total_gpus": 0,
            "free_gpus": 0,
            "max_free_gpus_on_node": 0,
            "free_memory_mib": 65536,
            "running": 0,
            "pending": 0,
            "user_running": 0,
            "user_pending": 0,
        },
    ],
}


def test_probe_becomes_the_same_site_state_shape_as_slurm(profile: SiteProfile) -> None:
    sections = {"probe": BatchSection("probe", 0, json.dumps(PROBE))}
    state = ProcessDialect(PY).parse_probe(sections, profile, "alice", NOW)
    assert state.health is Health.OK and state.error is None
    ai = state.partition("ai")
    assert ai is not None
    assert (ai.total_gpus, ai.free_gpus, ai.free_gpus_by_type) == (2, 0, {"h100": 0})
    assert (ai.free_cpus, ai.max_free_cpus_on_node, ai.free_memory_mib) == (46, 46, 129024)
    assert (ai.pending_jobs, ai.running_jobs, ai.user_pending_jobs) == (3, 2, 2)
    assert ai.nodes.mixed == 1 and ai.nodes.usable == 1 and ai.available
    assert state.accounts == ("fedhpc-cpu", "fedhpc-gpu")
    assert state.credit[1].used == pytest.approx(2.0)
    assert state.arch is not None and state.arch.value == "x86_64"


def test_probe_failure_is_offline_and_a_missing_partition_degrades(profile: SiteProfile) -> None:
    d = ProcessDialect(PY)
    off = d.parse_probe({"probe": BatchSection("probe", 1, "")}, profile, "alice", NOW)
    assert off.health is Health.OFFLINE
    partial = {**PROBE, "partitions": PROBE["partitions"][:1]}  # type: ignore[index]
    sections = {"probe": BatchSection("probe", 0, json.dumps(partial))}
    state = d.parse_probe(sections, profile, "alice", NOW)
    assert state.health is Health.DEGRADED and "cpu" in (state.error or "")


# --- injection: through the dialect and the real scheduler ----------------------------------


def localsched(root: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fedhpc_dev.localsched", "--root", str(root), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def test_hostile_argv_env_and_image_run_inert_under_the_scheduler(
    profile: SiteProfile, canary_dir: Path, tmp_path: Path
) -> None:
    d = ProcessDialect()
    root, out = tmp_path / "sched", tmp_path / "out"
    out.mkdir()
    localsched(root, "configure", json.dumps(config_of(profile)))
    expected: dict[str, str] = {}
    for i, hostile in enumerate(corpus(canary_dir)):
        common = {
            "partition": "cpu",
            "shape": Shape(cpus=1, wall_time_s=60),
            "workdir": str(canary_dir),
            "env": {"H": hostile},
        }
        cases = [
            (spec(command=("printf", "%s\n", hostile), **common), hostile + "\n"),
            (
                spec(command=("printenv", "H"), container_image=hostile, **common),
                f"{hostile}\nprintenv\nH\n",
            ),
        ]
        for k, (case, want) in enumerate(cases):
            job = case.model_copy(update={"stdout": f"{out}/{i}-{k}.out", "stderr": None})
            script = d.render_script(job, profile)
            plain = job.model_copy(
                update={"command": ("true",), "env": {}, "container_image": None}
            )
            ours = directives(d.render_script(plain, profile))
            for lines in (script.split("\n"), script.splitlines()):
                assert [ln for ln in lines if ln.startswith("#LOCALSCHED")] == ours
            job_id = localsched(root, "submit", stdin=script).strip()
            expected[job_id] = want
    deadline = time.monotonic() + 60
    while True:
        rows = json.loads(localsched(root, "acct"))
        if all(r["state"] in {"COMPLETED", "FAILED"} for r in rows):
            break
        assert time.monotonic() < deadline, "jobs did not finish"
        time.sleep(0.2)
    for row in rows:
        assert row["state"] == "COMPLETED", row
        assert Path(row["stdout"]).read_bytes().decode() == expected[str(row["id"])]


@pytest.mark.parametrize("field", ["name", "stdout", "stderr", "workdir", "account", "partition"])
def test_hostile_names_and_paths_are_refused(
    field: str, profile: SiteProfile, canary_dir: Path
) -> None:
    for hostile in corpus(canary_dir):
        with pytest.raises(ValueError, match=rf"{field}|unsafe value") as info:
            ProcessDialect(PY).render_script(spec(**{field: hostile}), profile)
        if isinstance(info.value, ValidationError):
            assert info.value.errors()[0]["loc"][0] == field
