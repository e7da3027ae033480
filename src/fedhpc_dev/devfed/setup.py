"""Machine preparation for devfed: packages, root check, folders, config files, fake GPUs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import structlog

from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.plan import FederationPlan
from fedhpc_dev.devfed.procs import run

__all__ = ["PACKAGES", "ensure_packages", "prepare_dirs", "require_root", "write_if_changed"]

log = structlog.get_logger(__name__)

# Program we need -> Debian package that ships it (bookworm: Slurm 22.05, MariaDB 10.11). The
# -core MariaDB packages hold the same binaries as mariadb-server without a system service that
# its postinst would start on port 3306.
PACKAGES = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sinfo": "slurm-client",
    "munged": "munge",
    "slurmdbd": "slurmdbd",
    "mariadbd": "mariadb-server-core",
    "mariadb": "mariadb-client-core",
}


def is_root() -> bool:
    return os.geteuid() == 0


def require_root(why: str) -> None:
    if not is_root():
        raise DevfedError(f"fedhpc devfed needs root (run it with sudo) to {why}", hint="")


def missing_packages() -> list[str]:
    return sorted({pkg for prog, pkg in PACKAGES.items() if not shutil.which(prog)})


def ensure_packages() -> None:
    """apt-get install whatever is missing; only root can, so others get one clear error."""
    missing = missing_packages()
    if not missing:
        return
    require_root(f"install {' '.join(missing)}")
    if not shutil.which("apt-get"):
        raise DevfedError(f"missing {' '.join(missing)} and no apt-get to install them", hint="")
    log.info("devfed.install", packages=missing)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update"], env, timeout_s=600)
    run(["apt-get", "install", "-y", "--no-install-recommends", *missing], env, timeout_s=1200)
    if still := missing_packages():
        raise DevfedError(f"apt-get did not provide {' '.join(still)}")


def write_if_changed(path: Path, text: str, mode: int) -> bool:
    """Write `text` unless the file already holds it; True when it changed."""
    if path.exists() and path.read_text() == text:
        path.chmod(mode)
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


def _link_gpu(path: Path) -> None:
    # Slurm wants a character device for gres File=; a symlink to /dev/null is one.
    if path.is_symlink() and os.readlink(path) == "/dev/null":
        return
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/null")


def prepare_dirs(plan: FederationPlan) -> None:
    """Every folder the daemons write to, the marker that makes `down --purge` safe, fake GPUs."""
    plan.root.mkdir(parents=True, exist_ok=True)
    plan.marker.touch()
    for d in (plan.run_dir, plan.log_dir, plan.munge_dir, plan.mysql_dir):
        d.mkdir(exist_ok=True)
    # Clients of every user reach munged through this folder; the key inside stays 0400.
    plan.root.chmod(0o755)
    plan.munge_dir.chmod(0o755)
    plan.dbd_dir.mkdir(mode=0o700, exist_ok=True)
    for c in plan.clusters:
        for d in (c.dir, c.dir / "state", c.log_dir, c.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        for n in c.nodes:
            c.spool(n.name).mkdir(parents=True, exist_ok=True)
        for link in c.gpu_links():
            link.parent.mkdir(parents=True, exist_ok=True)
            _link_gpu(link)
        storage = c.dir / "storage"
        storage.mkdir(exist_ok=True)
        # Shared scratch like /tmp: jobs of any devfed user stage files here.
        storage.chmod(0o1777)
