"""Several jobs in one remote call (issue 33): `SiteAdapter.submit_many` on a process-mode dev
site, through the real local transport, bash and the process scheduler; and the answer's
parser on answers cut short."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.site import SubmittedJob, WorkdirFailed, open_adapter
from fedhpc.adapters.submit_batch import (
    JOB_MARK,
    SubmitEntry,
    split_submissions,
    submissions_command,
)
from fedhpc.domain.job import JobSpec, JobState, Shape
from fedhpc.errors import UsageError
from fedhpc.profiles import load_federation
from tests.injection_corpus import corpus


@pytest.fixture
def process_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "devfed"
    monkeypatch.setenv("FEDHPC_DEVFED", "process")
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(root))
    return root


def _job(name: str, out: Path, *, command: tuple[str, ...] = ("true",), **kw: object) -> JobSpec:
    fields: dict[str, object] = {
        "name": name,
        "command": command,
        "partition": "ai",
        "account": "fedhpc-gpu",
        "shape": Shape(cpus=1, wall_time_s=60),
        "stdout": f"{out}/%j.out",
        "workdir": str(out),
    }
    fields.update(kw)
    return JobSpec.model_validate(fields)


async def test_one_call_submits_each_job_and_answers_for_each_alone(
    process_mode: Path, canary_dir: Path
) -> None:
    site = load_federation()["devanvil"]
    storage = Path(site.profile.storage[0].path)
    out = storage / "w"
    blocker = storage / "a-file"
    adapter = open_adapter(site)
    try:
        await adapter.probe()
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("")
        hostile = tuple(corpus(canary_dir))
        jobs = [
            (_job("fedhpc-a-1", out), [str(out)]),
            (_job("fedhpc-b-1", out, account="nope"), [str(out)]),  # the scheduler refuses
            (_job("fedhpc-c-1", out), [str(blocker / "sub")]),  # its folder cannot be made
            (_job("fedhpc-d-1", out, partition="nosuch"), [str(out)]),  # cannot be rendered
            (_job("fedhpc-e-1", out, command=("printf", "%s\\n", *hostile)), [str(out)]),
        ]
        before = adapter.calls["submit"]
        got = await adapter.submit_many(jobs)
        assert adapter.calls["submit"] == before + 1  # one remote call for all five
        a, b, c, d, e = got
        assert isinstance(a, SubmittedJob) and isinstance(e, SubmittedJob)
        assert a.job_id != e.job_id
        assert isinstance(b, SchedulerRejected) and "invalid account 'nope'" in b.message
        assert isinstance(c, WorkdirFailed) and c.message.startswith(WorkdirFailed.PREFIX)
        assert isinstance(d, UsageError) and "nosuch" in d.message
        found = await adapter.find(["fedhpc-a-1", "fedhpc-b-1", "fedhpc-c-1", "fedhpc-e-1"])
        assert found == {"fedhpc-a-1": a.job_id, "fedhpc-e-1": e.job_id}
        with anyio.fail_after(60):  # the hostile argv ran as data, every string intact
            while not (path := out / f"{e.job_id}.out").exists() or not path.read_text():
                await anyio.sleep(0.1)
            while len(path.read_text().splitlines()) < len("\n".join(hostile).splitlines()):
                await anyio.sleep(0.1)
        assert path.read_bytes().decode() == "".join(f"{h}\n" for h in hostile)
        recs = await adapter.accounting([a.job_id])
        assert recs and recs[0].state in {JobState.COMPLETED, JobState.RUNNING, JobState.PENDING}
    finally:
        await adapter.transport.aclose()


async def test_a_job_alone_goes_in_the_same_cut_proof_call(process_mode: Path) -> None:
    site = load_federation()["devanvil"]
    out = Path(site.profile.storage[0].path) / "w"
    adapter = open_adapter(site)
    try:
        await adapter.probe()
        (one,) = await adapter.submit_many([(_job("fedhpc-s-1", out), [str(out)])])
        assert isinstance(one, SubmittedJob)
        assert await adapter.find(["fedhpc-s-1"]) == {"fedhpc-s-1": one.job_id}
    finally:
        await adapter.transport.aclose()


def test_an_answer_cut_short_leaves_the_jobs_after_the_cut_unknown() -> None:
    cmd = Command(("sbatch", "--parsable"), stdin="#!/bin/bash\ntrue\n")
    script, mark = submissions_command([SubmitEntry(cmd), SubmitEntry(cmd)], timeout_s=10)
    assert script.argv == ("bash", "-s") and not script.idempotent
    assert mark.startswith(JOB_MARK) and mark in (script.stdin or "")
    answer = (
        f"{mark} begin 0\n17\n\n{mark} stderr 0\nwarn\n\n{mark} end 0 0\n"
        f"{mark} begin 1\n18\n"  # the call ended here: job 1 may or may not exist
    )
    first, second = split_submissions(answer, 2, mark)
    assert first is not None
    assert (first.returncode, first.stdout, first.stderr) == (0, "17\n", "warn\n")
    assert second is None
    assert split_submissions("", 2, mark) == [None, None]


def test_each_script_travels_intact_whatever_its_lines() -> None:
    """A script that ends without a newline, or holds lines like another call's markers and
    delimiters, reaches the scheduler as written (bash runs the call; `cat` stands in for
    sbatch and prints what it was given)."""
    other = f"{JOB_MARK}-0123456789abcdef"
    texts = [
        "#!/bin/bash\necho one",
        f"#!/bin/bash\n{other} end 0 0\n{other} begin 1\nEOF\n'EOF'\nfedhpc_eof_x\n",
    ]
    entries = [SubmitEntry(Command(("cat",), stdin=t)) for t in texts]
    command, mark = submissions_command(entries, timeout_s=10)
    done = subprocess.run(
        list(command.argv), input=command.stdin, capture_output=True, text=True, check=True
    )
    first, second = split_submissions(done.stdout, 2, mark)
    assert first is not None and first.stdout == "#!/bin/bash\necho one\n"
    assert second is not None and second.stdout == texts[1]


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_call_whose_input_stops_part_way_submits_nothing(tmp_path: Path, jobs: int) -> None:
    """The daemon killed while it writes a submission call (of one job or several) leaves bash
    a prefix of the call: at every cut, no job reaches the scheduler (`tee` stands in for
    sbatch and keeps a file per job it is given), never a job script cut short."""
    got = tmp_path / "got"
    got.mkdir()
    entries = [
        SubmitEntry(Command(("tee", str(got / f"job{i}")), stdin=f"#!/bin/bash\necho {i}\n"))
        for i in range(jobs)
    ]
    command, _ = submissions_command(entries, timeout_s=10)
    text = command.stdin or ""
    # Every cut before the last line is whole (all but its newline is the whole call).
    cuts = sorted({*range(0, len(text) - 1, 7), len(text) - 2, len(text) - 3})
    for cut in cuts:
        subprocess.run(["bash", "-s"], input=text[:cut].encode(), capture_output=True, check=False)
        assert not any(got.iterdir()), f"a job was submitted from a call cut at {cut}"
    subprocess.run(["bash", "-s"], input=text, capture_output=True, text=True, check=True)
    assert sorted(p.name for p in got.iterdir()) == [f"job{i}" for i in range(jobs)]
