"""The files a scheduler writes per array element are removed once it ended (issue 40), what
its stderr held appended to the element's own stderr first; each dialect names them as its
`render_array` did. Run through real bash (`test_liveness.Bash`)."""

from __future__ import annotations

from pathlib import Path

from fedhpc.adapters.dialects.lsf import LsfDialect
from fedhpc.adapters.dialects.pbs import PbsDialect
from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain.config import Site
from tests.unit.test_liveness import Bash, devvista

__all__ = ["devvista"]  # the fixture, used by name


async def test_ended_elements_files_go_and_the_schedulers_words_reach_its_stderr(
    devvista: Site, tmp_path: Path
) -> None:
    adapter = SiteAdapter(devvista, Bash(tmp_path))
    arrays = tmp_path / "arrays"
    arrays.mkdir()
    out, err = adapter.array_outputs(str(arrays), "41_0") or ("", "")
    assert (out, err) == (f"{arrays}/41_0.out", f"{arrays}/41_0.err")
    Path(out).write_text("")
    Path(err).write_text("slurmstepd: error: *** JOB 41 CANCELLED DUE TO TIME LIMIT ***\n")
    own = tmp_path / "t1" / "1.err"
    own.parent.mkdir()
    own.write_text("the child's own words\n")
    kept = arrays / "41_1.err"  # an element not ended: not named, not touched
    kept.write_text("x")
    quiet = (f"{arrays}/42_0.out", f"{arrays}/42_0.err", str(tmp_path / "t2" / "1.err"))
    await adapter.clear_array_outputs([(out, err, str(own)), quiet])  # quiet's are missing
    assert not Path(out).exists() and not Path(err).exists()
    assert own.read_text() == (
        "the child's own words\nslurmstepd: error: *** JOB 41 CANCELLED DUE TO TIME LIMIT ***\n"
    )
    assert kept.exists() and not (tmp_path / "t2").exists()
    assert adapter.calls["files"] == 1  # one remote call


def test_each_dialect_names_an_elements_files_as_its_array_script_did() -> None:
    assert SlurmDialect().array_outputs("/a", "7_3") == ("/a/7_3.out", "/a/7_3.err")  # %A_%a
    pbs = PbsDialect().array_outputs("/a", "7[3].srv")
    assert pbs == ("/a/7[3].srv.OU", "/a/7[3].srv.ER")  # PBS's own names for a subjob
    assert LsfDialect().array_outputs("/a", "7[4]") == ("/a/7_4.out", "/a/7_4.err")  # %J_%I


def test_a_job_that_is_no_element_has_no_array_files(devvista: Site, tmp_path: Path) -> None:
    assert SiteAdapter(devvista, Bash(tmp_path)).array_outputs("/a", "41") is None
