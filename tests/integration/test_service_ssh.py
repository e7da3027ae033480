"""`fedhpc service` with SSH sites (issue 34): the local Slurm federation behind a real sshd, a
real OpenID provider and the MCP SDK's HTTP client. Service mode refuses an SSH site whose login
the operator did not name; with every login named, a person's job runs under that account and
carries the person in its Slurm comment, as `scontrol show job` reports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from fedhpc_dev.devfed.sshd import SshFront
from tests.integration.conftest import Devfed
from tests.integration.daemon_util import FAST, stop
from tests.integration.oidc_support import free_port, oidc_provider
from tests.integration.test_service_people import SMALL, _client

FEDHPC = [sys.executable, "-m", "fedhpc.cli.main"]


def _config(path: Path, issuer: str, resource: str, port: int, logins: dict[str, str]) -> None:
    lines = [
        "[service]",
        f'issuer = "{issuer}"',
        f'resource = "{resource}"',
        'allowed_domains = ["lab.example"]',
        f'bind = "127.0.0.1:{port}"',
    ]
    for site, user in logins.items():
        lines += [f"[sites.{site}.transport]", f'user = "{user}"']
    path.write_text("\n".join(lines) + "\n")


def _check(env: dict[str, str], config: Path) -> tuple[int, dict[str, Any]]:
    out = subprocess.run(
        [*FEDHPC, "service", "--config", str(config), "--check", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return out.returncode, json.loads(out.stdout)


async def test_ssh_sites_run_under_the_named_login_and_each_job_names_its_person(
    devfed: Devfed, devfed_ssh: SshFront, tmp_path: Path
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")},
        **FAST,
        **devfed_ssh.env(),
        "FEDHPC_DEVFED": "1",
        "FEDHPC_HOME": str(tmp_path / "home"),
        "FEDHPC_LOG_LEVEL": "info",
    }
    with oidc_provider(tmp_path / "provider.log") as provider:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        config = tmp_path / "service.toml"

        # Only devdelta names its login: the other SSH sites are refused, each by name.
        _config(config, provider.issuer, resource, port, {"devdelta": devfed_ssh.user})
        code, summary = _check(env, config)
        sites = {s["site"]: s for s in summary["sites"]}
        assert code == 2 and not summary["ok"], summary
        assert all(s["transport"] == "ssh" for s in sites.values()), sites
        assert sites["devdelta"]["problem"] is None
        assert sites["devdelta"]["runs_as"] == f"{devfed_ssh.user}@devdelta"
        unnamed = {n for n, s in sites.items() if s["problem"]}
        assert unnamed == set(devfed.sites) - {"devdelta"}, sites
        refused = subprocess.run(
            [*FEDHPC, "service", "--config", str(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode != 0 and "names no login" in refused.stderr

        _config(
            config, provider.issuer, resource, port, dict.fromkeys(devfed.sites, devfed_ssh.user)
        )
        assert _check(env, config)[0] == 0
        log = tmp_path / "service.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [*FEDHPC, "service", "--config", str(config)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            _wait(proc, resource, log)
            token = provider.mint("alice", "fedhpc:read fedhpc:submit", resource)
            async with _client(resource, token) as alice:
                args = {
                    "command": ["sleep", "300"],
                    "envelope": SMALL,
                    "fixed_site": "devdelta",
                    "name": "service-ssh",
                }
                result = await alice.call_tool("submit_task", args)
                assert not result.is_error, result.content
                tid = json.loads(result.content[0].text)["task_id"]  # type: ignore[union-attr]
                job = await _job_id(alice, tid)
                shown = devfed.run("devdelta", "scontrol", "show", "job", job)
                assert shown.returncode == 0, shown.stderr
                assert f"Comment=fedhpc-for:{provider.issuer}|alice" in shown.stdout, shown.stdout
                assert f"UserId={devfed_ssh.user}(" in shown.stdout, shown.stdout
                cancelled = await alice.call_tool("cancel", {"task_id": tid})
                assert not cancelled.is_error, cancelled.content
        finally:
            stop(proc)


async def _job_id(client: Any, tid: str) -> str:
    with anyio.fail_after(240):
        while True:
            got = await client.call_tool("get_result", {"task_id": tid})
            body = json.loads(got.content[0].text)
            # Its attempts, or its one job flattened into the brief answer.
            jobs = [a.get("job_id") for a in body.get("attempts", [body]) if a.get("job_id")]
            if jobs:
                return str(jobs[-1])
            await anyio.sleep(0.5)


def _wait(proc: subprocess.Popen[bytes], resource: str, log: Path) -> None:
    meta = resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"fedhpc service exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx2.get(meta).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail("fedhpc service did not start listening")
