"""Job arrays (issue 40): Slurm's array script runs each element's own argv in its own folder
with its own output, every hostile argument inert; element ids map to and from the array's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from fedhpc.adapters.arrays import ArrayJob, array_dialect
from fedhpc.adapters.dialects import get_dialect
from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.domain.job import JobSpec
from fedhpc.orchestrator.observed import intent_job as _found
from fedhpc.orchestrator.records import AttemptRecord, array_name, is_own_job
from tests.injection_corpus import corpus
from tests.unit.array_support import array_member, dev_profile, lost_member, run_element


def _member(i: int, base: Path, arg: str) -> JobSpec:
    return array_member(i, base, arg, partition="shared")


def test_each_element_runs_its_own_argv_in_its_own_folder_every_hostile_argument_inert(
    tmp_path: Path, canary_dir: Path
) -> None:
    args = corpus(canary_dir)
    members = [_member(i, tmp_path, a) for i, a in enumerate(args)]
    script = SlurmDialect().render_array(
        members,
        dev_profile("devanvil"),
        array_name(members[0].name),
        throttle=8,
        output_dir=str(tmp_path),
    )
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert f"#SBATCH --array=0-{len(args) - 1}:1%8" in header
    assert f"#SBATCH --output={tmp_path}/%A_%a.out" in header
    assert "#SBATCH --job-name=fedhpc-tabc-0000-1-array" in header
    assert not any("--chdir" in line for line in header)  # each element goes to its own
    for i, arg in enumerate(args):
        (tmp_path / f"t{i}").mkdir()
        done = run_element(script, SLURM_ARRAY_TASK_ID=str(i))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"t{i}" / "1.out").read_bytes().decode() == arg
    assert not (canary_dir / "fedhpc-canary").exists()
    # An index the array does not have fails loudly, never running another element's work.
    done = run_element(script, SLURM_ARRAY_TASK_ID=str(len(args)))
    assert done.returncode == 97 and "no such array element" in done.stderr


def test_element_ids_map_to_their_array_and_only_schedulers_with_arrays_get_them() -> None:
    slurm = array_dialect(get_dialect("slurm"))
    assert slurm is not None
    assert slurm.element_id("4711", 12) == "4711_12"
    assert slurm.parent_id("4711_12") == "4711" and slurm.parent_id("4711") == "4711"
    assert array_dialect(get_dialect("process")) is None


def test_an_array_name_is_our_own_and_never_an_attempts_name() -> None:
    name = array_name("fedhpc-t0123456789a-0007-1")
    assert name == "fedhpc-t0123456789a-0007-1-array"
    assert is_own_job(name) and is_own_job("fedhpc-t0123456789a-0007-1")
    assert not is_own_job("fedhpc-t0123456789a-0007-1-arrays")


def test_an_array_job_makes_its_members_folders_and_its_output_folder() -> None:
    job = ArrayJob("n-array", [], ["/a", "/b"], "/w/arrays")
    assert (job.throttle, list(job.dirs), job.output_dir) == (256, ["/a", "/b"], "/w/arrays")


class _Slurm:
    """The adapter's element ids, as `SiteAdapter.element_id` gives them for Slurm."""

    element_id = staticmethod(SlurmDialect().element_id)


def test_a_lost_intent_in_an_array_is_found_by_the_arrays_name_never_its_own() -> None:
    def att(n: int, array: str | None, index: int | None) -> AttemptRecord:
        return lost_member(n, "devanvil", "shared", array, index)

    name = array_name("fedhpc-tabc-0000-1")
    adapter = cast(Any, _Slurm())
    found = {name: "4711", "fedhpc-tabc-0009-1": "99"}
    assert _found(att(3, name, 3), found, adapter) == "4711_3"
    assert _found(att(9, None, None), found, adapter) == "99"
    # The array's first member is never taken for a job submitted alone under its own name,
    # nor an array's member for its own name: only the array's name binds it.
    assert _found(att(0, name, 0), {"fedhpc-tabc-0000-1": "5"}, adapter) is None
    assert _found(att(0, None, None), {name: "4711"}, adapter) is None


def test_a_failing_prologue_is_told_in_each_elements_own_stderr(tmp_path: Path) -> None:
    """The prologue (`module load ...`) runs in every element: when it fails, its words reach
    the element's own stderr file, the one `get_result` reads, not only Slurm's %A_%a.err."""
    profile = dev_profile("devanvil")
    broken = profile.conventions.model_copy(
        update={"prologue": ("echo 'module: cuda/99 not found' >&2", "false")}
    )
    profile = profile.model_copy(update={"conventions": broken})
    members = [_member(i, tmp_path, "never") for i in range(2)]
    script = SlurmDialect().render_array(
        members, profile, array_name(members[0].name), throttle=None, output_dir=str(tmp_path)
    )
    assert script.index("#SBATCH --array") < script.index("exec >>")  # directives stay first
    for i in range(2):
        (tmp_path / f"t{i}").mkdir()
        done = run_element(script, SLURM_ARRAY_TASK_ID=str(i))
        assert done.returncode != 0
        assert "cuda/99 not found" in (tmp_path / f"t{i}" / "1.err").read_text()
        assert not (tmp_path / f"t{i}" / "1.out").read_text()  # its argv never ran
