"""Start the daemons the four clusters share: munged, mariadbd and slurmdbd."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.plan import FederationPlan
from fedhpc_dev.devfed.procs import alive_pid, port_open, run, stop_pids, wait_for

__all__ = ["start_daemon", "start_mariadb", "start_munge", "start_slurmdbd"]


def start_daemon(argv: list[str], env: dict[str, str], log_file: Path, *, foreground: bool) -> None:
    """Start a daemon with its stdio on `log_file`; forking daemons must exit 0 once detached."""
    with log_file.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    if foreground:
        return
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired as exc:
        raise DevfedError(f"{argv[0]} did not detach within 30s (see {log_file})") from exc
    if code != 0:
        raise DevfedError(f"{argv[0]} exited {code} on start (see {log_file})")


def start_munge(plan: FederationPlan, started: list[str]) -> None:
    """munged on a private socket and key, so a system munge (if any) is never involved."""
    if alive_pid(plan.pid_file("munged"), "munged"):
        return
    if not plan.munge_key.exists():
        plan.munge_key.write_bytes(secrets.token_bytes(1024))
        plan.munge_key.chmod(0o400)
    plan.munge_socket.unlink(missing_ok=True)
    argv = [
        "munged",
        "--force",  # lets root run it from a folder munged would otherwise call insecure
        f"--socket={plan.munge_socket}",
        f"--key-file={plan.munge_key}",
        f"--pid-file={plan.pid_file('munged')}",
        f"--log-file={plan.log_file('munged')}",
        f"--seed-file={plan.munge_dir / 'munged.seed'}",
        "--num-threads=4",
    ]
    start_daemon(argv, {}, plan.log_file("munged"), foreground=False)
    wait_for(plan.munge_socket.exists, "munged's socket", 10)
    started.append("munged")


def _mysql(plan: FederationPlan, sql: str) -> str:
    argv = ["mariadb", "--no-defaults", f"--socket={plan.mysql_socket}", "-u", "root", "-N"]
    return run(argv, stdin=sql, timeout_s=20).stdout


def start_mariadb(plan: FederationPlan, storage_pass: str, started: list[str]) -> None:
    """A private mariadbd on 127.0.0.1 (13306 for instance 1) with the `slurm` user slurmdbd
    logs in as."""
    if alive_pid(plan.pid_file("mariadbd"), "mariadbd"):
        return
    if not (plan.mysql_data / "mysql").is_dir():
        argv = ["mariadb-install-db", "--no-defaults", f"--datadir={plan.mysql_data}"]
        run([*argv, "--user=root", "--auth-root-authentication-method=socket", "--skip-test-db"])
    plan.mysql_socket.unlink(missing_ok=True)
    argv = [
        "mariadbd",
        "--no-defaults",  # ignore /etc/mysql: a system mariadb may run on its default port
        "--user=root",
        f"--datadir={plan.mysql_data}",
        f"--socket={plan.mysql_socket}",
        f"--port={plan.mysql_port}",
        "--bind-address=127.0.0.1",
        f"--pid-file={plan.pid_file('mariadbd')}",
        f"--log-error={plan.log_file('mariadbd')}",
        "--innodb-buffer-pool-size=32M",  # the accounting database stays tiny
        "--skip-name-resolve",
    ]
    start_daemon(argv, {}, plan.log_file("mariadbd"), foreground=True)
    wait_for(lambda: port_open(plan.mysql_port) and plan.mysql_socket.exists(), "mariadbd", 60)
    # The password is hex from secrets, never user input, so it can sit in the SQL text.
    grants = "".join(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{h}' IDENTIFIED BY '{storage_pass}';"
        f"ALTER USER 'slurm'@'{h}' IDENTIFIED BY '{storage_pass}';"
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{h}';"
        for h in ("localhost", "127.0.0.1")
    )
    _mysql(plan, grants)
    started.append("mariadbd")


def start_slurmdbd(plan: FederationPlan, changed: bool, started: list[str]) -> None:
    """slurmdbd for every cluster; restarted when its config changed."""
    pid = alive_pid(plan.pid_file("slurmdbd"), "slurmdbd")
    if pid and changed:
        stop_pids([pid])
        pid = None
    if pid:
        return
    env = {"SLURM_CONF": str(plan.dbd_slurm_conf)}
    start_daemon(["slurmdbd"], env, plan.log_file("slurmdbd"), foreground=False)
    port = plan.dbd_port
    wait_for(lambda: port_open(port), f"slurmdbd on port {port}", 60)
    started.append("slurmdbd")
