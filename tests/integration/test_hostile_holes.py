"""Holes a hostile or careless agent found at the MCP boundary (issue 32, item 5), through the
real MCP client over stdio against a real daemon on the local process sites: each answers a
typed error a client can read, and the ordinary call next to it still works."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import MCPError
from mcp.types import INVALID_PARAMS

from tests.integration.hostile_support import call_error, call_ok, serve
from tests.integration.mcp_support import FEDHPC

ENV = {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 1, "max": 1}, "wall_time": {"min": 60}}


async def test_outputs_outside_the_workdir_and_roots_are_refused_not_sized(
    tmp_path: Path,
) -> None:
    """get_result reported the size of /etc/passwd and /proc/self/environ: an existence oracle."""
    async with serve(tmp_path) as client:
        base = {"command": ["true"], "envelope": ENV}
        bad = ["/etc/passwd", "/proc/self/environ", "/", "//server/share/x"]
        body = await call_error(client, "submit_task", {**base, "outputs": bad})
        assert body["code"] == "validation"
        assert [f["field"] for f in body["fields"]] == ["outputs.2", "outputs.3"], body
        body = await call_error(client, "submit_task", {**base, "outputs": bad[:2]})
        assert body["code"] == "output_outside"
        assert [f["field"] for f in body["fields"]] == ["outputs[0]", "outputs[1]"], body
        assert "devdelta/storage" in body["fields"][0]["reason"]
        assert (await call_ok(client, "list_events", {}))["events"] == []
        # Relative to workdir, or inside a root: accepted and sized.
        root = tmp_path / "devfed/devdelta/storage"
        kept = f"{root}/kept.txt"
        write = f"echo hi > made.txt && echo kept > {kept}"
        args = {**base, "command": ["sh", "-c", write], "outputs": ["made.txt", kept]}
        task = await call_ok(client, "submit_task", args)
        assert task["site"] == "devdelta", task  # the only site whose roots hold `kept`
        with anyio.fail_after(60):
            while (got := await call_ok(client, "get_result", {"task_id": task["task_id"]}))[
                "state"
            ] != "completed":
                await anyio.sleep(0.3)
        sizes = {o["path"]: o.get("bytes") for o in got["outputs"] if o["kind"] == "artifact"}
        assert sizes[kept] == 5 and [v for k, v in sizes.items() if k.endswith("/made.txt")] == [3]


async def test_a_huge_or_odd_site_name_is_a_validation_error_not_internal(tmp_path: Path) -> None:
    """A 1 MiB site name in inspect_federation answered `internal` (InvalidURL: the query the
    server sends the daemon was too long); a name in a body was echoed whole."""
    huge = "a" * (1 << 20)
    async with serve(tmp_path) as client:
        body = await call_error(client, "inspect_federation", {"sites": ["devdelta", huge]})
        assert body["code"] == "validation"
        assert [f["field"] for f in body["fields"]] == ["sites.1"], body
        assert "at most 128 characters" in body["message"] and len(body["message"]) < 400
        body = await call_error(client, "inspect_federation", {"accelerator": huge})
        assert [f["field"] for f in body["fields"]] == ["accelerator"], body
        args = {"command": ["true"], "envelope": {**ENV, "sites_include": ["b" * 5000]}}
        body = await call_error(client, "submit_task", args)
        assert body["code"] == "site_not_usable" and len(body["message"]) < 400, body
        view = await call_ok(client, "inspect_federation", {"sites": ["devdelta"]})
        assert [s["site"] for s in view["sites"]] == ["devdelta"]


async def test_a_container_image_with_control_characters_is_refused_not_failed_later(
    tmp_path: Path,
) -> None:
    """It was accepted; the task then failed as "internal: ValidationError" (a NUL) or ran with
    the escape sequence in its job script."""
    async with serve(tmp_path) as client:
        base = {"command": ["true"], "envelope": ENV}
        for image in ("img\x1b]0;owned\x07", "img\x00"):
            body = await call_error(client, "submit_task", {**base, "container_image": image})
            assert body["code"] == "validation"
            assert [f["field"] for f in body["fields"]] == ["container_image"], body
            args = {**base, "envelope": {**ENV, "container": {"image": image}}}
            body = await call_error(client, "submit_task", args)
            assert [f["field"] for f in body["fields"]] == ["envelope.container.image"], body
            assert body["fields"][0]["reason"].startswith("contains U+00")
        assert (await call_ok(client, "list_events", {}))["events"] == []


async def test_a_bad_resource_id_is_an_invalid_params_error_carrying_the_typed_body(
    tmp_path: Path,
) -> None:
    """resources/read of fedhpc://groups/<bad id> answered -32603 (internal error) with the
    typed body as a JSON string inside the message; resources have no isError result, so the
    body is the error's `data`, and the code says it is the caller's to fix."""
    async with serve(tmp_path) as client:
        cases = {
            "fedhpc://groups/bad id": ("validation", [{"field": "group_id"}]),
            "fedhpc://tasks/t..x": ("validation", [{"field": "task_id"}]),
            "fedhpc://groups/gnosuchgroup1": ("not_found", None),
            "fedhpc://transfers/xnosuchxfer1": ("not_found", None),
        }
        for uri, (code, fields) in cases.items():
            with pytest.raises(MCPError) as err:
                await client.read_resource(uri)
            e = err.value.error
            assert e.code == INVALID_PARAMS, (uri, e)
            assert isinstance(e.data, dict) and e.data["code"] == code, (uri, e)
            assert e.data["uri"] == uri and e.data["hint"] and e.message == e.data["message"]
            assert not e.message.startswith("{"), e.message
            if fields:
                assert [{"field": f["field"]} for f in e.data["fields"]] == fields
        base = {"objective": "o", "children": [{"command": ["true"]}], "envelope": ENV}
        gid = (await call_ok(client, "submit_group", base))["group_id"]
        read = await client.read_resource(f"fedhpc://groups/{gid}")
        assert json.loads(read.contents[0].text)["group_id"] == gid  # type: ignore[union-attr]


ESC_TITLE, CLEAR = "\x1b]0;owned\x07", "\x1b[2J\x1b[H"


def _cli(tmp_path: Path, *argv: str) -> str:
    """A `fedhpc` command's stdout on a pipe (colour off), against the test's daemon."""
    env = {
        **os.environ,
        "FEDHPC_HOME": str(tmp_path / "h"),
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed"),
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [FEDHPC, *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_the_terminal_views_show_an_agents_escape_sequences_never_run_them(
    tmp_path: Path,
) -> None:
    """`fedhpc group ID` printed a submitted objective's OSC title and clear screen raw: an
    agent could rewrite the operator's terminal. Job output shown by `fedhpc task` too."""
    noisy = f"printf '{ESC_TITLE}{CLEAR}out\\r\\n'; exit 3"
    async with serve(tmp_path) as client:
        group = {
            "objective": f"sweep {ESC_TITLE}{CLEAR}\u202egnp.exe",
            "children": [{"command": ["sh", "-c", noisy]}],
            "envelope": ENV,
            "adaptation": {"max_retries": 0},
        }
        gid = (await call_ok(client, "submit_group", group))["group_id"]
        with anyio.fail_after(60):
            while True:
                view = json.loads(
                    (await client.read_resource(f"fedhpc://groups/{gid}")).contents[0].text  # type: ignore[union-attr]
                )
                if view["state"] not in {"running", "queued", "submitted", "pending"}:
                    break
                await anyio.sleep(0.3)
        tid = view["children"][0]["task_id"]
        shown = {
            "group": await anyio.to_thread.run_sync(_cli, tmp_path, "group", gid),
            "timeline": await anyio.to_thread.run_sync(_cli, tmp_path, "group", gid, "--timeline"),
            "task": await anyio.to_thread.run_sync(_cli, tmp_path, "task", tid),
            "tasks": await anyio.to_thread.run_sync(_cli, tmp_path, "tasks"),
            "events": await anyio.to_thread.run_sync(_cli, tmp_path, "events"),
        }
    for name, out in shown.items():
        bad = [c for c in out if c in "\x1b\x07\r\u202e" or 0x80 <= ord(c) <= 0x9F]
        assert not bad, (name, out)
    assert "sweep \\x1b]0;owned\\x07\\x1b[2J\\x1b[H\\u202egnp.exe" in shown["group"]
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x1b[Hout\\r\n" in shown["task"], shown["task"]
