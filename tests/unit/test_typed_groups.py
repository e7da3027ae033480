"""Typed errors raised inside task groups reach every face as themselves (code, message, hint):
the CLI, an MCP tool result and a REST answer; a refused ssh option through `fedhpc probe`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from fedhpc.adapters.transports.base import TransportError, TransportMisconfigured
from fedhpc.daemon.guard import guard
from fedhpc.domain.job import JobState
from fedhpc.errors import EXIT_CODES, NotFound, typed_error, typed_errors
from fedhpc.exit_codes import run_command
from fedhpc.mcp_server.results import guarded
from fedhpc.ops.task_views import ChildView, GroupView
from fedhpc.ops.tasks import ResultRequest
from fedhpc.ui.server import build_ui_app

BAD_OPTION = TransportMisconfigured("delta: ssh option 'IdentityFile' is not allowed", hint="h")


async def _in_a_task_group(*errors: Exception) -> None:
    async def fail(exc: Exception) -> None:
        raise exc

    async with anyio.create_task_group() as tg:
        for exc in errors:
            tg.start_soon(fail, exc)


def test_typed_errors_are_found_in_nested_groups_in_order() -> None:
    inner = ExceptionGroup("inner", [BAD_OPTION, NotFound("no such task")])
    outer = BaseExceptionGroup("outer", [inner, TransportError("reset")])
    assert [e.code for e in typed_errors(outer)] == ["transport_config", "not_found", "transport"]
    assert typed_error(outer) is BAD_OPTION
    assert typed_errors(BAD_OPTION) == [BAD_OPTION]


def test_an_untyped_leaf_makes_the_whole_group_untyped() -> None:
    group = ExceptionGroup("g", [BAD_OPTION, ExceptionGroup("h", [RuntimeError("bug")])])
    assert typed_errors(group) == []
    assert typed_error(RuntimeError("bug")) is None


class Answer(BaseModel):
    ok: bool


async def test_an_mcp_tool_answers_the_typed_error_raised_in_its_task_group() -> None:
    @guarded()
    async def tool() -> Answer:
        await _in_a_task_group(BAD_OPTION)
        return Answer(ok=True)

    result = await tool()
    assert isinstance(result, CallToolResult)
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    body = json.loads(result.content[0].text)
    assert body == {"code": "transport_config", "message": BAD_OPTION.message, "hint": "h"}


async def test_a_rest_route_answers_the_typed_error_raised_in_its_task_group() -> None:
    async def route(request: Request) -> Response:
        await _in_a_task_group(BAD_OPTION)
        raise AssertionError("the task group raised nothing")

    handler = guard(route)
    request = Request({"type": "http", "method": "GET", "path": "/v1/x", "headers": []})
    response = await handler(request)
    assert response.status_code == 422
    assert json.loads(bytes(response.body)) == BAD_OPTION.as_dict()


def test_the_cli_prints_each_typed_error_of_a_group_and_exits_with_the_first_ones_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def func(args: argparse.Namespace) -> int:
        anyio.run(_in_a_task_group, BAD_OPTION, NotFound("no such site"))
        return 0

    code = run_command(argparse.Namespace(func=func))
    err = capsys.readouterr().err
    assert code == EXIT_CODES[BAD_OPTION.kind] == 3
    assert "error[transport_config]: delta: ssh option 'IdentityFile' is not allowed" in err
    assert "error[not_found]: no such site" in err
    assert "Traceback" not in err


def test_fedhpc_probe_with_a_refused_ssh_option_prints_the_typed_error_and_exits_3(
    isolated_home: Path,
) -> None:
    (isolated_home / "config.toml").write_text(
        '[sites.delta.transport.options]\nIdentityFile = "~/.ssh/id_delta"\n'
        '[sites.anvil.transport.options]\nProxyCommand = "nc %h %p"\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "probe", "delta", "anvil"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    # Each site is reported, in the order asked, both failed: the typed error of each.
    assert out.stdout.splitlines() == [
        "delta: failed  error[transport_config] (on stderr)",
        "anvil: failed  error[transport_config] (on stderr)",
    ]
    lines = out.stderr.splitlines()
    assert lines[0] == (
        "error[transport_config]: delta: ssh option 'IdentityFile' is not allowed in "
        "[transport] options; fedhpc's own key for it is 'identity_file'"
    )
    assert lines[1].startswith(
        'hint: Write identity_file = "..." instead of IdentityFile in '
        "[sites.delta.transport.options] in config.toml"
    )
    assert "error[transport_config]: anvil: ssh option 'ProxyCommand' is not allowed" in lines[2]


def test_fedhpc_probe_json_lists_the_typed_error_under_its_site(isolated_home: Path) -> None:
    (isolated_home / "config.toml").write_text(
        '[sites.delta.transport.options]\nIdentityFile = "~/.ssh/id_delta"\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "probe", "delta", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 3, out.stderr
    (entry,) = json.loads(out.stdout)
    assert entry["site"] == "delta"
    error = entry["error"]
    assert (error["code"], error["kind"]) == ("transport_config", "validation")
    assert "identity_file" in error["hint"]


def test_fedhpc_probe_help_documents_its_exit_status() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "probe", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "the code of the first such site's error (3 for a refused ssh option" in text
    assert "The other sites are probed and printed either way." in text


class _GoneChildren:
    """A daemon that lists a group whose children have all gone (every read: not_found)."""

    async def group(self, group_id: str, limit: int = 0, after: str | None = None) -> GroupView:
        kids = tuple(ChildView(task_id=f"{group_id}-{i}", state=JobState.QUEUED) for i in (1, 2))
        return GroupView(
            group_id=group_id,
            objective="o",
            state="running",
            round=1,
            size=2,
            child_ids=f"{group_id}-1 … {group_id}-2",
            counts={},
            children=kids,
        )

    async def get_result(self, req: ResultRequest) -> None:
        raise NotFound(f"no task {req.task_id}", hint="List tasks with `fedhpc tasks`.")


async def test_the_dashboard_answers_a_typed_error_raised_in_its_task_group() -> None:
    app = build_ui_app(_GoneChildren(), token="t", port=8790)  # type: ignore[arg-type]
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8790") as h:
        got = await h.get("/api/groups/g1/timeline", headers={"X-Fedhpc-Token": "t"})
    assert got.status_code == 404
    assert got.json()["code"] == "not_found"
    assert got.json()["message"].startswith("no task g1-")
