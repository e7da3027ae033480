"""A real OpenID provider for the service-mode tests (`oidc_provider.mjs`: panva's certified
`oidc-provider` from npm, pinned and cached like the MCP CLIs), and its two sign-in paths: the
client-credentials grant (a token per person, no browser) and the authorization-code flow with
PKCE through the provider's own login and consent forms (for the MCP SDK's OAuth client); and
what the facade's tests share: its service config, the SDK's OAuth client signing a person in."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.types import CallToolResult

from tests.integration.mcp_support import INITIALIZE
from tests.integration.npm_tools import CACHE, unavailable

PACKAGE, VERSION = "oidc-provider", "9.13.3"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def provider_lib() -> Path:
    """The installed package's entry module, installing it once into the npm cache."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed")
    folder = CACHE / f"{PACKAGE}@{VERSION}"
    lib = folder / "node_modules" / PACKAGE / "lib" / "index.js"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test runs install once
        if not lib.exists():
            argv = ["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund"]
            out = subprocess.run(
                [*argv, "--loglevel=error", f"{PACKAGE}@{VERSION}"],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if out.returncode != 0 or not lib.exists():
                unavailable(f"npm install {PACKAGE}@{VERSION} failed: {out.stderr[-400:]}")
    return lib


@dataclass(frozen=True)
class Provider:
    issuer: str

    def mint(self, person: str, scope: str, resource: str) -> str:
        """`person`'s access token (client credentials) with `scope`, bound to `resource`."""
        answer = httpx2.post(
            f"{self.issuer}/token",
            data={
                "grant_type": "client_credentials",
                "client_id": person,
                "client_secret": f"{person}-secret-for-tests-only",
                "scope": scope,
                "resource": resource,
            },
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["access_token"]
        return token


def _how(proc: subprocess.Popen[bytes]) -> str:
    """Why a provider is not up: its exit code, or its scheduler state and CPU time (a stopped
    process, one starved of CPU and one blocked in a call read differently)."""
    if proc.returncode is not None:
        return f"exit {proc.returncode}"
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        wchan = Path(f"/proc/{proc.pid}/wchan").read_text()
        load = Path("/proc/loadavg").read_text().split()[0]
    except OSError as e:
        return f"state unknown: {e}"
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return f"alive, state {fields[0]}, {cpu:.1f} s CPU, waiting in {wchan or '-'}, load {load}"


@contextmanager
def oidc_provider(
    log: Path, port: int | None = None, facade_redirect: str | None = None
) -> Iterator[Provider]:
    """The provider on a free loopback port (or `port`), its output in `log`, stopped at exit;
    with `facade_redirect`, the static client `fedhpc-facade` returning there."""
    lib = provider_lib()
    port = port or free_port()
    extra = {"FACADE_REDIRECT_URI": facade_redirect} if facade_redirect else {}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [shutil.which("node") or "node", str(SCRIPT), str(port)],
            env={
                "PATH": os.environ.get("PATH", os.defpath),
                "OIDC_PROVIDER_LIB": str(lib),
                **extra,
            },
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        issuer = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while b"ready " not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the OIDC provider did not start ({_how(proc)}): {log.read_text()[-800:]}"
                )
            time.sleep(0.1)
        yield Provider(issuer)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


_PROMPT = re.compile(r'name="prompt" value="(\w+)"')
# fedhpc's own consent page (the facade asks which client before sending the person upstream)
_HIDDEN = re.compile(r'<input type="hidden" name="([\w-]+)" value="([^"]*)"')


def consent_form(page: str) -> dict[str, str] | None:
    """The facade's consent page answered "allow" (the form's fields), or None for another."""
    if 'action="/consent"' not in page:
        return None
    return {**dict(_HIDDEN.findall(page)), "decision": "allow"}


async def sign_in(authorization_url: str, login: str, redirect_uri: str) -> dict[str, str]:
    """Walk the provider's own login and consent forms as `login`, as a person's browser
    would, up to the redirect back to the client; the redirect's query parameters."""
    async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as browser:
        url = authorization_url
        for _ in range(16):
            if url.startswith(redirect_uri):
                query = parse_qs(urlsplit(url).query)
                return {k: v[0] for k, v in query.items()}
            page = await browser.get(url)
            if page.is_redirect:
                url = urljoin(url, page.headers["location"])
                continue
            found = _PROMPT.search(page.text)
            consent = consent_form(page.text)
            assert page.status_code == 200 and (found or consent), page.text[:400]
            if consent:
                form = consent
            else:
                assert found is not None  # one of the two, by the assertion above
                form = {"prompt": found.group(1), "login": login, "password": "any"}
            posted = await browser.post(url, data=form)
            assert posted.is_redirect, posted.text[:400]
            url = urljoin(url, posted.headers["location"])
    raise AssertionError("the sign-in did not come back to the client")


async def bearer_initialize(url: str, token: str | None) -> httpx2.Response:
    """INITIALIZE posted to the MCP endpoint `url`, with `token` as the bearer (or none)."""
    headers = {"accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=60) as http:
        return await http.post(url, json=INITIALIZE, headers=headers)


def service_config(base: Path, provider: Provider, resource: str, *, extra: str = "") -> Path:
    """A service config (in `base`) trusting `provider`'s tokens for the MCP endpoint
    `resource`, for people of lab.example; `extra`: more lines of the `[service]` table, or
    tables after it."""
    config = base / "service.toml"
    config.write_text(
        "[service]\n"
        f'issuer = "{provider.issuer}"\n'
        f'resource = "{resource}"\n'
        'allowed_domains = ["lab.example"]\n' + extra
    )
    return config


def facade_config(
    base: Path,
    provider: Provider,
    own: str,
    *,
    scopes: Sequence[str] = ("openid", "email"),
    service: str = "",
    facade: str = "",
) -> Path:
    """A service config (in `base`) of fedhpc at `own` as the facade in front of `provider`,
    with the upstream client's secret in a file beside it; `service` and `facade` are extra
    lines for the `[service]` and `[service.facade]` tables."""
    secret = base / "upstream.secret"
    secret.write_text("fedhpc-facade-secret-for-tests-only\n")
    secret.chmod(0o600)
    listed = ", ".join(f'"{scope}"' for scope in scopes)
    table = (
        "[service.facade]\n"
        'client_id = "fedhpc-facade"\n'
        f'client_secret_file = "{secret}"\n'
        f"scopes = [{listed}]\n"
    )
    return service_config(base, provider, f"{own}/mcp", extra=service + table + facade)


class TokenMemory:
    """The OAuth client's token storage (a real client keeps it in a keyring or a file)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def sdk_oauth(
    resource: str, login: str, asked: list[str]
) -> tuple[OAuthClientProvider, TokenMemory]:
    """The MCP SDK's OAuth client for `resource` (a public client asking for fedhpc:read), and
    its storage: `login` signs in through the provider's forms as a browser would, and every
    authorization URL the client sends the browser to is appended to `asked`."""
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    answers: list[dict[str, str]] = []

    async def redirect_handler(url: str) -> None:  # the person's browser
        asked.append(url)
        answers.append(await sign_in(url, login, redirect))

    async def callback_handler() -> AuthorizationCodeResult:
        got = answers[-1]
        assert "code" in got, got
        return AuthorizationCodeResult(code=got["code"], state=got.get("state"), iss=got.get("iss"))

    storage = TokenMemory()
    oauth = OAuthClientProvider(
        server_url=resource,
        client_metadata=OAuthClientMetadata(
            client_name="fedhpc test agent",
            redirect_uris=[redirect],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
            scope="fedhpc:read",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    return oauth, storage


async def first_calls(
    resource: str, oauth: OAuthClientProvider
) -> tuple[CallToolResult, CallToolResult]:
    """inspect_federation, then submit_task without arguments, as a client signing in with
    `oauth` makes them (the first call starts the sign-in)."""
    http = httpx2.AsyncClient(auth=oauth, timeout=60)
    async with http, Client(streamable_http_client(resource, http_client=http)) as c:
        inspect = await c.call_tool("inspect_federation", {})
        submit = await c.call_tool("submit_task", {})
    return inspect, submit
