"""A careless agent at `fedhpc serve` (the real MCP client over stdio) against a real daemon on
the four local-process sites (no Slurm: the dialect is irrelevant here): what it sends wrong is
refused with {code, message, hint} naming the field, nothing is silently read another way, and
what it reads later is true in that state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.integration.daemon_util import job_id_of, running
from tests.integration.hostile_support import call_error, call_ok, serve
from tests.integration.mcp_support import jobs as jobs_of
from tests.integration.mcp_support import stdio_params

ENV = {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 1, "max": 1}, "wall_time": {"min": 60}}


async def test_a_mistyped_site_in_inspect_federation_is_an_error_not_an_empty_federation(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as client:
        body = await call_error(client, "inspect_federation", {"sites": ["devdelta", "devdleta"]})
        assert body["code"] == "site_not_usable"
        assert body["fields"] == [{"field": "sites[1]", "reason": "no site is called 'devdleta'"}]
        assert "devanvil, devdelta, devdeltaai, devvista" in body["hint"]
        view = await call_ok(client, "inspect_federation", {"sites": ["devdelta"]})
        assert [s["site"] for s in view["sites"]] == ["devdelta"]


async def test_an_empty_idempotency_key_is_refused_not_read_as_no_key(tmp_path: Path) -> None:
    """ "" used to become a key made for the call but marked as the caller's own: the same
    command sent twice then made two tasks (no retry window), and nothing said so."""
    async with serve(tmp_path) as client:
        task = {"command": ["sleep", "30"], "envelope": ENV, "idempotency_key": ""}
        group = {
            "objective": "o",
            "children": [{"command": ["true"]}],
            "envelope": ENV,
            "idempotency_key": "",
        }
        for tool, args in (("submit_task", task), ("submit_group", group)):
            body = await call_error(client, tool, args)
            assert body["code"] == "validation"
            assert [f["field"] for f in body["fields"]] == ["idempotency_key"], body
        page = await call_ok(client, "list_events", {})
        assert page["events"] == []
        # Nothing was accepted: the same command without the empty key is one new task.
        first = await call_ok(client, "submit_task", {**task, "idempotency_key": None})
        again = await call_ok(client, "submit_task", {**task, "idempotency_key": None})
        assert again["task_id"] == first["task_id"]
        await call_ok(client, "cancel", {"task_id": first["task_id"]})


async def test_move_data_with_a_reused_key_and_other_paths_is_a_conflict(tmp_path: Path) -> None:
    """It used to answer with the first transfer, as if the second copy had been made."""
    storage = tmp_path / "devfed"
    async with serve(tmp_path) as client:
        for site in ("devdelta", "devanvil"):
            (storage / site / "storage").mkdir(parents=True, exist_ok=True)
        (storage / "devdelta/storage/in.dat").write_text("data\n")
        args = {
            "source": "devdelta:scratch/in.dat",
            "destination": "devanvil:scratch/a.dat",
            "idempotency_key": "copy-1",
        }
        first = await call_ok(client, "move_data", args)
        same = await call_ok(client, "move_data", args)
        assert same["transfer_id"] == first["transfer_id"]
        other = {**args, "destination": "devanvil:scratch/b.dat"}
        body = await call_error(client, "move_data", other)
        assert body["code"] == "idempotency_conflict"
        assert first["transfer_id"] in body["message"]
        assert "new key" in body["hint"]
        with anyio.fail_after(60):
            while True:
                read = await client.read_resource(f"fedhpc://transfers/{first['transfer_id']}")
                view = json.loads(read.contents[0].text)  # type: ignore[union-attr]
                if view["state"] == "succeeded":
                    break
                await anyio.sleep(0.3)
        # Read later, the transfer says what to do in its state, not "end your turn".
        assert view["next"].startswith("Succeeded"), view["next"]
        assert not (storage / "devanvil/storage/b.dat").exists()
        assert (storage / "devanvil/storage/a.dat").read_text() == "data\n"


async def test_a_group_with_policy_fixed_site_or_twin_child_names_is_refused_by_field(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        offered = tools["submit_group"].input_schema["properties"]["policy"]["enum"]
        assert offered == ["best-feasible", "shortest-queue"]  # no site to fix a group to
        base = {"objective": "o", "children": [{"command": ["true"]}], "envelope": ENV}
        body = await call_error(client, "submit_group", {**base, "policy": "fixed-site"})
        assert [f["field"] for f in body["fields"]] == ["policy"], body
        assert "sites_include" in body["message"]
        twins = [{"command": ["true"], "name": "a"}, {"command": ["false"], "name": "a"}]
        body = await call_error(client, "submit_group", {**base, "children": twins})
        assert [f["field"] for f in body["fields"]] == ["children"], body
        assert "children[1].name 'a' is also children[0]'s name" in body["message"]
        assert (await call_ok(client, "list_events", {}))["events"] == []


async def test_a_group_or_transfer_id_given_as_a_task_id_says_what_it_is(tmp_path: Path) -> None:
    """It said "no task 'g…'" and pointed at `fedhpc tasks`, for an id fedhpc itself gave.
    cancel takes a group's id: it cancels the group's live children."""
    storage = tmp_path / "devfed"
    async with serve(tmp_path) as client:
        base = {"objective": "o", "children": [{"command": ["sleep", "60"]}], "envelope": ENV}
        gid = (await call_ok(client, "submit_group", base))["group_id"]
        for tool in ("get_result", "replan"):
            body = await call_error(client, tool, {"task_id": gid})
            assert body["code"] == "not_found"
            assert body["message"] == f"{gid!r} is a group, not a task", body
            assert f"fedhpc://groups/{gid}" in body["hint"]
            assert "cancel takes the group's id too" in body["hint"]
        cancelled = await call_ok(client, "cancel", {"task_id": gid})
        assert (cancelled["task_id"], cancelled["state"]) == (gid, "cancelled"), cancelled
        assert cancelled["decision"].startswith(f"group {gid}: cancelled 1 of 1 children (")
        assert "nothing will wake you" in cancelled["next"]
        again = await call_ok(client, "cancel", {"task_id": gid})
        assert again["next"].startswith("Nothing was cancelled"), again
        (storage / "devdelta/storage").mkdir(parents=True, exist_ok=True)
        (storage / "devdelta/storage/in.dat").write_text("x")
        move = {"source": "devdelta:scratch/in.dat", "destination": "devdelta:scratch/out.dat"}
        xid = (await call_ok(client, "move_data", move))["transfer_id"]
        body = await call_error(client, "get_result", {"task_id": xid})
        assert body["message"] == f"{xid!r} is a transfer, not a task", body
        assert f"fedhpc://transfers/{xid}" in body["hint"] and "stage_in" in body["hint"]
        body = await call_error(client, "get_result", {"task_id": "tnosuchtask"})
        assert body["message"] == "no task 'tnosuchtask'"


async def test_a_get_result_over_the_answer_cap_names_a_max_bytes_that_fits(
    tmp_path: Path,
) -> None:
    """Control characters in a tail grow sixfold as JSON: a max_bytes inside the advertised
    range was refused with a hint that read "fedhpc://tasks/{task_id}", placeholder and all."""
    noisy = "import sys; print('a' * 200000); sys.stderr.write('\\x01' * 200000); sys.exit(3)"
    async with serve(tmp_path) as client:
        args = {"command": ["python3", "-c", noisy], "envelope": ENV}
        task = await call_ok(client, "submit_task", {**args, "adaptation": {"max_retries": 0}})
        tid = task["task_id"]
        with anyio.fail_after(60):
            while (await call_ok(client, "get_result", {"task_id": tid}))["state"] != "failed":
                await anyio.sleep(0.3)
        body = await call_error(client, "get_result", {"task_id": tid, "max_bytes": 20000})
        assert body["code"] == "too_large"
        assert f"fedhpc://tasks/{tid}" in body["hint"] and "{" not in body["hint"], body
        fit = int(body["hint"].split("max_bytes=")[1].split(" ")[0])
        assert 1 <= fit < 20000
        answer = await call_ok(client, "get_result", {"task_id": tid, "max_bytes": fit})
        assert answer["preview"].endswith("a" * 100 + "\n") and answer["stderr"].endswith(
            "\x01" * 100
        )
        bare = await call_ok(client, "get_result", {"task_id": tid, "preview": "none"})
        assert [o["bytes"] for o in bare["outputs"]] == [200001, 200000]


async def test_replan_never_places_a_task_back_on_a_site_it_excludes(tmp_path: Path) -> None:
    """sites_include outranks every exclusion in placement: replan(exclude_sites=[devdelta])
    of a task whose envelope includes devdelta was placed on devdelta again, as 'replanned'."""
    async with serve(tmp_path) as client:
        only_delta = {**ENV, "sites_include": ["devdelta"]}
        too_long = {**only_delta, "wall_time": {"min": "30d"}}
        task = await call_ok(client, "submit_task", {"command": ["true"], "envelope": too_long})
        assert task["state"] == "unschedulable"
        args = {"task_id": task["task_id"], "exclude_sites": ["devanvil", "devdelta"]}
        body = await call_error(client, "replan", {**args, "envelope": only_delta})
        assert body["code"] == "validation"
        assert body["fields"] == [
            {"field": "exclude_sites[1]", "reason": "devdelta is in the envelope's sites_include"}
        ]
        assert "task is unchanged" in body["hint"]
        # The stored envelope counts too: excluding its only site is the same contradiction.
        body = await call_error(client, "replan", args)
        assert [f["field"] for f in body["fields"]] == ["exclude_sites[1]"]
        result = await call_ok(client, "get_result", {"task_id": task["task_id"]})
        assert result["state"] == "unschedulable" and "attempts" not in result
        # An envelope's fields replace the task's only where given: sites_include [] drops it.
        moved = await call_ok(client, "replan", {**args, "envelope": {**ENV, "sites_include": []}})
        assert moved["site"] not in {"devanvil", "devdelta"}, moved


async def test_replan_asks_the_scheduler_before_killing_a_job_that_may_have_started(
    tmp_path: Path,
) -> None:
    """Between two probes a started job is still 'submitted' in the store: replan cancelled it
    (exit 143) and ran it again, though it promises no work is lost."""
    where = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed")}
    slow = {"FEDHPC_REFRESH_S": "600", "FEDHPC_CYCLE_S": "600"}  # no probe sees it start
    home = tmp_path / "h"
    async with (
        running(home, **where, **slow) as daemon,
        Client(stdio_params(home, "--no-autostart", **where), mode="legacy") as client,
    ):
        task = await call_ok(client, "submit_task", {"command": ["sleep", "60"], "envelope": ENV})
        assert task["state"] == "submitted", task
        jobs = tmp_path / "devfed" / task["site"] / "localsched"
        job = await job_id_of(daemon, task["task_id"])  # answered on placement; then submitted
        with anyio.fail_after(30):  # the local scheduler has started it
            while '"state": "RUNNING"' not in (jobs / f"jobs/{job}.json").read_text():
                await anyio.sleep(0.2)
        body = await call_error(
            client, "replan", {"task_id": task["task_id"], "exclude_sites": [task["site"]]}
        )
        assert body["code"] == "usage" and body["message"].endswith("is running"), body
        result = await call_ok(client, "get_result", {"task_id": task["task_id"]})
        # Its one job, in the task's state: the brief form flattens it into the answer.
        assert "attempts" not in result and result["site"] == task["site"], result
        (only,) = jobs_of(result)
        assert only["n"] == 1 and "superseded" not in only
        await call_ok(client, "cancel", {"task_id": task["task_id"]})


async def test_get_result_while_the_output_site_is_offline_says_so_not_all_shown(
    tmp_path: Path,
) -> None:
    """It answered "Completed: preview is all of its output." with no preview at all (and a
    failed task "see the stderr tail" with none) while the site holding them was offline."""
    sched = tmp_path / "devfed/devvista/localsched"
    async with serve(tmp_path) as client:
        args = {"command": ["echo", "hello"], "envelope": {**ENV, "sites_include": ["devvista"]}}
        tid = (await call_ok(client, "submit_task", args))["task_id"]
        with anyio.fail_after(60):
            while (done := await call_ok(client, "get_result", {"task_id": tid}))["state"] != (
                "completed"
            ):
                await anyio.sleep(0.3)
        assert done["preview"] == "hello\n"
        sched.rename(sched.with_name("away"))
        sched.write_text("not a folder: every probe of devvista fails")
        with anyio.fail_after(60):
            while (await call_ok(client, "inspect_federation", {"sites": ["devvista"]}))["sites"][
                0
            ]["health"] != "offline":
                await anyio.sleep(0.5)
        blind = await call_ok(client, "get_result", {"task_id": tid})
        assert "preview" not in blind and blind["unreadable"] == "devvista"
        assert "all of its output" not in blind["next"]
        assert blind["next"].startswith("Completed, but its output is on devvista"), blind
        assert "nothing is lost" in blind["next"]
        sched.unlink()
        sched.with_name("away").rename(sched)
        with anyio.fail_after(60):
            while "preview" not in (back := await call_ok(client, "get_result", {"task_id": tid})):
                await anyio.sleep(0.5)
        assert back["preview"] == "hello\n" and "unreadable" not in back


async def test_stage_in_to_a_site_the_envelope_rules_out_is_refused_with_a_fix(
    tmp_path: Path,
) -> None:
    """The task was accepted as "runs on devanvil" though its envelope excluded devanvil (it
    could never be placed), or included only devdelta (placed there, without its input); a
    fixed_site elsewhere was refused with an empty hint."""
    storage = tmp_path / "devfed"
    async with serve(tmp_path) as client:
        for site in ("devdelta", "devanvil"):
            (storage / site / "storage").mkdir(parents=True, exist_ok=True)
        (storage / "devdelta/storage/in.dat").write_text("x")
        move = {"source": "devdelta:scratch/in.dat", "destination": "devanvil:scratch/in.dat"}
        xid = (await call_ok(client, "move_data", move))["transfer_id"]
        task = {"command": ["cat", "in.dat"], "stage_in": [xid]}
        for envelope in (
            {**ENV, "sites_exclude": ["devanvil"]},
            {**ENV, "sites_include": ["devdelta"]},
        ):
            body = await call_error(client, "submit_task", {**task, "envelope": envelope})
            assert body["code"] == "usage"
            assert "arrive at devanvil" in body["message"] and "Allow devanvil" in body["hint"]
        body = await call_error(
            client, "submit_task", {**task, "envelope": ENV, "fixed_site": "devdelta"}
        )
        assert "Drop fixed_site" in body["hint"], body
        ok = await call_ok(client, "submit_task", {**task, "envelope": ENV})
        assert ok["decision"].endswith("(runs on devanvil)") or ok.get("site") == "devanvil", ok


async def _transfer_state(client: Client, transfer_id: str, want: str) -> dict[str, Any]:
    with anyio.fail_after(60):
        while True:
            read = await client.read_resource(f"fedhpc://transfers/{transfer_id}")
            view: dict[str, Any] = json.loads(read.contents[0].text)  # type: ignore[union-attr]
            if view["state"] == want:
                return view
            await anyio.sleep(0.3)


async def test_move_data_after_a_failure_says_how_to_copy_again_truly(tmp_path: Path) -> None:
    """'Failed: ... then call move_data again' while the same arguments return the same failed
    transfer at any age (a call without a key is keyed by the digest of its arguments)."""
    storage = tmp_path / "devfed"
    async with serve(tmp_path) as client:
        for site in ("devdelta", "devanvil"):
            (storage / site / "storage").mkdir(parents=True, exist_ok=True)
        args = {"source": "devdelta:scratch/late.dat", "destination": "devanvil:scratch/l.dat"}
        first = (await call_ok(client, "move_data", args))["transfer_id"]
        failed = await _transfer_state(client, first, "failed")
        assert failed["error"]["code"] == "source_missing"
        assert "new idempotency_key" in failed["error"]["hint"], failed["error"]  # was ""
        assert "again with a new idempotency_key" in failed["next"], failed["next"]
        (storage / "devdelta/storage/late.dat").write_text("here now\n")
        same = await call_ok(client, "move_data", args)  # a lost answer's retry: the same outcome
        assert same["transfer_id"] == first and "pass a new idempotency_key" in same["next"]
        new = await call_ok(client, "move_data", {**args, "idempotency_key": "retry-1"})
        await _transfer_state(client, new["transfer_id"], "succeeded")
        assert (storage / "devanvil/storage/l.dat").read_text() == "here now\n"
