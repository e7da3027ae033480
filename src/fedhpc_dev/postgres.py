"""A private PostgreSQL server for the tests and benchmarks of the store on PostgreSQL: initdb in a
folder of its own, a free loopback port, run by an unprivileged user (postgres refuses root).
It never touches a cluster of Debian's (`pg_ctlcluster`) or anyone else's server."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HINT", "PgServer", "PostgresUnavailable", "bindir", "start"]

HINT = "install PostgreSQL 15 (`apt-get install postgresql`; `./dev test` does it as root)"
ROLE = "fedhpc"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server programs are missing, or the server would not start."""


def bindir() -> Path | None:
    """The newest installed server's programs (Debian: /usr/lib/postgresql/N/bin), else the
    folder of an `initdb` on PATH."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running private server; `url` reaches its `postgres` database as superuser."""

    folder: Path
    port: int
    bindir: Path
    user: str | None  # the OS user it runs as (None: this process's)
    options: str = ""  # the server's command-line options (pg_ctl -o), for `start_again`

    def url(self, database: str = "postgres", *, socket: bool = False) -> str:
        """The database over TCP on loopback, or over the server's Unix socket."""
        if socket:
            return f"postgresql://{ROLE}@/{database}?host={self.folder}&port={self.port}"
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{database}"

    def create_database(self, *, socket: bool = False) -> str:
        """A new empty database; its URL."""
        import psycopg  # only where a database is made: starting the server needs no driver

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a name made here, never input
        return self.url(name, socket=socket)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def shut_down(self) -> None:
        """Stop the server as an operator's restart does (`fast`: sessions are ended), keeping
        its data and port for `start_again`."""
        out = self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
        if out.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl stop failed: {out.stderr.strip()[-300:]}")

    def start_again(self) -> None:
        """Start the server `shut_down` stopped, on the same port and data."""
        data, log = str(self.folder / "data"), str(self.folder / "server.log")
        out = self._run("pg_ctl", "-D", data, "-l", log, "-o", self.options, "-w", "start")
        if out.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {out.stderr.strip()[-300:]}")

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(self.bindir / program, args, self.user, self.folder)


def _run(
    program: Path, args: tuple[str, ...], user: str | None, cwd: Path
) -> subprocess.CompletedProcess[str]:
    uid = gid = None
    if user is not None:
        entry = pwd.getpwnam(user)
        uid, gid = entry.pw_uid, entry.pw_gid
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    return subprocess.run(
        [str(program), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        check=False,
        user=uid,
        group=gid,
        extra_groups=[] if uid is not None else None,
    )


def _user() -> str | None:
    """Root runs the server as `postgres` (Debian's package makes it), else as `nobody`."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise PostgresUnavailable("running as root and no unprivileged user to run PostgreSQL")


def start(*, durable: bool = False, attempts: int = 3) -> PgServer:
    """Start a private server. Not `durable` (tests): no fsync, as a throwaway cluster may.
    `durable` (benchmarks): PostgreSQL's defaults but `synchronous_commit=off`, which like
    SQLite's WAL with synchronous=NORMAL keeps every commit across a crash of the process
    and may drop the last ones on a power loss."""
    programs = bindir()
    if programs is None:
        raise PostgresUnavailable(f"no PostgreSQL server programs (initdb) found; {HINT}")
    user = _user()
    folder = Path(tempfile.mkdtemp(prefix="fedhpc-pg-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    data = folder / "data"
    init = _run(
        programs / "initdb",
        ("-D", str(data), "-U", ROLE, "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"),
        user,
        folder,
    )
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
    options = ["-c listen_addresses=127.0.0.1", f"-k {folder}", "-c max_connections=200"]
    options += ["-c synchronous_commit=off"] if durable else ["-c fsync=off"]
    last = ""
    for _ in range(attempts):  # a port taken between choosing and binding: another
        port = _free_port()
        opts = " ".join([f"-p {port}", *options])
        out = _run(
            programs / "pg_ctl",
            ("-D", str(data), "-l", str(folder / "server.log"), "-o", opts, "-w", "start"),
            user,
            folder,
        )
        if out.returncode == 0:
            return PgServer(folder, port, programs, user, opts)
        log = folder / "server.log"
        last = log.read_text(errors="replace")[-500:] if log.exists() else out.stderr
    shutil.rmtree(folder, ignore_errors=True)
    raise PostgresUnavailable(f"PostgreSQL did not start: {last.strip()}")
