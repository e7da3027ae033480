"""`fedhpc service`: fedhpc for a team (issue 34, docs/service.md). One process runs the
daemon (a child, stopped with it) and the HTTP MCP endpoint as an OAuth resource server, both
from one config file with a `[service]` section; `--check` says what it would run."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

from fedhpc.domain.config import Site, UserConfig
from fedhpc.domain.service import ServiceConfig
from fedhpc.errors import UsageError
from fedhpc.profiles import load_federation, load_user_config, user_config_path
from fedhpc.settings import CONFIG

__all__ = ["Identity", "add_parser", "site_identities"]

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Identity:
    """Under which identity a site runs every person's jobs in service mode."""

    site: str
    transport: str  # ssh | local | globus-compute
    runs_as: str | None  # ssh: user@host the operator configured; None when not named
    problem: str | None = None


def site_identities(sites: dict[str, Site], *, facade: bool = False) -> list[Identity]:
    """Each enabled site's identity. An SSH site must name its login (`[sites.X.transport]
    user`, not left to ~/.ssh/config or the service's own user name): a person's MFA session
    cannot be carried into a shared service, so every job there runs under the account the
    operator names (docs/service.md). A site marked `identity = "person"` runs each person
    with their own Globus Compute sign-in: a Globus Compute site, with the `facade`."""
    out = []
    for name in sorted(sites):
        site = sites[name]
        t = site.transport
        if site.user.identity == "person":
            problem = None
            if t.kind != "globus-compute":
                problem = f'site {name}: identity = "person" needs a globus-compute transport'
            elif not facade:
                problem = (
                    f'site {name}: identity = "person" needs [service.facade] (people sign in '
                    "through fedhpc, which keeps their Globus Compute tokens)"
                )
            runs_as = f"each person's own Globus Compute sign-in, endpoint {t.endpoint_id}"
            out.append(Identity(name, t.kind, runs_as, problem))
        elif t.kind == "ssh":
            user = t.user
            problem = (
                None
                if user
                else f"site {name} is reached over SSH but names no login: set "
                f'[sites.{name}.transport] user = "<the account every job there runs under>"'
            )
            out.append(Identity(name, t.kind, f"{user}@{t.host}" if user else None, problem))
        elif t.kind == "globus-compute":
            out.append(Identity(name, t.kind, f"endpoint {t.endpoint_id}"))
        else:
            out.append(Identity(name, t.kind, "the service's own user"))
    return out


def _config_path(args: argparse.Namespace) -> Path:
    if args.config:
        return Path(args.config).expanduser().resolve()
    found = CONFIG.read()
    return Path(found).expanduser().resolve() if found else user_config_path()


def _load(path: Path) -> tuple[UserConfig, ServiceConfig, list[Identity]]:
    if not path.is_file():
        raise UsageError(f"no config file at {path}", hint="Pass --config /path/to/service.toml.")
    config = load_user_config(path)
    if config.service is None:
        raise UsageError(
            f"{path} has no [service] section: fedhpc service needs an issuer, the public "
            "resource URL and who may sign in",
            hint="See docs/service.md (Configure it) and contrib/service.example.toml.",
        )
    sites = load_federation(config, config_path=path)
    return config, config.service, site_identities(sites, facade=config.service.facade is not None)


def _summary(path: Path, service: ServiceConfig, ids: list[Identity]) -> dict[str, Any]:
    return {
        "config": str(path),
        "issuer": service.issuer,
        "resource": service.resource,
        "bind": service.bind,
        "allowed_domains": list(service.allowed_domains),
        "allowed_subjects": list(service.allowed_subjects),
        # With the facade, fedhpc issues the tokens and signs people in at `issuer`.
        "facade": (
            {"issuer": service.own_issuer, "upstream_client": service.facade.client_id}
            if service.facade is not None
            else None
        ),
        "sites": [asdict(i) for i in ids],
    }


def _print_summary(summary: dict[str, Any]) -> None:
    print(f"config    {summary['config']}")
    print(f"issuer    {summary['issuer']}")
    print(f"resource  {summary['resource']} (served at http://{summary['bind']})")
    if facade := summary["facade"]:
        print(
            f"facade    fedhpc issues tokens as {facade['issuer']}, signing people in "
            f"upstream as client {facade['upstream_client']}"
        )
    who = [*summary["allowed_domains"], *summary["allowed_subjects"]]
    print(f"who       {', '.join(who)}")
    for s in summary["sites"]:
        print(f"site      {s['site']}: {s['transport']}, runs as {s['runs_as'] or '?'}")
        if s["problem"]:
            print(f"  problem {s['problem']}")


def _die_with_parent() -> None:
    """In the daemon child, before exec: SIGTERM when `fedhpc service` dies, however it dies
    (a SIGKILL leaves no handler to stop it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=60)  # the daemon's grace for its in-flight calls
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the SIGTERM it handled once the endpoint stopped: end by unwinding
    # (the daemon child is stopped on the way out), not by the default action.
    raise SystemExit(128 + signum)


async def _serve(
    host: str, port: int, path: Path, daemon: subprocess.Popen[bytes], wait_s: float
) -> int:
    # startup: the MCP SDK and the web server only for this command
    from fedhpc.mcp_server import build_server
    from fedhpc.mcp_server.service_http import run_service_http
    from fedhpc.service import load_service
    from fedhpc.settings.daemon import DaemonSettings

    auth = load_service(path)
    assert auth is not None  # _load checked the section
    server = build_server(
        DaemonSettings.from_env(), autostart=False, daemon_wait_s=wait_s, service=auth
    )
    exited: list[int] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            exited.append(await anyio.to_thread.run_sync(daemon.wait, abandon_on_cancel=True))
            tg.cancel_scope.cancel()  # no daemon, no service: exit for the supervisor to restart

        tg.start_soon(watch)
        try:
            await run_service_http(server, host, port, auth)
        except SystemExit as stopped:  # SIGTERM, re-raised by uvicorn once it stopped serving
            tg.cancel_scope.cancel()
            return int(stopped.code or 0) and 0
        tg.cancel_scope.cancel()
    if exited:
        print(f"fedhpc service: the daemon exited ({exited[0]}); stopping", file=sys.stderr)
        return 1
    return 0


def _service(args: argparse.Namespace) -> int:
    path = _config_path(args)
    _, service, ids = _load(path)
    summary = _summary(path, service, ids)
    problems = [i.problem for i in ids if i.problem]
    if args.check:
        if args.json:
            print(json.dumps({**summary, "ok": not problems}, indent=2))
        else:
            _print_summary(summary)
        return 2 if problems else 0
    if problems:
        raise UsageError("; ".join(problems), hint="fedhpc service --check lists every site.")
    bind = args.bind or service.bind
    host, port = ServiceConfig.model_validate(
        {**service.model_dump(), "bind": bind}
    ).host_port  # the same checks as the config's own
    # The daemon, the endpoint and every resume they start read this one file.
    os.environ[CONFIG.name] = str(path)
    daemon = subprocess.Popen(  # what `fedhpc daemon` re-executes as (client.start)
        [sys.executable, "-m", "fedhpc.daemon"],
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads yet: nothing else is forking)
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return anyio.run(_serve, host, port, path, daemon, args.daemon_wait)
    except KeyboardInterrupt:
        return 130
    finally:
        _stop(daemon)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "service",
        help="fedhpc for a team: the daemon and the OAuth-protected HTTP MCP endpoint",
        description="Runs the daemon and the HTTP MCP endpoint (an OAuth 2.1 resource server) "
        "from a config with a [service] section, for several people at once. Put a TLS "
        "reverse proxy in front for the public resource URL. See docs/service.md.",
    )
    s.add_argument("--config", metavar="PATH", help=f"the config file (default ${CONFIG.name})")
    s.add_argument("--bind", metavar="HOST:PORT", help="override [service] bind")
    s.add_argument(
        "--check",
        action="store_true",
        help="say what would run (provider, resource, each site's identity) and exit: 0 when "
        "it can run, 2 when a site needs an identity",
    )
    s.add_argument("--json", action="store_true", help="--check as JSON")
    s.add_argument(
        "--daemon-wait",
        type=float,
        default=60.0,
        metavar="S",
        help="how long a request waits for the daemon while it starts or restarts (default 60)",
    )
    s.set_defaults(func=_service)
