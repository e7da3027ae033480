"""Job arrays at an LSF site, end to end without LSF (none runs on this machine, and none can be
installed): the real `SiteAdapter` with the LSF dialect, over the local transport and bash, hands
its scripts to a stand-in `bsub` that answers as LSF 10.1 does and runs each array element at
once with LSB_JOBINDEX set (psij-python's way: fake scheduler commands, never mocks). The
orchestrator then sends a group's alike children there as `bsub -J 'name[1-N]'` arrays, and
halves an array LSF refuses for its size ("Job array index too large", MAX_JOB_ARRAY_SIZE)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.arrays import ArrayJob
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.lsf import LsfDialect
from fedhpc.adapters.site import SiteAdapter, SubmittedJob
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import JobSpec, JobState
from fedhpc.domain.site import Health, TransportSpec
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest
from fedhpc.orchestrator.records import array_name
from fedhpc.store import Store
from tests.injection_corpus import corpus
from tests.unit.array_support import array_member, lsf_profile
from tests.unit.test_placement_world import state
from tests.unit.test_slow_site import FAST, LIMIT_S, SLOW, _Site, _world

# bsub(1) reads the script from stdin. Job ids count from 5124 (FAKE_LSF_DIR/last); an array
# whose last index passes FAKE_LSF_MAX is refused as mbatchd refuses it (LSBE_BIG_IDX);
# otherwise each element runs now, its LSF output at its -o/-e path (%J: job id, %I: index).
FAKE_BSUB = r"""#!/bin/bash
set -u
dir=$FAKE_LSF_DIR
script=$(cat; echo x); script=${script%x}
field() { sed -n "s/^#BSUB $1 //p" <<<"$script" | head -n 1; }
spec=$(field -J)
if [[ $spec =~ \[([0-9]+)-([0-9]+)(:[0-9]+)?\] ]]; then
  first=${BASH_REMATCH[1]}; last=${BASH_REMATCH[2]}
else
  first=0; last=0
fi
if (( last > FAKE_LSF_MAX )); then
  echo "Job array index too large. Job not submitted." >&2
  exit 255
fi
id=$(( $(cat "$dir/last" 2>/dev/null || echo 5123) + 1 ))
echo "$id" >"$dir/last"
printf '%s' "$script" >"$dir/$id.sh"
echo "Job <$id> is submitted to queue <$(field -q)>."
for (( i = first; i <= last; i++ )); do
  o=$(sed "s/%J/$id/g; s/%I/$i/g" <<<"$(field -o)")
  e=$(sed "s/%J/$id/g; s/%I/$i/g" <<<"$(field -e)")
  LSB_JOBID=$id LSB_JOBINDEX=$i bash "$dir/$id.sh" >>"$o" 2>>"$e" </dev/null || true
done
"""


def _lsf_transport(tmp_path: Path, max_size: int) -> LocalTransport:
    """The local transport, with the stand-in bsub first on PATH."""
    bindir, state_dir = tmp_path / "bin", tmp_path / "lsf"
    bindir.mkdir(exist_ok=True)
    state_dir.mkdir(exist_ok=True)
    bsub = bindir / "bsub"
    bsub.write_text(FAKE_BSUB)
    bsub.chmod(0o755)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "FAKE_LSF_DIR": str(state_dir),
        "FAKE_LSF_MAX": str(max_size),
    }
    return LocalTransport(TransportSpec(kind="local", env=env))


def _member(i: int, base: Path, arg: str) -> JobSpec:
    return array_member(i, base, arg, partition="cpu", env={})


async def test_one_bsub_runs_every_member_as_its_own_element(
    tmp_path: Path, canary_dir: Path
) -> None:
    args = corpus(canary_dir)
    members = [_member(i, tmp_path, a) for i, a in enumerate(args)]
    dirs = [str(tmp_path / f"t{i}") for i in range(len(args))]
    arrays = str(tmp_path / "arrays")
    site = Site(lsf_profile(), UserSiteConfig())
    adapter = SiteAdapter(site, _lsf_transport(tmp_path, 1000))
    job = ArrayJob(array_name(members[0].name), members, dirs, arrays, throttle=8)
    got = await adapter.submit_many([job])
    assert adapter.submit_commands == 1  # one bsub for the whole array
    assert [g.job_id for g in got if isinstance(g, SubmittedJob)] == [
        f"5124[{i + 1}]" for i in range(len(args))
    ]
    assert {adapter.parent_id(g.job_id) for g in got if isinstance(g, SubmittedJob)} == {"5124"}
    for i, arg in enumerate(args):
        assert (tmp_path / f"t{i}" / "1.out").read_bytes().decode() == arg
    assert not (canary_dir / "fedhpc-canary").exists()
    # LSF's own files, one pair per element, in the arrays folder the call made.
    assert sorted(p.name for p in Path(arrays).iterdir()) == sorted(
        f"5124_{i}.{ext}" for i in range(1, len(args) + 1) for ext in ("out", "err")
    )


async def test_an_array_past_max_job_array_size_is_refused_for_every_member(
    tmp_path: Path,
) -> None:
    members = [_member(i, tmp_path, "x") for i in range(4)]
    dirs = [str(tmp_path / f"t{i}") for i in range(4)]
    adapter = SiteAdapter(Site(lsf_profile(), UserSiteConfig()), _lsf_transport(tmp_path, 3))
    job = ArrayJob("fedhpc-tabc-0000-1-array", members, dirs, str(tmp_path / "arrays"))
    got = await adapter.submit_many([job])
    refused = [g for g in got if isinstance(g, SchedulerRejected)]
    assert len(refused) == len(got) == 4
    assert all("Job array index too large" in g.message for g in refused)
    assert not (tmp_path / "t0" / "1.out").exists()  # nothing ran


def _lsf_site(tmp_path: Path, max_size: int) -> type[_Site]:
    """test_slow_site's slow site, its scheduler LSF: every submission goes through a real
    LSF `SiteAdapter` (the stand-in bsub with MAX_JOB_ARRAY_SIZE `max_size`), task folders
    under `tmp_path`."""

    class LsfSite(_Site):
        dialect: Any = None  # the real adapter's, LSF's

        def __init__(self, s: Site) -> None:
            super().__init__(s)
            self.site = Site(s.profile, UserSiteConfig(workdir=str(tmp_path / "work")))
            self.real = SiteAdapter(
                self.site, _lsf_transport(tmp_path, max_size), dialect=LsfDialect()
            )
            self.dialect = self.real.dialect

        def parent_id(self, job_id: str) -> str:
            return self.real.parent_id(job_id)

        def element_id(self, job_id: str, index: int) -> str:
            return self.real.element_id(job_id, index)

        async def submit_many(self, jobs: Sequence[Any]) -> list[Any]:
            for job in jobs:
                if isinstance(job, ArrayJob):
                    self.calls[f"array{len(job.members)}"] += 1
                else:
                    self.calls["alone"] += 1
            got = await self.real.submit_many(jobs)
            self.submitted.extend(g.job_id for g in got if isinstance(g, SubmittedJob))
            return got

    return LsfSite


async def test_a_sweep_runs_as_lsf_arrays_halved_past_max_job_array_size(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight alike children at an LSF site whose MAX_JOB_ARRAY_SIZE is 3: the array of 8 and
    those of 4 are refused ("Job array index too large"), arrays of 2 are taken; every child
    is bound to its own element `id[i]` and its own output holds its own result."""
    o, slow, _ = _world(store, slow_site=_lsf_site(tmp_path, 3))
    o.collector.latest["fast"] = state(FAST.profile, health=Health.OFFLINE)  # slow or nothing
    children = tuple(GroupChild(command=("echo", f"child {i}")) for i in range(8))
    req = SubmitGroupRequest(
        objective="sweep",
        children=children,
        envelope=ResourceEnvelope.model_validate({"cpus": {"min": 1, "max": 1}}),
    )
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    with anyio.fail_after(LIMIT_S):
        await o.place_queued()
        while len(slow.submitted) < 8:
            await anyio.sleep(0.01)
    assert (slow.calls["array8"], slow.calls["array4"], slow.calls["array2"]) == (1, 2, 4)
    assert slow.calls["alone"] == 0
    assert o.placer.submitter.array_caps.caps == {SLOW.name: 2}
    ids = set()
    for child in (await o.groups.view(gid, limit=10)).children:
        with anyio.fail_after(LIMIT_S):
            while (atts := await o.book.load_attempts(child.task_id))[-1].job_id is None:
                await anyio.sleep(0.01)
        assert [a.state for a in atts[:-1]] == [JobState.FAILED, JobState.FAILED]
        assert "Job array index too large" in (atts[0].reason or "")
        last = atts[-1]
        assert last.site == SLOW.name and last.array_name is not None and last.job_id
        assert last.job_id == f"{slow.parent_id(last.job_id)}[{(last.array_index or 0) + 1}]"
        ids.add(last.job_id)
        workdir = tmp_path / "work" / child.task_id
        index = child.task_id.rsplit("-", 1)[1]  # the group's children count from 0
        assert [p.read_text() for p in workdir.rglob("*.out")] == [f"child {index}\n"]
    assert len(ids) == 8
