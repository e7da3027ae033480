"""devpolaris: a real OpenPBS cluster beside the Slurm ones (server, sched, comm, one mom)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import structlog

from fedhpc.domain.site import SiteProfile
from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.pbs_build import ready_prefix
from fedhpc_dev.devfed.pbs_plan import (
    GPU_MODEL,
    SERVER_PORT,
    VNODE_SCRIPT,
    PbsPlan,
    pbs_profile,
    plan_pbs,
    qmgr_script,
    render_mom_config,
    render_pbs_conf,
    render_vnodes,
)
from fedhpc_dev.devfed.procs import port_open, run, wait_for
from fedhpc_dev.devfed.setup import is_root, write_if_changed

__all__ = ["PbsOutcome", "pbs_down", "pbs_status", "pbs_up"]

log = structlog.get_logger(__name__)

HOSTS = Path("/etc/hosts")
HOSTS_MARK = "# fedhpc devfed: OpenPBS needs a non-loopback name"


@dataclass(frozen=True, slots=True)
class PbsOutcome:
    """What `pbs_up` did: `up` with a one-line detail, or why devpolaris is absent."""

    up: bool
    detail: str
    started: bool = False


def _qmgr(plan: PbsPlan, command: str, *, check: bool = True) -> bool:
    done = run(["qmgr", "-c", command], plan.env(), check=False, timeout_s=30)
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise DevfedError(
            f"qmgr -c '{command}' failed: {detail[-1] if detail else done.returncode}"
        )
    return done.returncode == 0


def _configure(plan: PbsPlan) -> bool:
    """Resources, server and queues; True when a resource was new (the mom must then report
    its vnodes again, or their values for it are dropped)."""
    # OpenPBS has no built-in ngpus: consumable per host (flag nh), as PBS Pro sites define it.
    resources = ("ngpus type=long, flag=nh", f"{GPU_MODEL} type=string, flag=h")
    created = [_qmgr(plan, f"create resource {r}", check=False) for r in resources]
    for q in plan.queues:
        _qmgr(plan, f"create queue {q.name} queue_type=Execution", check=False)
    for command in qmgr_script(plan):
        _qmgr(plan, command)
    # pbs_habitat's default queue serves no node here; it goes once it is empty.
    if "workq" not in {q.name for q in plan.queues}:
        _qmgr(plan, "delete queue workq", check=False)
    return any(created)


def _nodes(plan: PbsPlan) -> dict[str, dict[str, object]]:
    done = run(["pbsnodes", "-a", "-F", "json"], plan.env(), check=False, timeout_s=30)
    if done.returncode != 0:
        return {}
    with contextlib.suppress(ValueError):
        data = json.loads(done.stdout)
        nodes = data.get("nodes", {}) if isinstance(data, dict) else {}
        return nodes if isinstance(nodes, dict) else {}
    return {}


def _vnodes_ready(plan: PbsPlan) -> bool:
    nodes = _nodes(plan)
    for v in plan.vnodes:
        node = nodes.get(v.name)
        if not isinstance(node, dict):
            return False
        if node.get("queue") != v.queue:
            _qmgr(plan, f"set node {v.name} queue = {v.queue}", check=False)
            return False
        if "down" in str(node.get("state", "")) or "offline" in str(node.get("state", "")):
            return False
    return True


def _sched_config(plan: PbsPlan) -> None:
    # The scheduler only honours requests for resources named on this line: add ngpus.
    path = plan.home / "sched_priv" / "sched_config"
    text = path.read_text()
    old = 'resources: "ncpus, mem, arch, host, vnode, aoe, eoe"'
    if old in text:
        path.write_text(
            text.replace(old, 'resources: "ncpus, mem, arch, host, vnode, ngpus, aoe, eoe"')
        )


def _init_d(plan: PbsPlan, prefix: Path, action: str, timeout_s: float = 180) -> str:
    argv = [str(prefix / "libexec" / "pbs_init.d"), action]
    done = run(argv, plan.env(), check=False, timeout_s=timeout_s)
    out = (done.stdout + done.stderr).strip()
    with (plan.log_dir / "pbs_init.log").open("a") as fh:
        fh.write(f"==> {action}\n{out}\n")
    if done.returncode != 0 and action != "status":
        raise DevfedError(
            f"pbs_init.d {action} failed: {out.splitlines()[-1] if out else done.returncode}"
        )
    return out


def _mom_pid(plan: PbsPlan) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((plan.home / "mom_priv" / "mom.lock").read_text().split()[0])
    return None


def _host_address() -> str:
    """This machine's first non-loopback IPv4 address (PBS will not use 127.x)."""
    done = run(["ip", "-4", "-o", "addr", "show", "scope", "global"], check=False)
    for line in done.stdout.splitlines():
        words = line.split()
        if "inet" in words:
            return words[words.index("inet") + 1].split("/")[0]
    raise DevfedError(
        "this machine has no non-loopback IPv4 address, and OpenPBS refuses to run on "
        "127.x only (Libnet/hnls.c: 'Could not find any usable IP address')"
    )


def _ensure_host_alias(name: str) -> None:
    """`<address> <name>` in /etc/hosts, added once (root); kept when it already resolves."""
    text = HOSTS.read_text()
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and name in words[1:] and not words[0].startswith("127."):
            return
    address = _host_address()
    with HOSTS.open("a") as fh:
        sep = "" if text.endswith("\n") or not text else "\n"
        fh.write(f"{sep}{address} {name}  {HOSTS_MARK}\n")
    log.info("devfed.pbs.hosts", name=name, address=address)


def without_our_alias(text: str, name: str) -> str:
    """`text` (an /etc/hosts) without the line `_ensure_host_alias` added for `name`; every
    other line, a person's own for the same name included, is kept as written."""
    lines = text.splitlines(keepends=True)
    kept = [
        line
        for line in lines
        if not (line.rstrip().endswith(HOSTS_MARK) and name in line.split("#", 1)[0].split()[1:])
    ]
    return "".join(kept)


def _drop_host_alias(name: str) -> None:
    """Undo `_ensure_host_alias` (a purge): the file is rewritten in place only if it changes."""
    with contextlib.suppress(OSError):
        text = HOSTS.read_text()
        if (kept := without_our_alias(text, name)) != text:
            HOSTS.write_text(kept)  # in place: /etc/hosts may be a bind mount (containers)
            log.info("devfed.pbs.hosts_removed", name=name)


def _prepare(plan: PbsPlan, prefix: Path) -> bool:
    """pbs.conf, PBS_HOME (pbs_habitat: dirs and datastore, once), mom config and vnodes.
    True when the mom's config changed (a running mom must re-read it)."""
    _ensure_host_alias(plan.name)
    for d in (plan.dir, plan.log_dir):
        d.mkdir(parents=True, exist_ok=True)
    storage = plan.dir / "storage"
    storage.mkdir(exist_ok=True)
    storage.chmod(0o1777)
    if plan.bin.is_symlink() and os.readlink(plan.bin) != str(prefix / "bin"):
        plan.bin.unlink()
    if not plan.bin.is_symlink():
        plan.bin.symlink_to(prefix / "bin")
    conf_changed = write_if_changed(plan.conf, render_pbs_conf(plan, prefix), 0o644)
    if (
        conf_changed
        or not (plan.home / "pbs_version").exists()
        or not (plan.home / "datastore").is_dir()
    ):
        out = run([str(prefix / "libexec" / "pbs_habitat")], plan.env(), check=False, timeout_s=300)
        (plan.log_dir / "pbs_habitat.log").write_text(out.stdout + out.stderr)
        if out.returncode != 0:
            tail = (out.stdout + out.stderr).strip().splitlines()
            raise DevfedError(f"pbs_habitat failed: {tail[-1] if tail else out.returncode}")
    changed = write_if_changed(plan.home / "mom_priv" / "config", render_mom_config(plan), 0o644)
    vnodes = plan.dir / "vnodes.conf"
    if (
        write_if_changed(vnodes, render_vnodes(plan), 0o644)
        or not (plan.home / "mom_priv" / "config.d" / VNODE_SCRIPT).exists()
    ):
        mom = str(prefix / "sbin" / "pbs_mom")
        run([mom, "-s", "remove", VNODE_SCRIPT], plan.env(), check=False)
        run([mom, "-s", "insert", VNODE_SCRIPT, str(vnodes)], plan.env())
        changed = True
    _sched_config(plan)
    return changed


def _start(plan: PbsPlan, timeout_s: float) -> bool:
    """Build (once), prepare, start and configure; True when pbs_server was not running."""
    t0 = time.monotonic()
    if not is_root():
        raise DevfedError("starting OpenPBS needs root (run it with sudo)", hint="")
    prefix = ready_prefix(plan.log_dir)
    mom_changed = _prepare(plan, prefix)
    was_up = port_open(SERVER_PORT)
    _init_d(plan, prefix, "start")
    if mom_changed and was_up:
        _hup_mom(plan)
    wait_for(partial(port_open, SERVER_PORT), "pbs_server", 60)
    ping = ["qstat", "-B"]
    wait_for(lambda: run(ping, plan.env(), check=False).returncode == 0, "qstat -B", 60)
    if _configure(plan):
        _hup_mom(plan)
    left = max(20.0, timeout_s - (time.monotonic() - t0))
    wait_for(partial(_vnodes_ready, plan), f"{plan.name} vnodes to be free", left, step_s=1)
    return not was_up


def _hup_mom(plan: PbsPlan) -> None:
    # pbs_mom re-reads its config and vnode definitions and reports the vnodes again.
    if pid := _mom_pid(plan):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)


def pbs_up(
    root: Path, hostname: str, profiles: Iterable[SiteProfile], timeout_s: float = 120
) -> PbsOutcome:
    """Build (once) and start devpolaris; never raises: a failure is the outcome's detail,
    so the Slurm clusters come up whatever happens here."""
    profile = pbs_profile(profiles)
    if profile is None:
        return PbsOutcome(False, "no local-test PBS profile ships (devpolaris.toml)")
    plan = plan_pbs(profile, root, hostname)
    t0 = time.monotonic()
    try:
        started = _start(plan, timeout_s)
    except Exception as exc:  # whatever breaks PBS, the Slurm clusters stay up: say why
        log.warning("devfed.pbs.absent", reason=str(exc))
        return PbsOutcome(False, str(exc))
    took = time.monotonic() - t0
    return PbsOutcome(True, f"{len(plan.vnodes)} vnodes free in {took:.1f}s", started)


def pbs_status(root: Path, hostname: str, profiles: Iterable[SiteProfile]) -> PbsOutcome:
    """Read-only: the server answers and every vnode is known and not down."""
    profile = pbs_profile(profiles)
    if profile is None:
        return PbsOutcome(False, "no local-test PBS profile")
    plan = plan_pbs(profile, root, hostname)
    if not plan.conf.exists():
        return PbsOutcome(False, f"not set up (no {plan.conf})")
    if not port_open(SERVER_PORT):
        return PbsOutcome(False, f"pbs_server not answering on {SERVER_PORT}")
    nodes = _nodes(plan)
    bad = [
        v.name
        for v in plan.vnodes
        if "free" not in str((nodes.get(v.name) or {}).get("state", ""))
        and "job" not in str((nodes.get(v.name) or {}).get("state", ""))
    ]
    if bad:
        return PbsOutcome(False, f"vnodes not up: {', '.join(bad)}")
    return PbsOutcome(True, f"{len(plan.vnodes)} vnodes up")


def pbs_down(
    root: Path, hostname: str, profiles: Iterable[SiteProfile], *, purge: bool = False
) -> None:
    """Stop devpolaris's daemons (pbs_init.d stop) when it was set up; `purge` also deletes
    PBS_HOME (its datastore and job history). The build under /opt is always kept."""
    profile = pbs_profile(profiles)
    if profile is None:
        return
    plan = plan_pbs(profile, root, hostname)
    if plan.conf.exists() and plan.bin.exists():
        prefix = plan.bin.resolve().parent
        with contextlib.suppress(DevfedError):
            _init_d(plan, prefix, "stop", timeout_s=120)
    if purge and (plan.home / "pbs_version").exists() and not port_open(SERVER_PORT):
        shutil.rmtree(plan.home)
    if purge and not port_open(SERVER_PORT):
        _drop_host_alias(plan.name)
