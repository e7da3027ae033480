"""The official MCP conformance suite's authorization-server scenarios (npm
`@modelcontextprotocol/conformance`, `conformance authorization`) against `fedhpc serve --http`
with `[service.facade]`: fedhpc as the MCP clients' authorization server, signing people in at a
real OpenID provider. The suite is the client; this test is the person's browser. Its other
authorization scenarios (`auth/*`) test MCP clients against the suite's own mock servers;
docs/service.md says which were run and why."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import anyio
import httpx2
import pytest

from tests.integration.daemon_util import start, stop
from tests.integration.mcp_support import serve_argv, serve_env
from tests.integration.npm_tools import npm_tool
from tests.integration.oidc_support import facade_config, free_port, oidc_provider, sign_in
from tests.integration.test_mcp_conformance import CONFORMANCE, NODE

# Every authorization-server scenario the installed suite has (`conformance list`).
SCENARIOS = ("authorization-server-metadata-endpoint", "authorization-code-grant")
# Client ID metadata documents (SEP-991): the facade registers clients by RFC 7591 only, and the
# suite rates their absence a warning ("SHOULD"), never a failure.
NOT_BUILT = frozenset({"authorization-server-metadata-cimd"})
_ASK = "Access the following URL in your browser"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fedhpc's own issuer (the resource's origin), the facade in front of oidc-provider."""
    base = tmp_path_factory.mktemp("conformance-auth")
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(base / "devfed")}
    home, port = base / "h", free_port()
    own = f"http://127.0.0.1:{port}"
    with oidc_provider(base / "provider.log", facade_redirect=f"{own}/callback") as provider:
        config = facade_config(base, provider, own)
        daemon = start(home, **env)
        argv = [*serve_argv("--http", "--port", str(port), "--no-autostart"), "--daemon-wait", "60"]
        with (base / "serve.log").open("wb") as err:
            serve = subprocess.Popen(
                argv,
                env=serve_env(home, FEDHPC_CONFIG=str(config), **env),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            _wait_listening(own, serve, base / "serve.log")
            yield own
        finally:
            stop(serve)
            stop(daemon)


def _wait_listening(own: str, serve: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            pytest.fail(f"serve exited {serve.returncode}: {log.read_text()[-1500:]}")
        try:
            httpx2.get(f"{own}/.well-known/oauth-authorization-server", timeout=5)
        except httpx2.TransportError:
            time.sleep(0.2)
            continue
        return
    pytest.fail("serve did not start listening")


async def _register(own: str, redirect: str) -> str:
    """A public MCP client (PKCE, no secret) registered with fedhpc by RFC 7591."""
    metadata = {
        "client_name": "MCP conformance suite",
        "redirect_uris": [redirect],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{own}/register", json=metadata)
    assert answer.status_code == 201, answer.text
    client_id: str = answer.json()["client_id"]
    return client_id


async def _run_as_browser(argv: list[str], redirect: str) -> str:
    """Run the suite; when it asks for a browser, sign in at the URL it prints (fedhpc, then
    the provider's forms) and deliver fedhpc's redirect to the suite's callback."""
    said: list[str] = []
    async with await anyio.open_process(argv, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        pending, asked = "", False
        async for chunk in proc.stdout:
            pending += chunk.decode(errors="replace")
            *lines, pending = pending.split("\n")
            said += lines
            for line in lines:
                if asked and line.startswith("http"):
                    back = await sign_in(line.strip(), "erin@lab.example", redirect)
                    async with httpx2.AsyncClient(timeout=30) as http:
                        delivered = await http.get(f"{redirect}?{urlencode(back)}")
                    assert delivered.status_code == 200, delivered.text
                asked = asked or _ASK in line
        await proc.wait()
    return "\n".join([*said, pending])


async def test_the_authorization_server_scenarios_pass_against_the_facade(
    issuer: str, tmp_path: Path
) -> None:
    node, suite = npm_tool(*NODE), npm_tool(*CONFORMANCE)
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/callback"
    client_id = await _register(issuer, redirect)
    out = tmp_path / "out"
    argv = [str(node), str(suite), "authorization", "--url", issuer, "--client-id", client_id]
    argv += ["--resource", f"{issuer}/mcp", "--port", str(port), "-o", str(out)]
    with anyio.fail_after(240):
        said = await _run_as_browser(argv, redirect)
    for scenario in SCENARIOS:
        results = sorted(out.glob(f"*{scenario}*/checks.json"))
        assert results, f"{scenario} left no results: {said[-2000:]}"
        checks = json.loads(results[-1].read_text())
        assert checks, f"{scenario}: no checks ran"
        wrong = [
            (c["id"], c["status"], c.get("errorMessage"))
            for c in checks
            if c["status"] != "SUCCESS" and not (c["id"] in NOT_BUILT and c["status"] == "WARNING")
        ]
        assert not wrong, f"{scenario}: {wrong}\n{said[-2000:]}"
