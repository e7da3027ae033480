"""Users' own job scripts through the real MCP client: #SBATCH scripts on the local Slurm
federation (GPUs by --gres, --ntasks-per-node, --mem-per-cpu, --constraint, an array, a
dependency), each directive not carried over named in the answer; a Slurm script landing on
a local-process site with that scheduler's header; typed errors at the door."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from fedhpc.ops.task_views import SubmitAnswer
from fedhpc.ops.tasks import SubmitTaskRequest
from tests.integration.daemon_util import running
from tests.integration.mcp_support import jobs, stdio_params

GPU_SCRIPT = r"""#!/bin/bash
#SBATCH --job-name=byo-gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --gres=gpu:a100:1
#SBATCH --mem-per-cpu=256M
#SBATCH --time=00:05:00
#SBATCH --constraint=a100
#SBATCH --partition=gpuA100x4
#SBATCH --account=bbka-delta-gpu
#SBATCH --dependency=afterok:999999
#SBATCH --output=byo-%j.out
# the body: quotes, arithmetic and a tolerated failure, as users write them
echo "cluster=${SLURM_CLUSTER_NAME:-none}"
false || echo "tolerated"
printf '%s\n' "it's \"quoted\" $((6 * 7))"
"""

ARRAY_SCRIPT = """#!/bin/bash
#SBATCH -N 1
#SBATCH -c 1
#SBATCH -t 5
#SBATCH --array=0-3%2
#SBATCH --mail-type=END
echo "index=${SLURM_ARRAY_TASK_ID:-none}"
"""

CPU_SCRIPT = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=5
#SBATCH --partition=cpu
echo "body ran with $((2 + 3)) fingers"
"""


def _ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    body: dict[str, Any] | None = result.structured_content
    assert body is not None
    return body


def _error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert {"code", "message", "hint"} <= set(body)
    return body


async def _terminal(client: Client, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(180):
        while True:
            got = _ok(await client.call_tool("get_result", {"task_id": task_id}))
            if got["state"] in {"completed", "failed", "cancelled", "timeout", "unschedulable"}:
                return got
            await anyio.sleep(1)


def _carried_not(answer: dict[str, Any]) -> str:
    return "\n".join(answer["script"]["not_carried"])


@pytest.mark.devfed
async def test_sbatch_scripts_run_on_slurm_with_what_was_not_carried_named(
    devfed: Any, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    async with running(home), Client(stdio_params(home, "--no-autostart"), mode="legacy") as c:
        answer = _ok(await c.call_tool("submit_task", {"script": GPU_SCRIPT}))
        read = answer["script"]
        assert read["scheduler"] == "slurm"
        assert read["envelope"] == {
            "nodes": {"min": 1},
            "cpus": {"min": 2},
            "gpus": {"min": 1},
            "memory": {"min": 512},
            "wall_time": {"min": 300},
            "accelerator_types": ["a100"],
        }
        gone = _carried_not(answer)
        for directive in ("--constraint=a100", "--partition=gpuA100x4", "--account=", "--job-name"):
            assert directive in gone
        assert "line 12: --dependency=afterok:999999: job ids do not cross sites" in gone
        done = await _terminal(c, answer["task_id"])
        assert done["state"] == "completed", done
        assert "tolerated" in done["preview"] and 'it\'s "quoted" 42' in done["preview"]
        attempt = jobs(done)[-1]
        site, job_id = attempt["site"], attempt["job_id"]
        assert attempt["partition"] == "gpuA100x4"
        # What Slurm granted is what the re-rendered header asked for.
        tres = devfed.run(
            site, "sacct", "-X", "-n", "-P", "-j", job_id, "-o", "AllocTRES", timeout=30
        ).stdout
        assert "cpu=2" in tres and "gres/gpu=1" in tres and "mem=512M" in tres, tres

        array = _ok(await c.call_tool("submit_task", {"script": ARRAY_SCRIPT}))
        assert "--array=0-3%2: runs once, not as an array" in _carried_not(array)
        assert "--mail-type=END" in _carried_not(array)
        ran = await _terminal(c, array["task_id"])
        assert ran["state"] == "completed" and "index=none" in ran["preview"]


@pytest.mark.devfed
async def test_scripts_refused_at_the_door_get_typed_errors(devfed: Any, tmp_path: Path) -> None:
    home = tmp_path / "h"
    async with running(home), Client(stdio_params(home, "--no-autostart"), mode="legacy") as c:
        plain = _error(await c.call_tool("submit_task", {"script": "python train.py\n"}))
        assert plain["code"] == "validation" and "script" in plain["message"]
        unknown = GPU_SCRIPT.replace("gpu:a100:1", "gpu:mi250x:1")
        typed = _error(await c.call_tool("submit_task", {"script": unknown}))
        assert typed["code"] == "validation" and "mi250x" in typed["message"]
        draft = _ok(await c.call_tool("draft_envelope", {"script": GPU_SCRIPT}))
        assert draft["valid"] and draft["source"] == "user"
        assert "not carried: line 2: --job-name=byo-gpu" in draft["rationale"]


# Private local-process sites, no Slurm cluster: beside the Slurm scope (tests/conftest.py).
async def test_a_slurm_script_lands_on_a_process_site_with_that_schedulers_header(
    tmp_path: Path,
) -> None:
    home, fed = tmp_path / "h", tmp_path / "devfed"
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed)}
    async with (
        running(home, **env) as daemon,
        Client(stdio_params(home, "--no-autostart", **env), mode="legacy") as c,
    ):
        args = {"script": CPU_SCRIPT, "fixed_site": "devanvil"}
        answer = _ok(await c.call_tool("submit_task", args))
        assert answer["script"]["envelope"]["cpus"] == {"min": 2}
        assert "--partition=cpu: placement picks" in _carried_not(answer)
        done = await _terminal(c, answer["task_id"])
        assert done["state"] == "completed", done
        assert "body ran with 5 fingers" in done["preview"]
        job_id = jobs(done)[-1]["job_id"]
        rendered = (fed / "devanvil" / "localsched" / "jobs" / f"{job_id}.sh").read_text()
        # The same script by its path in the site's storage root: read there, same reading.
        stored = fed / "devanvil" / "storage" / "byo" / "cpu.sh"
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_text(CPU_SCRIPT)
        by_path = _ok(await c.call_tool("submit_task", {**args, "script": str(stored)}))
        assert by_path["script"] == answer["script"]
        again = await _terminal(c, by_path["task_id"])
        assert "body ran with 5 fingers" in again["preview"]
        # The REST face answers with the same reading.
        rest = await daemon.submit_task(
            SubmitTaskRequest.model_validate({**args, "idempotency_key": "over-rest"})
        )
        assert isinstance(rest, SubmitAnswer) and rest.script is not None
        assert rest.script.envelope == answer["script"]["envelope"]
        assert list(rest.script.not_carried) == answer["script"]["not_carried"]
        outside = _error(await c.call_tool("submit_task", {"script": "/etc/passwd"}))
        assert outside["code"] == "script_unread" and "storage root" in outside["message"]
    header = [line for line in rendered.splitlines()[1:] if line.startswith("#")]
    assert header and all(line.startswith("#LOCALSCHED ") for line in header)
    assert "#LOCALSCHED --cpus=2" in header and "#LOCALSCHED --time=300" in header
    assert "#LOCALSCHED --mem=1024" in header
    assert not any(line.startswith("#SBATCH") for line in rendered.splitlines())
