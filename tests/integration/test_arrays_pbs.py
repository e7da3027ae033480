"""Job arrays on the real OpenPBS server of the local federation (issue 40): a group's alike
children placed on devpolaris go as ONE `qsub -J`, each child keeping its own task, subjob id
(`123[4].devpolaris`), state, exit code and output; one child cancelled alone (`qdel` of its
subjob) while a sibling still runs, which then completes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.task_views import ResultManifest
from fedhpc.ops.tasks import (
    AdaptationPolicy,
    CancelRequest,
    GroupChild,
    ResultRequest,
    SubmitGroupRequest,
)
from tests.integration.daemon_util import running
from tests.integration.pbs_support import SITE, Devpolaris, devpolaris

__all__ = ["devpolaris"]  # the fixture, imported for pytest

# Children 0-3 print and end (child 2 with exit status 3); child 4 sleeps until cancelled;
# child 5 still runs when 4 is cancelled, then prints and ends.
COMMANDS = [
    *(
        ("bash", "-c", 'echo "child-$1"; exit "$2"', "c", str(i), str(3 * (i == 2)))
        for i in range(4)
    ),
    ("sleep", "600"),
    ("bash", "-c", 'sleep 15; echo "child-$1"', "c", "5"),
]
CANCELLED, SIBLING = 4, 5


async def _results(client: DaemonClient, tasks: list[str]) -> list[ResultManifest]:
    return [await client.get_result(ResultRequest(task_id=t)) for t in tasks]


async def _until(
    client: DaemonClient,
    tasks: list[str],
    done: Callable[[list[ResultManifest]], bool],
    limit: float,
) -> None:
    with anyio.fail_after(limit):
        while not done(await _results(client, tasks)):
            await anyio.sleep(0.3)


def _qstat(fed: Devpolaris, job_id: str) -> dict[str, dict[str, object]]:
    out = fed.run("qstat", "-f", "-F", "json", "-x", "-t", job_id)
    assert out.returncode == 0, out.stderr
    jobs: dict[str, dict[str, object]] = json.loads(out.stdout)["Jobs"]
    return jobs


async def test_alike_children_run_as_one_qsub_j_and_one_subjob_is_cancelled_alone(
    devpolaris: Devpolaris, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    # One A100 each (a CPU-only task stays off GPU partitions): all six fit prod's eight.
    env = ResourceEnvelope.model_validate(
        {
            "wall_time": {"min": "5m"},
            "cpus": {"min": 1, "max": 1},
            "gpus": {"min": 1, "max": 1},
            "sites_include": [SITE],
        }
    )
    async with running(home, FEDHPC_DEVFED="pbs") as client:
        calls = (await client.health())["remote_calls"].get(SITE, {}).get("total", {})
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="a sweep as one PBS job array",
                children=tuple(GroupChild(command=c) for c in COMMANDS),
                envelope=env,
                spread=False,
                adaptation=AdaptationPolicy(max_retries=0, replace_pending=False),
            )
        )
        tasks = [c.task_id for c in (await client.group(group.group_id)).children]
        assert len(tasks) == len(COMMANDS)

        def _all_bound(rs: list[ResultManifest]) -> bool:
            return all(r.attempts and r.attempts[-1].job_id for r in rs)

        await _until(client, tasks, _all_bound, 30)
        ids = [str(r.attempts[-1].job_id) for r in await _results(client, tasks)]
        # One array: every child is a subjob '<seq>[<i>].devpolaris' of the same '<seq>[]'.
        parents = {i.split("[", 1)[0] for i in ids}
        assert len(parents) == 1 and all(i.endswith("].devpolaris") for i in ids), ids
        assert sorted(int(i.split("[", 1)[1].split("]", 1)[0]) for i in ids) == list(
            range(len(COMMANDS))
        )

        def _both_running(rs: list[ResultManifest]) -> bool:  # a task stays submitted
            return all(rs[k].attempts[-1].state is JobState.RUNNING for k in (CANCELLED, SIBLING))

        await _until(client, tasks, _both_running, 30)
        await client.cancel(CancelRequest(task_id=tasks[CANCELLED]))

        def _all_ended(rs: list[ResultManifest]) -> bool:
            return all(r.state.terminal for r in rs)

        await _until(client, tasks, _all_ended, 40)
        results = await _results(client, tasks)
        after = (await client.health())["remote_calls"][SITE]["total"]
        # PBS's own output of each subjob goes to the arrays folder (the -o/-e folder): OpenPBS
        # 23.06 copies the mom's spool files there under their names, '<subjob id>.OU' and
        # '.ER', before the subjob is finished. Nothing reads them (each child's output is in
        # its task's files), so the daemon removes them once the subjob's end is merged.
        seq = ids[0].split("[", 1)[0]
        head = _qstat(devpolaris, f"{seq}[].devpolaris")[f"{seq}[].devpolaris"]
        folder = Path(str(head["Output_Path"]).split(":", 1)[1])
        assert folder.name == "arrays", folder
        with anyio.fail_after(20):  # removed by the cycle after the end is merged
            while left := sorted(p.name for p in folder.iterdir() if p.name.startswith(seq)):
                await anyio.sleep(0.3)
        assert left == []

    assert after.get("submit", 0) - calls.get("submit", 0) == 1  # one qsub for all six
    for i, r in enumerate(results):
        (att,) = r.attempts
        assert att.site == SITE
        if i == CANCELLED:
            assert r.state is JobState.CANCELLED
            continue
        expected = JobState.FAILED if i == 2 else JobState.COMPLETED
        assert (r.state, att.exit_code) == (expected, 3 if i == 2 else 0), (i, r)
        assert (r.preview or "").strip() == f"child-{i}"
    # At the server: the cancelled subjob ended alone; its sibling ran on to its end.
    jobs = _qstat(devpolaris, ids[CANCELLED])
    (cancelled,) = jobs.values()
    # Finished ('F' asked alone, 'X' in its array's list) by qdel: substate 91, terminated.
    assert cancelled["job_state"] in ("F", "X") and cancelled["substate"] == 91, cancelled
    sibling = _qstat(devpolaris, ids[SIBLING])[ids[SIBLING]]
    assert sibling.get("Exit_status") == 0
