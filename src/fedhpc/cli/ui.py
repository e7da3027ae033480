"""`fedhpc ui`: the read-only web dashboard on loopback, served from this CLI process (never the
daemon), from the daemon's REST API. Prints its URL (with a random token); `--open` opens it."""

from __future__ import annotations

import argparse
import errno
import os
import secrets
import socket
import sys
import webbrowser
from pathlib import Path

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.errors import DaemonUnavailable
from fedhpc.errors import UsageError
from fedhpc.settings.daemon import DaemonSettings

__all__ = ["DEFAULT_PORT", "add_parser", "url_file"]

DEFAULT_PORT = 8790
HOST = "127.0.0.1"


def url_file(home: Path) -> Path:
    """Where a running dashboard leaves its URL (mode 0600) for the demo and scripts."""
    return home / "ui.url"


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        busy = exc.errno == errno.EADDRINUSE
        raise UsageError(
            f"cannot listen on {HOST}:{port}: " + ("the port is in use" if busy else str(exc)),
            hint="Choose another with --port N, or --port 0 for any free port.",
        ) from exc
    sock.listen(64)
    return sock


async def _serve(args: argparse.Namespace, sock: socket.socket, token: str) -> None:
    # startup: the web server and the UI app only when `fedhpc ui` runs
    import uvicorn

    from fedhpc.ui.server import build_ui_app

    settings = DaemonSettings.from_env()
    port = sock.getsockname()[1]
    url = f"http://{HOST}:{port}/?token={token}"
    async with DaemonClient(settings) as client:
        saved = url_file(settings.home)
        app = build_ui_app(client, token=token, port=port, url_file=saved)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        server = uvicorn.Server(config)
        try:
            saved.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"{url}\npid {os.getpid()}\n")
        except OSError:
            saved = None  # type: ignore[assignment]
        print(f"fedhpc ui: {url}", flush=True)
        print(
            f"  read-only dashboard of the daemon at {settings.socket_path}; Ctrl-C stops it",
            flush=True,
        )
        if args.open:
            opened = webbrowser.open(url)
            if not opened:
                print("  (no browser could be started here: open the URL yourself)", flush=True)

        async def watch_daemon() -> None:
            misses = 0
            while misses < 3:
                await anyio.sleep(args.daemon_check_s)
                try:
                    await client.health()
                    misses = 0
                except DaemonUnavailable:
                    misses += 1
            print("fedhpc ui: the daemon has stopped; stopping the dashboard", flush=True)
            server.should_exit = True

        try:
            async with anyio.create_task_group() as tg:
                if args.exit_with_daemon:
                    tg.start_soon(watch_daemon)
                await server.serve(sockets=[sock])
                tg.cancel_scope.cancel()
        finally:
            if saved is not None and saved.exists() and saved.read_text().startswith(url):
                saved.unlink()


def _run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port", hint="Use 1-65535, or 0 for any.")
    sock = _bind(args.port)
    token = secrets.token_urlsafe(24)
    try:
        anyio.run(_serve, args, sock, token)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    sys.stdout.flush()
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ui", help="a read-only web dashboard on 127.0.0.1 (federation, timelines, deliveries)"
    )
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)",
    )
    p.add_argument("--open", action="store_true", help="open the dashboard in a browser")
    p.add_argument(
        "--exit-with-daemon",
        action="store_true",
        help="stop when the daemon has stopped (how the demo leaves it running)",
    )
    p.add_argument("--daemon-check-s", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_run)
