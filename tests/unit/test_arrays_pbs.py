"""Job arrays on PBS (issue 40): `qsub -J 0-N%T` runs each subjob's own argv in its own folder
with its own output, every hostile argument inert; subjob ids `123[4].server` map to and from
the array's, and qstat's subjob rows are found by them."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from fedhpc.adapters.arrays import array_dialect
from fedhpc.adapters.command import CommandResult
from fedhpc.adapters.dialects import get_dialect
from fedhpc.adapters.dialects.pbs import PbsDialect
from fedhpc.domain.job import JobSpec, JobState
from fedhpc.orchestrator.observed import intent_job as _found
from fedhpc.orchestrator.records import array_name
from tests.injection_corpus import corpus
from tests.unit.array_support import (
    array_member,
    dev_profile,
    lost_member,
    only_our_directives,
    run_element,
)

QSTAT = Path(__file__).parent.parent / "fixtures" / "pbs" / "qstat_jobs.json"


def _member(i: int, base: Path, arg: str) -> JobSpec:
    return array_member(i, base, arg, partition="prod", account="fedhpc-gpu")


def _run(script: str, index: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_element(script, PBS_ARRAY_INDEX=str(index), PBS_O_WORKDIR=str(cwd))


def test_each_subjob_runs_its_own_argv_in_its_own_folder_every_hostile_argument_inert(
    tmp_path: Path, canary_dir: Path
) -> None:
    args = corpus(canary_dir)
    members = [_member(i, tmp_path, a) for i, a in enumerate(args)]
    name = array_name(members[0].name)
    script = PbsDialect().render_array(
        members, dev_profile("devpolaris"), name, throttle=8, output_dir=f"{tmp_path}/arrays"
    )
    header = [line for line in script.splitlines() if line.startswith("#PBS")]
    assert f"#PBS -J 0-{len(args) - 1}:1%8" in header
    # A folder as -o/-e: each subjob's own files land in it ('<subjob id>.OU', '.ER').
    assert f"#PBS -o {tmp_path}/arrays/" in header and f"#PBS -e {tmp_path}/arrays/" in header
    assert "#PBS -N fedhpc-tabc-0000-1-array" in header
    assert "#PBS -q prod" in header and "#PBS -A fedhpc-gpu" in header
    # Only our directives: no member's argument ever starts a line of the script.
    benign = PbsDialect().render_array(
        [_member(i, tmp_path, "x") for i in range(len(args))],
        dev_profile("devpolaris"),
        name,
        throttle=8,
        output_dir=f"{tmp_path}/arrays",
    )
    only_our_directives(script, benign)
    for i, arg in enumerate(args):
        (tmp_path / f"t{i}").mkdir()
        done = _run(script, i, tmp_path)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"t{i}" / "1.out").read_bytes().decode() == arg
    assert not (canary_dir / "fedhpc-canary").exists()
    # An index the array does not have fails loudly, never running another element's work.
    done = _run(script, len(args), tmp_path)
    assert done.returncode == 97 and "no such array element" in done.stderr


def test_a_subjobs_exit_status_is_its_members_own(tmp_path: Path) -> None:
    members = [
        _member(i, tmp_path, "x").model_copy(update={"command": ("bash", "-c", f"exit {i}")})
        for i in range(3)
    ]
    script = PbsDialect().render_array(
        members,
        dev_profile("devpolaris"),
        "fedhpc-tabc-0000-1-array",
        throttle=None,
        output_dir=str(tmp_path),
    )
    assert "#PBS -J 0-2:1" in script.splitlines()  # no throttle asked: no '%'
    for i in range(3):
        (tmp_path / f"t{i}").mkdir()
        assert _run(script, i, tmp_path).returncode == i


def test_an_array_of_fewer_than_two_subjobs_is_refused(tmp_path: Path) -> None:
    # qsub -J X-Y needs X < Y; the submitter never forms one (arrays have >= 2 members).
    with pytest.raises(ValueError, match="at least 2"):
        PbsDialect().render_array(
            [_member(0, tmp_path, "x")],
            dev_profile("devpolaris"),
            "n-array",
            throttle=None,
            output_dir="/o",
        )


def test_subjob_ids_map_to_their_array_and_back() -> None:
    pbs = array_dialect(get_dialect("pbs"))
    assert pbs is not None
    assert pbs.element_id("4822[].pbs01", 3) == "4822[3].pbs01"
    assert pbs.element_id("4822[]", 0) == "4822[0]"  # a server that prints no '.server'
    assert pbs.parent_id("4822[3].pbs01") == "4822[].pbs01"
    assert pbs.parent_id("4822[].pbs01") == "4822[].pbs01"
    assert pbs.parent_id("4810.pbs01") == "4810.pbs01"
    with pytest.raises(ValueError, match="not a PBS array id"):
        pbs.element_id("4810.pbs01", 1)
    with pytest.raises(ValueError, match="not a PBS array id"):
        pbs.element_id("4822[1].pbs01", 1)


def test_status_and_accounting_find_each_subjob_by_its_own_id() -> None:
    d = PbsDialect()
    result = CommandResult(0, QSTAT.read_text(), "")
    ids = [d.element_id("4822[].pbs01", i) for i in range(4)]
    live = {o.key: o for o in d.parse_status(result)}
    assert [live[i].state for i in ids] == [
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.RUNNING,
        JobState.PENDING,
    ]
    assert live[ids[1]].exit_code == 2
    assert {d.parent_id(i) for i in ids} == {"4822[].pbs01"}  # one qstat for the whole array
    records = {r.key: r for r in d.parse_accounting(result)}
    assert records[ids[1]].end == datetime(2025, 11, 27, 9, 12, 30, tzinfo=UTC)
    assert (records[ids[1]].exit_code, records[ids[1]].state) == (2, JobState.FAILED)
    assert records["4810.pbs01"].key == "4810.pbs01"  # a job of its own keeps its id


def test_one_subjob_is_cancelled_and_asked_about_by_its_own_id() -> None:
    d = PbsDialect()
    assert d.cancel_command(["4822[3].pbs01"]).argv == ("qdel", "4822[3].pbs01")
    assert d.status_command(["4822[].pbs01"]).argv[-1] == "4822[].pbs01"
    assert "-t" in d.status_command(["4822[].pbs01"]).argv  # every subjob listed


class _Pbs:
    """The adapter's element ids, as `SiteAdapter.element_id` gives them for PBS."""

    element_id = staticmethod(PbsDialect().element_id)


def test_a_lost_intent_in_a_pbs_array_is_bound_to_its_subjob() -> None:
    name = array_name("fedhpc-tabc-0000-1")
    att = lost_member(2, "devpolaris", "prod", name, 2)
    # qselect -x -N finds the array by its name as '123[].server'.
    assert _found(att, {name: "77[].devpolaris"}, cast(Any, _Pbs())) == "77[2].devpolaris"
