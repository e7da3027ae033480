"""A careless agent at `fedhpc serve` (the real MCP client over stdio, real daemon on the four
local-process sites): a made-up cursor, a mistyped accelerator, an empty envelope in replan
each get an answer that says what happened, never an empty one that reads as "nothing yet"."""

from __future__ import annotations

from pathlib import Path

from tests.integration.hostile_support import call_error, call_ok, serve


async def test_list_events_after_the_newest_seq_is_refused_naming_it(tmp_path: Path) -> None:
    """It answered an empty page with next_after = the made-up `after`: the agent kept
    polling past events that, when they came, had smaller seqs than its cursor."""
    async with serve(tmp_path) as client:
        page = await call_ok(client, "list_events", {"limit": 200})
        assert not page["more"]
        newest = page["next_after"]
        at_newest = await call_ok(client, "list_events", {"after": newest})
        assert (at_newest["events"], at_newest["next_after"]) == ([], newest)
        body = await call_error(client, "list_events", {"after": newest + 1000})
        assert body["code"] == "cursor_ahead"
        assert f"newest event (seq {newest})" in body["message"]
        assert f"after={newest}" in body["hint"]
        with_consumer = await call_error(
            client, "list_events", {"after": newest + 1, "consumer": "me"}
        )
        assert with_consumer["code"] == "cursor_ahead"


async def test_a_mistyped_accelerator_in_inspect_federation_is_an_error(tmp_path: Path) -> None:
    """'a1000' answered an empty federation, the same answer as "no such GPU free"."""
    async with serve(tmp_path) as client:
        body = await call_error(client, "inspect_federation", {"accelerator": "a1000"})
        assert body["code"] == "unknown_accelerator"
        assert body["fields"] == [
            {"field": "accelerator", "reason": "no accelerator type is called 'a1000'"}
        ]
        assert "The enabled sites offer: " in body["hint"] and "a100" in body["hint"]
        view = await call_ok(client, "inspect_federation", {"accelerator": "A100"})
        assert view["sites"] and all(
            p["accelerator"] == "a100" for s in view["sites"] for p in s["partitions"]
        )


async def test_replan_with_a_partial_envelope_keeps_the_tasks_other_fields(
    tmp_path: Path,
) -> None:
    """replan(envelope={}) replaced the whole envelope with the defaults: a 64-GPU task became
    a 1-CPU task, and the answer did not say so. Now the fields given replace the task's and
    the rest stay; the answer's decision names what was replaced."""
    two_cpus = {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 2, "max": 2}}
    async with serve(tmp_path) as client:
        task = await call_ok(
            client,
            "submit_task",
            {"command": ["true"], "envelope": {**two_cpus, "wall_time": {"min": "30d"}}},
        )
        assert task["state"] == "unschedulable", task
        args = {"task_id": task["task_id"]}
        # Nothing given: the task's 30-day wall time stays, so it still fits nowhere.
        body = await call_error(client, "replan", {**args, "envelope": {}})
        assert body["code"] == "usage" and "no feasible placement" in body["message"], body
        moved = await call_ok(client, "replan", {**args, "envelope": {"wall_time": {"min": 60}}})
        assert moved["shape"]["cpus"] == 2 and not moved["shape"].get("gpus"), moved
        assert moved["decision"].endswith(
            "envelope: wall_time replaced; the rest kept from the task"
        ), moved
