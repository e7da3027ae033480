"""The `fedhpc` command as a user runs it: the installed console script, in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedhpc.profiles import load_profiles

FEDHPC = shutil.which("fedhpc", path=str(Path(sys.executable).parent)) or "fedhpc"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FEDHPC, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=60,
    )


def test_help_lists_the_commands() -> None:
    out = _run("--help")
    assert out.returncode == 0
    for command in ("sites", "probe", "devfed", "demo"):
        assert command in out.stdout


def test_sites_list_prints_every_shipped_profile() -> None:
    out = _run("sites", "list")
    assert out.returncode == 0, out.stderr
    names = {line.split()[0] for line in out.stdout.splitlines()[1:]}
    assert names == set(load_profiles())
    assert {"delta", "deltaai", "anvil", "vista", "perlmutter", "polaris", "sophia"} <= names


def test_sites_show_prints_the_profile_as_json() -> None:
    out = _run("sites", "show", "devdelta")
    assert out.returncode == 0
    assert '"dialect": "slurm"' in out.stdout


def test_a_reader_that_closes_the_pipe_early_stops_the_command_quietly() -> None:
    """`fedhpc sites show devdelta | head -1` where head has already gone: no BrokenPipeError
    traceback, exit 141 (128 + SIGPIPE) as shell tools do."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the command starts: its first write fails, every time
    with subprocess.Popen(
        [FEDHPC, "sites", "show", "devdelta"], stdout=write_end, stderr=subprocess.PIPE
    ) as proc:
        os.close(write_end)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err.decode() and "BrokenPipe" not in err.decode(), err
    assert proc.returncode == 141


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [
        ('name = "broken"\ndialect = "slurm"\narch = "sparc"\n', "arch", "Input should be"),
        ("name = \n", "(syntax)", "Invalid value"),
    ],
)
def test_broken_profile_gives_one_line_naming_file_key_and_reason(
    tmp_path: Path, body: str, key: str, reason: str
) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text(body)
    out = _run("sites", "check", str(bad))
    assert out.returncode == 3  # validation (docs/errors.md)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(bad) in lines[0]
    assert f": {key}: " in lines[0]
    assert reason in lines[0]


def test_broken_user_profile_dir_breaks_sites_list_with_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "mine.toml").write_text(
        'name = "mine"\ndialect = "slurm"\narch = "x86_64"\npartitions = []\n'
        '[charge]\nkind = "node-hours"\n'
    )
    config = tmp_path / "config.toml"
    config.write_text(f'profile_dirs = ["{folder}"]\n')
    out = _run("sites", "list", env={"FEDHPC_CONFIG": str(config)})
    assert out.returncode == 3  # validation (docs/errors.md)
    assert out.stderr.strip() == (
        f"error[profile]: {folder / 'mine.toml'}: partitions: "
        "Tuple should have at least 1 item after validation, not 0"
    )


def test_status_shows_each_estimators_recent_error_under_the_federation() -> None:
    from fedhpc.cli.daemon import _estimator_table

    assert _estimator_table([]) == []
    rows = [
        {
            "site": "devdelta",
            "partition": "gpuA100x4",
            "method": "scheduler",
            "n": 4,
            "median_abs_error_s": 12.4,
            "median_bias_s": -3.0,
        },
        {
            "site": "devdelta",
            "partition": "gpuA100x4",
            "method": "paper",
            "n": 4,
            "median_abs_error_s": 250.0,
            "median_bias_s": 240.0,
        },
    ]
    lines = _estimator_table(rows)
    assert lines[1].startswith("Wait estimators")
    assert lines[2].split() == [
        "SITE",
        "PARTITION",
        "ESTIMATOR",
        "JOBS",
        "MEDIAN",
        "|ERROR|",
        "MEDIAN",
        "BIAS",
        "P10-P90",
        "HELD",
    ]
    assert lines[3].split() == ["devdelta", "gpuA100x4", "scheduler", "4", "12s", "-3s", "-"]
    assert lines[4].split() == ["devdelta", "gpuA100x4", "paper", "4", "250s", "+240s", "-"]
    rows[0] |= {"coverage": 0.75, "scored": 8}
    assert _estimator_table(rows)[3].split()[-3:] == ["75%", "of", "8"]


@pytest.mark.parametrize(
    "argv",
    [
        ("status", "--watch", "--interval", "-1"),
        ("status", "--watch", "--interval", "0"),
        ("status", "--watch", "--interval", "nan"),
        ("events", "--follow", "--interval", "0"),
    ],
)
def test_a_wait_between_updates_that_is_none_is_a_usage_error(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    """`--interval -1` crashed with a traceback (a negative sleep), 0 would poll the daemon in
    a busy loop: both are refused before the daemon is asked anything."""
    out = _run(*argv, env={"FEDHPC_HOME": str(tmp_path)})
    assert out.returncode == 2, out.stderr  # usage (docs/errors.md)
    assert out.stderr.startswith(f"error[usage]: --interval {argv[-1]} is not a wait"), out.stderr
    assert "at least 0.1" in out.stderr and "Traceback" not in out.stderr


def test_sites_list_fits_a_terminal_and_has_json() -> None:
    table = _run("sites", "list")
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 100, table.stdout
    listed = _run("sites", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    profiles = load_profiles()
    assert {r["site"] for r in rows} == set(profiles)
    delta = next(r for r in rows if r["site"] == "delta")
    assert delta["partitions"] == [p.name for p in profiles["delta"].partitions]
    assert delta["center"] == profiles["delta"].center  # whole, where the table cuts it
    assert set(delta["blocked_partitions"]) == set(profiles["delta"].blocked_partitions)


def test_an_event_line_cuts_its_payload_between_pairs_never_inside_a_key() -> None:
    from fedhpc.cli.tasks import _event_line

    payload = {
        "reason": "re-placed to devdelta/gpuA100x4: it starts there sooner",
        "site": "devanvil",
        "attempt": 2,
        "counts": {"completed": 3, "failed": 1},
    }
    event = {"seq": 7, "created_at": "2026-12-01T12:00:00+00:00", "kind": "task.moved"}
    line = _event_line({**event, "subject": "t1-0", "payload": payload})
    shown = line.split("t1-0", 1)[1].strip()
    assert shown.startswith(f"reason={payload['reason']} site=devanvil attempt=2"), line
    assert shown.endswith("(+1 more: --json)") and "counts" not in shown, line
    short = _event_line({**event, "subject": "t1-0", "payload": {"state": "completed"}})
    assert short.endswith("state=completed"), short
    long = _event_line({**event, "subject": "t", "payload": {"why": "x" * 300, "n": 1}})
    assert "why=xxx" in long and long.endswith("…  (+1 more: --json)"), long


def test_status_shows_the_wait_predicted_now_per_partition_shown() -> None:
    """`fedhpc status` prints the daemon's outlook for the partitions its table shows: each
    request's wait and estimator, or "cannot run" (`--json` carries the daemon's answer whole:
    tests/integration/test_ui_outlook.py)."""
    from fedhpc.cli.daemon import outlook_table
    from fedhpc.ops.inspect import inspect_federation
    from tests.unit.test_placement_world import NOW, cpu_partition, gpu_partition, profile, state
    from tests.unit.test_placement_world import site as make_site

    alpha = profile("alpha", gpu_partition("gpu"), cpu_partition("cpu"))
    view = inspect_federation(
        {"alpha": state(alpha)}, {"alpha": make_site(alpha)}, now=NOW, refresh_s=30
    )

    def row(part: str, request: str, wait: float | None, method: str = "") -> dict[str, Any]:
        return {
            "site": "alpha",
            "partition": part,
            "request": request,
            "wait_s": wait,
            "method": method,
        }

    body = {
        "at": NOW.isoformat(),
        "requests": ["1 GPU", "1 node", "4 GPUs"],
        "rows": [
            row("cpu", "1 GPU", None),
            row("cpu", "1 node", 10.0, "paper"),
            row("cpu", "4 GPUs", None),
            row("gpu", "1 GPU", 412.4, "learned"),
            row("gpu", "1 node", 10.0, "paper"),
            row("gpu", "4 GPUs", 10.0, "paper"),
            row("hidden", "1 GPU", 10.0, "paper"),  # not in the view: not printed
        ],
    }
    lines = outlook_table(body, view)
    assert lines[1] == "Wait fedhpc would predict now (placement's, 2026-11-30 12:00:00 UTC):"
    assert lines[2].split() == ["SITE", "PARTITION", "1", "GPU", "1", "NODE", "4", "GPUS"]
    assert [line.split() for line in lines[3:]] == [
        ["alpha", "cpu", "cannot", "run", "10s", "paper", "cannot", "run"],
        ["alpha", "gpu", "412s", "learned", "10s", "paper", "10s", "paper"],
    ]
    assert outlook_table(None, view) == [] and outlook_table({**body, "rows": []}, view) == []
