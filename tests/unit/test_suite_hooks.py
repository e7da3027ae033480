"""The suite's own hooks (tests/conftest.py), run by pytest's `pytester` in a small inner session:
a passing test over 3x its time budget fails, and a run that leaves new files in the checkout's
root fails. The inner session loads the real module (`-p tests.conftest`); its rootdir is
pytester's folder (an ini file of its own), which the left-files check reads as the root."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fedhpc_dev.devfed.instances import instance_root, write_instance
from fedhpc_dev.devfed.plan import Instance
from tests import conftest as suite

pytest_plugins = ["pytester"]

_CHECKOUT = str(Path(suite.__file__).resolve().parent.parent)  # where `tests.conftest` imports
_MESSAGE = "over 3x its {} s budget; make it faster or give it @pytest.mark.budget(seconds)"
_LEFT = "FAILED: the run left files in the checkout's root: "


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """A folder for an inner run: its own rootdir (the ini), markers checked strictly."""
    pytester.makeini(
        "[pytest]\naddopts = -p tests.conftest --strict-markers\n"
        "asyncio_default_fixture_loop_scope = function\n"  # as pyproject.toml (pytest-asyncio)
    )
    return pytester


def _run(inner: pytest.Pytester, *args: str) -> dict[str, pytest.TestReport]:
    """Run the inner session in this process; each test's call report by its name."""
    recorder = inner.inline_run(*args)
    reports = recorder.getreports("pytest_runtest_logreport")
    return {r.nodeid.rsplit("::", 1)[1]: r for r in reports if r.when == "call"}


SLOW = """
import time

import pytest

@pytest.mark.budget(0.1)
def test_slow_tight():
    time.sleep(0.4)

@pytest.mark.budget(10)
def test_slow_loose():
    time.sleep(0.4)

def test_slow_unmarked():
    time.sleep(0.4)

def test_quick():
    pass

@pytest.mark.budget(0.1)
def test_slow_and_wrong():
    time.sleep(0.4)
    assert 1 == 2
"""


def test_a_passing_test_over_3x_its_budget_fails_saying_so(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_inner_budget=SLOW)
    reports = _run(inner, "-k", "not unmarked")
    tight = reports["test_slow_tight"]
    assert tight.failed
    # The time it took is the machine's (0.4 s asleep, more on a loaded one): only its form.
    assert re.match(r"passed but took \d+\.\d s, ", str(tight.longrepr)), tight.longrepr
    assert _MESSAGE.format("0.1") in str(tight.longrepr)
    # Within its budget (a mark of 10 s, or the unit default of 20 s) a test passes.
    assert reports.keys() == {
        "test_slow_tight",
        "test_slow_loose",
        "test_quick",
        "test_slow_and_wrong",
    }
    assert reports["test_slow_loose"].passed
    assert reports["test_quick"].passed
    # A failing test keeps its own failure: the budget turns only passes into failures.
    wrong = reports["test_slow_and_wrong"]
    assert wrong.failed
    assert "assert 1 == 2" in str(wrong.longrepr)
    assert "passed but took" not in str(wrong.longrepr)


# A test that lowers a default lowers it for itself too (the outer session runs the same module's
# hook): its own mark keeps it out of reach.
@pytest.mark.budget(20)
def test_the_budget_mark_raises_the_default_limit(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default for a unit test, lowered from 20 s so that a 0.4 s test is over 3x it.
    monkeypatch.setattr(suite, "_BUDGET_UNIT", 0.1)
    inner.makepyfile(test_inner_budget=SLOW)
    reports = _run(inner, "-k", "unmarked or loose or quick")
    assert reports["test_slow_unmarked"].failed
    assert _MESSAGE.format("0.1") in str(reports["test_slow_unmarked"].longrepr)
    assert reports["test_slow_loose"].passed  # budget(10): the mark, not the default
    assert reports["test_quick"].passed


@pytest.mark.budget(20)
def test_a_test_under_integration_has_the_integration_default(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(suite, "_BUDGET_UNIT", 0.1)
    monkeypatch.setattr(suite, "_BUDGET_INTEGRATION", 0.05)
    inner.mkdir("integration")
    slow = "import time\n\ndef test_slow_here():\n    time.sleep(0.4)\n"
    (inner.path / "integration" / "test_inner_integration.py").write_text(slow)
    report = _run(inner)["test_slow_here"]
    assert report.failed
    assert _MESSAGE.format("0.05") in str(report.longrepr)
    monkeypatch.setattr(suite, "_BUDGET_INTEGRATION", 10.0)
    assert _run(inner)["test_slow_here"].passed  # the unit default (0.1 s) does not apply


def test_a_run_that_leaves_a_file_in_the_root_fails(inner: pytest.Pytester) -> None:
    # What a Slurm job without an output path does: slurm-<id>.out in the cwd (the root).
    inner.makepyfile(
        test_inner_left="""
        from pathlib import Path

        def test_submits():
            Path("slurm-42.out").write_text("job output")
        """
    )
    result = inner.runpytest()
    assert (inner.path / "slurm-42.out").is_file()  # the inner root is pytester's folder
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([_LEFT + "slurm-42.out"])


def test_the_message_lists_ten_files_and_counts_the_rest(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_inner_many="""
        from pathlib import Path

        def test_submits_many():
            for i in range(12):
                Path(f"slurm-{i:02}.out").write_text("")
        """
    )
    result = inner.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    shown = ", ".join(f"slurm-{i:02}.out" for i in range(10))
    result.stdout.fnmatch_lines([f"{_LEFT}{shown} and 2 more"])


def test_a_run_that_leaves_nothing_new_in_the_root_passes(inner: pytest.Pytester) -> None:
    (inner.path / "kept.out").write_text("there before the run")
    inner.makepyfile(
        test_inner_clean="""
        from pathlib import Path

        def test_cleans_up(tmp_path):
            (tmp_path / "slurm-42.out").write_text("job output")  # not the root
            Path("kept.out").write_text("rewritten")  # there before the run
            Path("gone.out").write_text("")
            Path("gone.out").unlink()
        """
    )
    result = inner.runpytest()
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "left files" not in result.stdout.str()
    assert (inner.path / ".pytest_cache").is_dir()  # a tool's cache is no new file


@pytest.mark.budget(60)
def test_under_xdist_workers_run_the_budget_and_the_controller_checks_the_root(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget is applied where a test runs (a worker) and its failure reaches the
    controller; the root is read by the controller alone, before the workers start and after
    they end, so a file a worker leaves fails the run once."""
    path = os.getenv("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", _CHECKOUT + (os.pathsep + path if path else ""))
    inner.makepyfile(
        test_inner_xdist="""
        import time
        from pathlib import Path

        import pytest

        @pytest.mark.budget(0.1)
        def test_slow():
            time.sleep(0.4)

        def test_submits():
            Path("slurm-42.out").write_text("job output")

        def test_quick():
            pass
        """
    )
    result = inner.runpytest_subprocess("-n", "2", timeout=120)
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_slow*", f"*{_MESSAGE.format('0.1')}*"])
    result.stdout.fnmatch_lines([_LEFT + "slurm-42.out"])
    assert result.stdout.str().count("left files") == 1


def _slurm_module(seen: Path, name: str) -> str:
    """An inner integration module whose three tests note their worker and devfed folder."""
    return f"""
import os
from pathlib import Path

import pytest

@pytest.mark.parametrize("n", [1, 2, 3])
def test_notes(n):
    note = os.environ["PYTEST_XDIST_WORKER"] + " " + os.environ["FEDHPC_DEVFED_DIR"]
    Path({str(seen)!r}, "{name}-" + str(n)).write_text(note)
"""


BIGGER = """
import time

import pytest

@pytest.mark.parametrize("n", range(8))
def test_waits(n):
    time.sleep(0.1)
"""


@pytest.mark.budget(60)
@pytest.mark.parametrize(("workers", "first"), [(1, 1), (2, 1), (2, 3)])
def test_under_xdist_each_slurm_half_has_a_worker_and_a_devfed_instance_of_its_own(
    inner: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    workers: int,
    first: int,
) -> None:
    """The two Slurm halves start at once on two workers, ahead of a bigger parallel-safe
    module (xdist would start the bigger scopes first); every test of a half sees its
    instance's folder (`{folder}-2` for "slurm-b", or the instance after the one
    FEDHPC_DEVFED_DIR names). One worker runs both on one instance."""
    path = os.getenv("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", _CHECKOUT + (os.pathsep + path if path else ""))
    fed = tmp_path / "fed"
    start = instance_root(fed, first)
    start.mkdir(parents=True)
    write_instance(start, Instance(first, fed if first > 1 else None))
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(start))
    seen = tmp_path / "seen"
    seen.mkdir()
    inner.mkpydir("integration")
    b = sorted(suite.SLURM_B)[0]  # a module of the "slurm-b" half; any other is "slurm-a"
    inner.makepyfile(
        **{
            f"integration/{b}": _slurm_module(seen, "b"),
            "integration/test_slurm_site": _slurm_module(seen, "a"),
            "integration/test_mcp_fuzz": BIGGER,
        }
    )
    result = inner.runpytest_subprocess("-n", str(workers), timeout=120)
    result.assert_outcomes(passed=14)
    notes = {p.name: p.read_text().split() for p in seen.iterdir()}
    halves = {h: {tuple(v) for k, v in notes.items() if k.startswith(h)} for h in "ab"}
    assert all(len(h) == 1 for h in halves.values()), halves  # one worker, one folder each
    (a_worker, a_dir), (b_worker, b_dir) = halves["a"].pop(), halves["b"].pop()
    if workers == 1:
        assert a_worker == b_worker and a_dir == b_dir
    else:
        assert a_worker != b_worker
        assert (a_dir, b_dir) == (str(start), str(instance_root(fed, first + 1)))


BURN = """
import subprocess
import sys

BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.8: pass"

def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)

def test_idle():
    pass
"""


@pytest.mark.budget(60)
def test_with_test_cpu_each_test_is_charged_the_cpu_of_what_it_started(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FEDHPC_TEST_CPU=1 under xdist: a worker's cgroup holds the processes its tests start,
    each report carries its CPU to the controller, and the summary lists the test whose child
    burnt 0.8 s first, with at least that, per scope, per test and per file."""
    path = os.getenv("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", _CHECKOUT + (os.pathsep + path if path else ""))
    monkeypatch.setenv("FEDHPC_TEST_CPU", "1")
    inner.makepyfile(test_inner_cpu=BURN)
    result = inner.runpytest_subprocess("-n", "2", timeout=120)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    if "CPU not measured" in out and not os.getenv("FEDHPC_REQUIRE_REAL"):
        pytest.skip("no cgroup to join here (root and cgroup cpuacct or v2 needed)")
    assert "most CPU" in out, out
    ranked = out.split("most CPU", 1)[1].splitlines()[1:3]
    first = re.match(r"\s*(\d+\.\d) s  \S+::test_burns_in_a_child$", ranked[0])
    assert first and float(first.group(1)) >= 0.8, ranked
    assert ranked[1].endswith("::test_idle"), ranked
    assert re.search(r" s  cpu +\d+\.\d s +2 tests  unit tests", out), out
    per_file = out.split("most CPU per file", 1)[1].splitlines()[1]
    both = re.match(r"\s*(\d+\.\d) s +2 tests  test_inner_cpu.py$", per_file)
    assert both and float(both.group(1)) >= 0.8, per_file


def test_without_a_writable_cgroup_nothing_is_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import cpu_usage

    monkeypatch.setattr(cpu_usage, "V1", Path("/nonexistent/cpuacct"))
    monkeypatch.setattr(cpu_usage, "_v2_parent", lambda: None)
    assert cpu_usage.CpuGroup.join("fedhpc-tests-never") is None
