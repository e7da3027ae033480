"""A preloaded `fedhpc serve` for Codex resumes (issue 37): Codex starts its registered stdio
server, `fedhpc serve`, at every resumed turn and waits for it before the turn's first model
request; importing the MCP SDK and fedhpc is most of that wait (about 0.6 s idle, 4 s and more
on a loaded machine). This host imports everything once and waits on a Unix socket; for each
`fedhpc serve` that the relay (`fedhpc.cli.relay`) hands over, with its stdin, stdout and
stderr, its arguments, environment and folder, it forks a child that runs the very same
`fedhpc serve` in that environment on those descriptors. The relay waits for the child's exit
status and exits with it; the child ends the moment its relay does (the socket closes), so
killing the resume's process group ends its server too.

Only the same user may connect (the socket's folder is 0700 and the peer's uid is checked).
The bridge starts the host and ends it with the daemon (`bridge/serve_host.py`); a relay that
finds no host runs `fedhpc serve` itself, as before."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import structlog

from fedhpc.cli.relay import STARTED
from fedhpc.logs import configure_logging

__all__ = ["MAX_REQUEST", "serve_forever"]

log = structlog.get_logger(__name__)

MAX_REQUEST = 1 << 20  # one hand-over: argv, environment and folder (an environment is KiBs)
_FDS = 3  # stdin, stdout, stderr


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def _child(
    conn: socket.socket, listener: socket.socket, fds: list[int], req: dict[str, Any]
) -> None:
    """In the forked child: become the relay's `fedhpc serve`; never returns."""
    code = 1
    try:
        conn.send(STARTED)
        listener.close()
        os.setpgid(0, 0)  # its own group: ending the host never ends a server in use
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in req["env"].items()})
        os.chdir(str(req["cwd"]))

        def watch() -> None:  # the relay is gone (killed with its resume): so is this server
            with contextlib.suppress(OSError):
                while conn.recv(16):
                    pass
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
        # Already imported by the host (serve_forever); named here, where the child runs it.
        from fedhpc.cli.main import main

        try:
            code = main([str(a) for a in req["argv"]])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # the child must never fall back into the host's loop
        with contextlib.suppress(Exception):
            os.write(2, f"fedhpc serve (preloaded): {exc!r}\n".encode())
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.send(str(code).encode())
        os._exit(code)


def _accept(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        if _peer_uid(conn) != os.getuid():
            return
        msg, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, _FDS)
        req = json.loads(msg)
        if len(fds) != _FDS or not isinstance(req, dict):
            return
        child = os.fork()
        if child == 0:
            _child(conn, listener, fds, req)
        log.info("serve handed over", pid=child, cwd=str(req.get("cwd")))
    except (OSError, ValueError):
        return
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        conn.close()


def serve_forever(record: Path) -> None:
    """Preload, listen, write `record` ({pid, socket}), and hand over until SIGTERM."""
    from fedhpc.cli import main as _main  # noqa: F401  (preloaded: what a child runs)
    from fedhpc.cli import serve as _serve  # noqa: F401
    from fedhpc.mcp_server import build_server as _build  # noqa: F401

    configure_logging("info")  # its stderr is serve-host.log: one line per hand-over

    folder = Path(tempfile.mkdtemp(prefix="fedhpc-serve-"))  # 0700, a short path
    path = folder / "s"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(path))
    path.chmod(0o600)
    listener.listen(64)
    log.info("serve host up", pid=os.getpid(), socket=str(path))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel

    def stop(*_: object) -> None:
        with contextlib.suppress(OSError):
            if json.loads(record.read_text()).get("pid") == os.getpid():
                record.unlink()
        with contextlib.suppress(OSError):
            path.unlink()
            folder.rmdir()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "socket": str(path)}))
    tmp.chmod(0o600)
    tmp.replace(record)
    while True:
        _accept(listener)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedhpc.cli.preload")
    parser.add_argument("--record", type=Path, required=True, help="where to say where it is")
    args = parser.parse_args(argv)
    serve_forever(args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
