"""Job arrays on LSF (issue 40): `bsub -J 'name[1-N]%T'` runs element i+1 as member i (LSF's
indices start at 1, the index in LSB_JOBINDEX), each in its own folder with its own output,
every hostile argument inert; element ids `123[4]` map to and from the array's, and bjobs'
element rows (recorded output, `tests/fixtures/lsf/`) are found by them."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from fedhpc.adapters.arrays import array_dialect
from fedhpc.adapters.command import BATCH_MARK, CommandResult
from fedhpc.adapters.dialects import get_dialect
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.lsf import LsfDialect
from fedhpc.domain.job import JobSpec, JobState
from fedhpc.orchestrator.array_forming import SIZE_REFUSAL as _SIZE_REFUSAL
from fedhpc.orchestrator.observed import intent_job as _found
from fedhpc.orchestrator.records import array_name
from tests.injection_corpus import corpus
from tests.unit.array_support import (
    array_member,
    lost_member,
    lsf_profile,
    only_our_directives,
    run_element,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "lsf"
NOW = datetime(2025, 11, 27, 10, 0, tzinfo=UTC)


def _member(i: int, base: Path, arg: str) -> JobSpec:
    return array_member(i, base, arg, partition="cpu", account="proj42")


def _run(script: str, index: int) -> subprocess.CompletedProcess[str]:
    return run_element(script, LSB_JOBINDEX=str(index))


def _directives(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#BSUB")]


def test_element_i_plus_1_runs_member_i_in_its_own_folder_every_hostile_argument_inert(
    tmp_path: Path, canary_dir: Path
) -> None:
    args = corpus(canary_dir)
    members = [_member(i, tmp_path, a) for i, a in enumerate(args)]
    name = array_name(members[0].name)
    out = f"{tmp_path}/arrays"
    script = LsfDialect().render_array(members, lsf_profile(), name, throttle=8, output_dir=out)
    header = _directives(script)
    # Indices 1..N (bsub -J: "By default, the job array index starts at one"), at most 8 run.
    assert f"#BSUB -J fedhpc-tabc-0000-1-array[1-{len(args)}:1]%8" in header
    # LSF's own output per element: %J the job id, %I the element's index (bsub -o/-e).
    assert f"#BSUB -o {out}/%J_%I.out" in header and f"#BSUB -e {out}/%J_%I.err" in header
    assert "#BSUB -q cpu" in header and "#BSUB -P proj42" in header
    assert not any(line.startswith("#BSUB -cwd") for line in header)  # each element goes to its own
    # Only our directives: no member's argument ever starts a line of the script.
    benign = LsfDialect().render_array(
        [_member(i, tmp_path, "x") for i in range(len(args))],
        lsf_profile(),
        name,
        throttle=8,
        output_dir=out,
    )
    only_our_directives(script, benign)
    for i, arg in enumerate(args):
        (tmp_path / f"t{i}").mkdir()
        done = _run(script, i + 1)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"t{i}" / "1.out").read_bytes().decode() == arg
    assert not (canary_dir / "fedhpc-canary").exists()
    # LSF sets LSB_JOBINDEX=0 for a job that is no array element, and no index past N exists:
    # either fails loudly, never running another element's work.
    for index in (0, len(args) + 1):
        done = _run(script, index)
        assert done.returncode == 97 and "no such array element" in done.stderr


def test_an_elements_exit_status_and_failing_prologue_are_its_members_own(tmp_path: Path) -> None:
    members = [
        _member(i, tmp_path, "x").model_copy(update={"command": ("bash", "-c", f"exit {i + 3}")})
        for i in range(3)
    ]
    name = "fedhpc-tabc-0000-1-array"
    script = LsfDialect().render_array(
        members, lsf_profile(), name, throttle=None, output_dir=str(tmp_path)
    )
    assert f"#BSUB -J {name}[1-3:1]" in _directives(script)  # no throttle asked: no '%'
    for i in range(3):
        (tmp_path / f"t{i}").mkdir()
        assert _run(script, i + 1).returncode == i + 3
    broken = lsf_profile(prologue=["echo 'module: cuda/99 not found' >&2", "false"])
    script = LsfDialect().render_array(
        members, broken, name, throttle=None, output_dir=str(tmp_path)
    )
    assert script.index("#BSUB -J") < script.index("exec >>")  # directives stay first
    assert _run(script, 2).returncode != 0
    assert "cuda/99 not found" in (tmp_path / "t1" / "1.err").read_text()
    assert not (tmp_path / "t0" / "1.err").read_text()  # another element's files untouched


def test_element_ids_map_to_their_array_and_back() -> None:
    lsf = array_dialect(get_dialect("lsf"))
    assert lsf is not None
    assert lsf.element_id("5124", 0) == "5124[1]"  # members count from 0, LSF from 1
    assert lsf.element_id("5124", 3) == "5124[4]"
    assert lsf.parent_id("5124[4]") == "5124"
    assert lsf.parent_id("5124") == "5124" and lsf.parent_id("5110") == "5110"
    with pytest.raises(ValueError, match="not a LSF array id"):
        lsf.element_id("5124[1]", 1)


def test_one_element_is_cancelled_and_asked_about_by_its_own_id() -> None:
    d = LsfDialect()
    assert d.cancel_command(["5124[3]"]).argv == ("bkill", "5124[3]")
    status = d.status_command([d.parent_id("5124[3]")]).argv
    assert status[:2] == ("bjobs", "-a") and status[-1] == "5124"  # every element listed


def test_status_and_accounting_find_each_element_by_its_own_id() -> None:
    """bjobs -json prints an element as JOBID '5124' with JOBINDEX '2' (bjobs_status.json)."""
    d = LsfDialect()
    ids = [d.element_id("5124", i) for i in range(4)]
    live = {o.key: o for o in d.parse_status(CommandResult(0, _fixture("bjobs_status.json"), ""))}
    assert [live[i].state for i in ids] == [
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.RUNNING,
        JobState.PENDING,
    ]
    assert (live["5124[2]"].exit_code, live["5124[2]"].job_id) == (2, "5124")
    assert live["5124[4]"].reason == "The job array has reached its job slot limit"
    assert live["5110"].element_id is None  # a job of its own keeps its id (JOBINDEX 0)
    answer = CommandResult(0, _fixture("bjobs_accounting.json"), "")
    records = {r.key: r for r in d.parse_accounting(answer, now=NOW)}
    assert (records["5124[2]"].exit_code, records["5124[2]"].state) == (2, JobState.FAILED)
    assert records["5124[2]"].end == datetime(2025, 11, 27, 9, 12, tzinfo=UTC)
    assert records["5100"].key == "5100"


def test_an_element_id_printed_in_jobid_is_its_key_too() -> None:
    # LSB_BJOBS_DISPLAY_ENH=Y (lsf.conf) prints an element's JOBID as '77[3]'.
    out = '{"COMMAND":"bjobs","JOBS":1,"RECORDS":[{"JOBID":"77[3]","STAT":"RUN","QUEUE":"q"}]}'
    [obs] = LsfDialect().parse_status(CommandResult(0, out, ""))
    assert (obs.key, obs.job_id, obs.array_index) == ("77[3]", "77", "3")


def _found_answer(text: str) -> CommandResult:
    """The batched per-name lookup's answer (`find_command`) with `text` as section n0's."""
    return CommandResult(0, f"{BATCH_MARK} begin n0\n{text}{BATCH_MARK} end n0 0\n", "")


class _Lsf:
    """The adapter's element ids, as `SiteAdapter.element_id` gives them for LSF."""

    def element_id(self, job_id: str, index: int) -> str:
        return LsfDialect().element_id(job_id, index)


def test_a_lost_intent_in_an_lsf_array_is_bound_to_its_element() -> None:
    """bjobs -J <array's name> lists the array's elements as 'name[i]' (bjobs_find_array.txt):
    the array is found under its own name, and a member by its index."""
    d = LsfDialect()
    name = array_name("fedhpc-tabc-0000-1")
    assert d.find_command([name]).commands >= 1
    found = d.parse_find(_found_answer(_fixture("bjobs_find_array.txt")))
    assert found == {name: "5124"}
    enh = d.parse_find(_found_answer(f"5124[1] {name}[1]\n5124[2] {name}[2]\n"))
    assert enh == {name: "5124"}  # ids printed as '123[i]' (LSB_BJOBS_DISPLAY_ENH=Y)
    assert d.parse_find(_found_answer("5110 fedhpc-tabc-0009-1\n")) == {
        "fedhpc-tabc-0009-1": "5110"
    }
    att = lost_member(2, "lsfsite", "cpu", name, 2)
    assert _found(att, found, cast(Any, _Lsf())) == "5124[3]"


def test_a_refused_array_is_told_apart_by_lsfs_words() -> None:
    """An index past MAX_JOB_ARRAY_SIZE (lsb.params, default 1000) is LSBE_BIG_IDX: bsub says
    "Job array index too large. Job not submitted.", a size refusal (smaller arrays may
    pass); a bad project is not."""
    d = LsfDialect()
    with pytest.raises(SchedulerRejected) as too_big:
        d.parse_submit(CommandResult(255, "", _fixture("bsub_array_too_large.txt")))
    assert "Job array index too large" in too_big.value.message
    assert _SIZE_REFUSAL.search(too_big.value.message) is not None
    with pytest.raises(SchedulerRejected) as project:
        d.parse_submit(CommandResult(255, "", _fixture("bsub_reject.txt")))
    assert _SIZE_REFUSAL.search(project.value.message) is None
    assert d.parse_submit(CommandResult(0, _fixture("bsub_ok.txt"), "")) == "5123"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()
