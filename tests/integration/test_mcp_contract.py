"""The tool contract answers the truth, through the real MCP client over stdio against a real
daemon on four private local-process sites (dialect `process`, the demo's sites without
Slurm; nothing shared with the Slurm federation or other test runs): no silent fixed-site
fallback, `next` per state and tool, shapes that fit their wall time, confined workdirs,
helpful validation errors, compact answers whose previews are tails (issue 14, cases 2-6 and
8; issue 23, previews)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import CallToolResult

from tests.integration.daemon_util import running
from tests.integration.mcp_support import jobs, stdio_params

SITES = "devanvil, devdelta, devdeltaai, devvista"
SMALL = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
GH200 = {"gpus": {"min": 1, "max": 1}, "accelerator_types": ["gh200"], "wall_time": {"min": "5m"}}


@asynccontextmanager
async def connect(tmp_path: Path) -> AsyncIterator[Client]:
    """In the test's own task: anyio's cancel scopes must exit where they were entered."""
    home = tmp_path / "h"
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed")}
    async with (
        running(home, **env),
        Client(stdio_params(home, "--no-autostart", **env), mode="legacy") as connected,
    ):
        yield connected


def _text(result: CallToolResult) -> str:
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


def _error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result
    body: dict[str, Any] = json.loads(_text(result))
    assert {"code", "message", "hint"} <= set(body)
    return body


async def _ok(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, _text(result)
    text = _text(result)
    # Compact JSON: no indentation, no nulls, no empty lists, and the same data as the
    # structured content.
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    assert json.loads(text) == result.structured_content
    assert ":null" not in text and ":[]" not in text and ':""' not in text
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content  # a tool's structured answer: an object
    return body


async def _resource(client: Client, uri: str) -> dict[str, Any]:
    read = await client.read_resource(uri)
    body: dict[str, Any] = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    return body


async def _terminal(client: Client, task_id: str, **args: Any) -> dict[str, Any]:
    with anyio.fail_after(180):
        while True:
            got = await _ok(client, "get_result", task_id=task_id, **args)
            if got["state"] in {"completed", "failed", "cancelled", "timeout", "unschedulable"}:
                return got
            await anyio.sleep(1)


async def test_fixed_site_is_an_error_or_runs_there_and_falls_back_only_when_asked(
    tmp_path: Path,
) -> None:
    async with connect(tmp_path) as client:
        unknown = _error(
            await client.call_tool(
                "submit_task", {"command": ["true"], "envelope": SMALL, "fixed_site": "nosuchsite"}
            )
        )
        assert unknown["code"] == "site_not_usable"
        assert unknown["fields"][0] == {
            "field": "fixed_site",
            "reason": "no site is called 'nosuchsite'",
        }
        assert f"Usable sites: {SITES}" in unknown["hint"]
        shipped = _error(
            await client.call_tool(
                "submit_task", {"command": ["true"], "envelope": SMALL, "fixed_site": "delta"}
            )
        )
        assert "config.toml" in shipped["message"] and "[sites.delta]" in shipped["message"]
        assert "unknown site" not in shipped["message"]
        include = _error(
            await client.call_tool(
                "submit_task",
                {"command": ["true"], "envelope": {**SMALL, "sites_include": ["delta"]}},
            )
        )
        assert include["fields"][0]["field"] == "envelope.sites_include[0]"
        assert "config.toml" in include["fields"][0]["reason"]
        # fixed_site alone implies the policy, and the job runs there.
        there = await _ok(
            client, "submit_task", command=["sleep", "60"], envelope=SMALL, fixed_site="devvista"
        )
        assert there["site"] == "devvista"
        assert there["decision"].startswith("fixed-site: est. wait ")
        cancelled = await _ok(client, "cancel", task_id=there["task_id"])
        # Stopped; or, while its sbatch is still out, its cancel owed and said so.
        assert cancelled["state"] == "cancelled" and cancelled["next"].startswith("Cancelled: ")
        if "stopped" not in cancelled["next"]:
            assert "a submission to devvista in flight" in cancelled["decision"], cancelled
        again = await _ok(client, "cancel", task_id=there["task_id"])
        assert again["next"].startswith("Nothing was cancelled")
        # devanvil has no GH200: without fallback the task is unschedulable, saying why.
        stuck = await _ok(
            client, "submit_task", command=["true"], envelope=GH200, fixed_site="devanvil"
        )
        assert stuck["state"] == "unschedulable"
        assert "site" not in stuck
        assert stuck["reasons"][1].startswith("devanvil/")
        assert "End your turn" not in stuck["next"] and "replan" in stuck["next"]
        moved = await _ok(
            client,
            "submit_task",
            command=["true"],
            envelope=GH200,
            fixed_site="devanvil",
            fallback=True,
            name="fallback",
        )
        assert moved["site"] in {"devdeltaai", "devvista"}
        assert moved["decision"].startswith("FALLBACK from fixed site devanvil (")
        conflict = _error(
            await client.call_tool(
                "submit_task",
                {
                    "command": ["true"],
                    "envelope": SMALL,
                    "fixed_site": "devanvil",
                    "policy": "shortest-queue",
                },
            )
        )
        assert conflict["fields"][0]["field"] == "fixed_site"


async def test_a_failing_job_is_read_in_one_call_its_stderr_tail_ends_with_its_last_line(
    tmp_path: Path,
) -> None:
    async with connect(tmp_path) as client:
        script = (
            'echo started; for i in $(seq 1 400); do echo "noise line $i" >&2; done; '
            "echo 'FINAL: the real error' >&2; exit 3"
        )
        handle = await _ok(
            client,
            "submit_task",
            command=["bash", "-c", script],
            envelope=SMALL,
            adaptation={"max_retries": 0},
        )
        assert handle["state"] in {"submitted", "pending", "running"}
        assert "nothing will resume" in handle["next"]  # this client has no continuation
        got = await _terminal(client, handle["task_id"], max_bytes=256)
        assert got["state"] == "failed"
        assert got["preview"] == "started\n"  # the whole of stdout: no reference to it
        assert got["stderr"].endswith("noise line 400\nFINAL: the real error\n")
        assert len(got["stderr"].encode()) <= 256
        kinds = {o["kind"]: o for o in got.get("outputs", [])}
        assert "stdout" not in kinds  # all of it is in the preview
        assert kinds["stderr"]["bytes"] > 256  # cut: the file is referenced with its size
        assert jobs(got)[0]["exit_code"] == 3
        assert "stderr tail" in got["next"]
        for noise in ("created_at", "provenance", "job_name", "submitted_at", "shape"):
            assert noise not in json.dumps(got)
        nothing = await _ok(client, "cancel", task_id=handle["task_id"])
        assert nothing["state"] == "failed"
        assert nothing["next"].startswith("Nothing was cancelled: it had already ended (failed)")


async def test_workdirs_are_confined_and_a_folder_that_cannot_be_made_is_one_clear_failure(
    tmp_path: Path,
) -> None:
    async with connect(tmp_path) as client:
        for bad, words in (
            ("//server/share/x", "//"),
            ("~", "'~' is not expanded"),
            ("/", "not a folder"),
            ("a/../../b", ".."),
        ):
            err = _error(
                await client.call_tool(
                    "submit_task", {"command": ["pwd"], "envelope": SMALL, "workdir": bad}
                )
            )
            assert err["fields"][0]["field"] == "workdir", err
            assert words in err["message"], err
        outside = _error(
            await client.call_tool(
                "submit_task", {"command": ["pwd"], "envelope": SMALL, "workdir": "/etc/fedhpc-x"}
            )
        )
        assert outside["code"] == "workdir_outside"
        assert "devanvil/storage" in outside["message"]
        rel = await _ok(client, "submit_task", command=["pwd"], envelope=SMALL, workdir="sub/dir")
        done = await _terminal(client, rel["task_id"])
        assert done["preview"].rstrip("\n").endswith(f"/fedhpc/{rel['task_id']}/sub/dir")
        run = "h14-" + uuid.uuid4().hex[:8]
        mine = f"{(tmp_path / 'devfed')}/devdelta/storage/{run}/out"
        absolute = await _ok(client, "submit_task", command=["pwd"], envelope=SMALL, workdir=mine)
        assert absolute["site"] == "devdelta"  # the only site whose storage holds the folder
        assert (await _terminal(client, absolute["task_id"]))["preview"] == mine + "\n"
        blocker = (tmp_path / "devfed") / "devanvil/storage" / run
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("a file where a folder should go")
        placed = await _ok(
            client, "submit_task", command=["pwd"], envelope=SMALL, workdir=f"{blocker}/sub"
        )
        # Answered on placement; the folder fails in the site's submit call, after it.
        failed = await _terminal(client, placed["task_id"])
        assert failed["state"] == "failed"
        (reason,) = failed["reasons"]
        assert reason.startswith("cannot create the job's folder on devanvil: mkdir")
        assert "rejected by the schedulers" not in reason
        got = await _ok(client, "get_result", task_id=failed["task_id"])
        assert len(jobs(got)) == 1  # no retry on other sites


async def test_a_chosen_shape_requests_enough_wall_time_for_its_predicted_runtime(
    tmp_path: Path,
) -> None:
    async with connect(tmp_path) as client:
        # gpus.min = 0 counts CPUs in the minimum shape; the GPU shape must not be predicted to
        # outrun the 600 s it requests.
        env = {
            "gpus": {"min": 0, "max": 1},
            "cpus": {"min": 2, "max": 2},
            "wall_time": {"min": "10m"},
            "sites_include": ["devdeltaai"],
        }
        handle = await _ok(client, "submit_task", command=["true"], envelope=env)
        run = re.search(r"\+ run (\d+)s", handle["decision"])
        assert run is not None, handle["decision"]
        await _ok(client, "cancel", task_id=handle["task_id"])
        # The answer leaves the granted shape out (the agent's envelope bounds it): the task
        # resource has it.
        assert "shape" not in handle and "account" not in handle
        full = await _resource(client, f"fedhpc://tasks/{handle['task_id']}")
        assert int(run.group(1)) <= full["attempts"][-1]["shape"]["wall_time_s"] == 600


async def test_validation_errors_name_the_nearest_field_and_refuse_an_empty_program(
    tmp_path: Path,
) -> None:
    async with connect(tmp_path) as client:
        nested = _error(
            await client.call_tool(
                "submit_task", {"command": ["true"], "envelope": {"walltime": "1h"}}
            )
        )
        assert nested["fields"][0] == {
            "field": "envelope.walltime",
            "reason": "unknown field 'walltime'; did you mean 'wall_time'?",
        }
        top = _error(
            await client.call_tool(
                "submit_task", {"command": ["true"], "envelope": SMALL, "walltime": "1h"}
            )
        )
        assert "did you mean envelope.wall_time?" in top["message"]
        empty = _error(await client.call_tool("submit_task", {"command": [""], "envelope": SMALL}))
        assert empty["fields"][0]["field"] == "command"
        assert "command[0] is empty" in empty["message"]
        typo = _error(await client.call_tool("get_result", {"task_id": "t1", "previw": "stdout"}))
        assert "did you mean 'preview'?" in typo["message"]
