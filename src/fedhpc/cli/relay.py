"""What the `fedhpc` of a resume's PATH runs (`bridge.runtimes.fedhpc_bin`): a stdio
`fedhpc serve` is handed, with its stdin, stdout and stderr, to the preloaded host the bridge
keeps (`fedhpc.cli.preload`), which forks the same server with everything already imported;
this process waits and exits with the server's status. Everything else (a hook, `serve
--http`, no host, a host that does not answer) runs here as `fedhpc.cli.main` would.

Imports only the standard library and the settings registry before it knows which: its
start-up is on the path from a job's end to a resumed Codex turn's first model request."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from pathlib import Path

from fedhpc.settings import HOME  # the registry alone: ~10 ms, no pydantic

__all__ = ["RECORD", "STARTED", "main"]

RECORD = "serve-host.json"  # in the home folder: {pid, socket} of the running host
STARTED = b"started"  # the host's child says so first; its exit status follows


def _hand_over(argv: list[str]) -> int | None:
    """The server's exit status once the host ran it; None when no host took it."""
    home = os.environ.get(HOME.name)
    if not home or argv[:1] != ["serve"] or any(a.startswith("--http") for a in argv):
        return None
    try:
        where = json.loads((Path(home) / RECORD).read_text())["socket"]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(str(where))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    with conn:
        req = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
        try:
            socket.send_fds(conn, [json.dumps(req).encode()], [0, 1, 2])
        except OSError:
            return None  # not handed over: nothing ran, run it here
        answer = b""
        with contextlib.suppress(OSError):
            if conn.recv(16) != STARTED:
                return None  # the host refused or died before forking: nothing ran
            answer = conn.recv(16)
    text = answer.decode(errors="replace").strip()
    return int(text) if text.lstrip("-").isdigit() else 1


def main() -> int:
    argv = sys.argv[1:]
    code = _hand_over(argv)
    if code is not None:
        return code
    # Only now: a hand-over never loads the CLI (its start-up is the point of the relay).
    from fedhpc.cli.main import main as run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
