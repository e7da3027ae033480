"""`fedhpc relay`: on the person's own machine, resume their agent when their work on a fedhpc
service ends (`fedhpc.client.relay`). The module is not `relay`: that name is the launcher a
resume's PATH runs (`fedhpc.cli.relay`)."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from pathlib import Path

import anyio

__all__ = ["add_parser"]


def _relay_cmd(args: argparse.Namespace) -> int:
    # This command's own imports (the MCP client, the bridge): not loaded for any other.
    from pydantic import ValidationError  # the command's own

    from fedhpc.client.relay import RelayConfig, read_token, run_relay  # the command's own
    from fedhpc.client.relay_bindings import BINDINGS  # the command's own
    from fedhpc.errors import UsageError  # the command's own
    from fedhpc.ops.continuations import ContinuationSpec  # the command's own
    from fedhpc.settings import fedhpc_home  # the command's own

    try:
        spec = (
            ContinuationSpec.model_validate_json(args.continuation) if args.continuation else None
        )
    except ValidationError as exc:
        raise UsageError(
            f"--continuation is not a continuation: {exc.errors()[0]['msg']}",
            hint='e.g. \'{"runtime": "claude-code", "session_id": "<id>", "cwd": "<folder>"}\'',
        ) from None
    if not 0 < args.wait_s <= 60:  # list_events takes at most 60
        raise UsageError(f"--wait-s {args.wait_s:g}: give 0 < s <= 60", hint="e.g. --wait-s 30")
    if (args.token_file is None) == (not args.sign_in):
        raise UsageError(
            "give --sign-in or --token-file (one of them)",
            hint="--sign-in: sign in once in a browser; the relay refreshes its token itself.",
        )
    token_file = Path(args.token_file).expanduser() if args.token_file else None
    if token_file is not None:
        read_token(token_file)  # refused now, not at the first connection, when it cannot serve
    cfg = RelayConfig(
        service=args.service,
        token_file=token_file,
        consumer=args.consumer or f"relay-{socket.gethostname()}"[:64],
        spec=spec,
        home=Path(args.home).expanduser() if args.home else fedhpc_home() / "relay",
        bindings=fedhpc_home() / "relay" / BINDINGS,  # where `fedhpc hook post-tool-use` writes
        wait_s=args.wait_s,
        callback_port=args.callback_port,
    )

    async def main() -> None:
        stopping = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        stopping.set()
                        return

            tg.start_soon(on_signal)
            await run_relay(cfg, stopping)
            tg.cancel_scope.cancel()

    print(f"fedhpc relay: following {cfg.service} as {cfg.consumer}", file=sys.stderr)
    anyio.run(main)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "relay",
        help="resume your agent on this machine when your work on a fedhpc service ends",
        description="Follow your events on a fedhpc service (docs/service.md) and resume the "
        "agent session --continuation names, here, once per event, across restarts.",
    )
    p.add_argument("--service", required=True, help="the service's MCP URL (…/mcp)")
    p.add_argument(
        "--sign-in",
        action="store_true",
        help="sign in in a browser once (OAuth, PKCE); tokens kept 0600 and refreshed",
    )
    p.add_argument("--token-file", help="instead: a file (chmod 600) holding an access token")
    p.add_argument(
        "--callback-port", type=int, default=8976, help="the sign-in's return port (loopback)"
    )
    p.add_argument(
        "--continuation",
        help="what to resume for work no session was recorded for (the PostToolUse hook "
        "records Claude's), as JSON: a ContinuationSpec (docs/continuation.md)",
    )
    p.add_argument("--consumer", help="your cursor's name on the service (default relay-<host>)")
    p.add_argument("--home", help="the relay's folder (default <FEDHPC_HOME>/relay)")
    p.add_argument("--wait-s", type=float, default=30.0, help="each long poll's wait, up to 60 s")
    p.set_defaults(func=_relay_cmd)
