"""Every typed error has a class that decides its HTTP status and CLI exit code; only a bug is
internal (500, exit 70); --json prints errors as JSON."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
from pathlib import Path

import pytest

import fedhpc
from fedhpc.errors import EXIT_CODES, HTTP_STATUS, ErrorKind, FedError, ValidationFailed
from tests.unit.test_cli import FEDHPC

# The errors that do mean "fedhpc failed"; every other one is the caller's, a site's or a
# service's, and must not answer 500. RemoteError (client/wire.py) carries the daemon's own kind.
INTERNAL = {"FedError", "InternalError", "_Internal", "RemoteError"}


def _all_errors() -> list[type[FedError]]:
    for mod in pkgutil.walk_packages(fedhpc.__path__, "fedhpc."):
        if ".demo" in mod.name or mod.name.endswith("__main__"):
            continue
        importlib.import_module(mod.name)
    out: list[type[FedError]] = []
    todo: list[type[FedError]] = [FedError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_every_kind_has_a_status_and_an_exit_code() -> None:
    assert set(HTTP_STATUS) == set(ErrorKind) == set(EXIT_CODES)
    assert HTTP_STATUS[ErrorKind.INTERNAL] == 500
    assert sorted(s for k, s in HTTP_STATUS.items() if k is not ErrorKind.INTERNAL) == [
        400,
        404,
        409,
        413,
        422,
        503,
    ]


@pytest.mark.parametrize("cls", _all_errors(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_no_typed_error_but_a_bug_answers_500(cls: type[FedError]) -> None:
    if cls.__name__ in INTERNAL:
        return
    assert cls.kind is not ErrorKind.INTERNAL, f"{cls.__name__} ({cls.code}) would answer 500"
    if cls.code == "not_found":
        assert cls.kind is ErrorKind.NOT_FOUND


def test_named_errors_map_to_their_documented_status() -> None:
    from fedhpc.client.errors import DaemonUnavailable
    from fedhpc.daemon.guard import status_of
    from fedhpc.errors import OverBudget, TooLarge
    from fedhpc.orchestrator.book import TaskNotFound
    from fedhpc.transfer.errors import BadDataRef, TransferUnavailable, UnknownSite

    cases = {
        BadDataRef("x"): 422,
        UnknownSite("x"): 404,
        TaskNotFound("x"): 404,
        TooLarge("x"): 413,
        OverBudget("x"): 503,
        TransferUnavailable("x"): 503,
        DaemonUnavailable("x"): 503,
        ValidationFailed([]): 422,
    }
    assert {type(e).__name__: status_of(e) for e in cases} == {
        type(e).__name__: s for e, s in cases.items()
    }


def test_cli_json_errors_are_json_on_stdout_with_the_class_exit_code(tmp_path: Path) -> None:
    env = {**os.environ, "FEDHPC_HOME": str(tmp_path / "nohome"), "FEDHPC_DEVFED": ""}
    out = subprocess.run(
        [FEDHPC, "tasks", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == EXIT_CODES[ErrorKind.UNAVAILABLE] == 6, out
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "daemon_unavailable" and error["kind"] == "unavailable"
    assert error["hint"]
    plain = subprocess.run(
        [FEDHPC, "tasks"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert plain.returncode == 6 and plain.stdout == ""
    assert plain.stderr.startswith("error[daemon_unavailable]: ")


def test_an_unknown_site_exits_not_found() -> None:
    out = subprocess.run(
        [FEDHPC, "sites", "show", "nosuchsite"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == EXIT_CODES[ErrorKind.NOT_FOUND] == 4
    assert out.stderr.startswith("error[not_found]: no site profile named 'nosuchsite'")
