"""Build OpenPBS from its source tarball once, into a prefix under /opt keyed by the tarball."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import structlog

from fedhpc.settings import OPENPBS_TARBALL
from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.procs import run
from fedhpc_dev.devfed.setup import is_root

__all__ = [
    "BUILD_PACKAGES",
    "PREFIX_ROOT",
    "cached_build",
    "ensure_build_packages",
    "ensure_built",
    "find_tarball",
    "prefix_for",
    "ready_prefix",
]

log = structlog.get_logger(__name__)

PREFIX_ROOT = Path("/opt")
# Debian 12 packages OpenPBS needs to build and run (its INSTALL file; libncurses-dev and
# libexpat1-dev are the bookworm names of ncurses-dev and libexpat-dev). PostgreSQL is its
# datastore: the server runs `initdb`/`pg_ctl` from postgresql-15 as the `postgres` user.
BUILD_PACKAGES = (
    "gcc",
    "g++",
    "make",
    "libtool",
    "autoconf",
    "automake",
    "libhwloc-dev",
    "libx11-dev",
    "libxt-dev",
    "libedit-dev",
    "libical-dev",
    "libncurses-dev",
    "perl",
    "postgresql",
    "postgresql-server-dev-all",
    "postgresql-contrib",
    "python3-dev",
    "tcl-dev",
    "tk-dev",
    "swig",
    "libexpat1-dev",
    "libssl-dev",
    "libxext-dev",
    "libxft-dev",
    "libcjson-dev",
)
# The file in a finished prefix that says the build completed (and how long it took).
DONE = ".fedhpc-built"


def _vendor_dir() -> Path:
    # src/fedhpc_dev/devfed/pbs_build.py -> the checkout -> its sibling shared/vendor
    return Path(__file__).resolve().parents[3].parent / "shared" / "vendor"


def find_tarball() -> Path:
    """`$FEDHPC_OPENPBS_TARBALL`, else the newest openpbs-*.tar.gz in ../shared/vendor/."""
    if env := OPENPBS_TARBALL.read():
        path = Path(env)
        if not path.is_file():
            raise DevfedError(
                f"{OPENPBS_TARBALL.name}={env} is not a file",
                hint="Point it at an OpenPBS source tarball (openpbs-<commit>.tar.gz).",
            )
        return path
    vendor = _vendor_dir()
    found = sorted(vendor.glob("openpbs-*.tar.gz"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise DevfedError(
            f"no OpenPBS tarball: {OPENPBS_TARBALL.name} is unset and {vendor} holds no "
            "openpbs-*.tar.gz",
            hint=f"Set {OPENPBS_TARBALL.name} to an OpenPBS source tarball.",
        )
    return found[-1]


def tarball_hash(tarball: Path) -> str:
    digest = hashlib.sha256()
    with tarball.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def prefix_for(tarball: Path) -> Path:
    """Where this tarball's build lives: /opt/fedhpc-openpbs-<first 12 hex of its sha256>."""
    return PREFIX_ROOT / f"fedhpc-openpbs-{tarball_hash(tarball)}"


def built(prefix: Path) -> bool:
    return (prefix / DONE).is_file() and (prefix / "sbin" / "pbs_server.bin").is_file()


def missing_build_packages() -> list[str]:
    status = run(["dpkg-query", "-W", "-f=${Package} ${Status}\\n"], check=False).stdout
    have = {
        line.split()[0] for line in status.splitlines() if line.endswith("install ok installed")
    }
    return [p for p in BUILD_PACKAGES if p not in have]


def ensure_build_packages() -> None:
    """apt-get install the build and run dependencies that are missing (root only)."""
    missing = missing_build_packages()
    if not missing:
        return
    if not is_root():
        raise DevfedError(f"OpenPBS needs root to install {' '.join(missing)}", hint="")
    log.info("devfed.pbs.install", packages=missing)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    run(["apt-get", *lock, "update"], env, timeout_s=900)
    run(
        ["apt-get", *lock, "install", "-y", "--no-install-recommends", *missing],
        env,
        timeout_s=1800,
    )
    if still := missing_build_packages():
        raise DevfedError(f"apt-get did not install {' '.join(still)}")


def _build(tarball: Path, prefix: Path, log_file: Path) -> float:
    """Extract, autogen, configure, make -j2, make install; the seconds it took."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fedhpc-openpbs-") as tmp:
        run(["tar", "-xzf", str(tarball), "-C", tmp], timeout_s=300)
        (src,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        # Debian's python3, never a pyenv/venv one: the server embeds it for hooks.
        steps = [
            ["./autogen.sh"],
            ["./configure", f"--prefix={prefix}", "PYTHON=/usr/bin/python3"],
            ["make", "-j2"],
            # /etc/profile.d and the systemd unit go inside the prefix: /etc stays untouched.
            [
                "make",
                "install",
                f"sysprofiledir={prefix}/etc/profile.d",
                f"unitfiledir={prefix}/lib/systemd/system",
            ],
        ]
        with log_file.open("a") as out:
            for argv in steps:
                out.write(f"\n==> {' '.join(argv)}\n")
                out.flush()
                proc = _run_logged(argv, src, out)
                if proc != 0:
                    raise DevfedError(
                        f"building OpenPBS failed at `{' '.join(argv[:2])}` (exit {proc})",
                        hint=f"Read {log_file}.",
                    )
    return time.monotonic() - t0


def _run_logged(argv: list[str], cwd: Path, out: IO[str]) -> int:
    """Run one build step with its output streamed to the build log (it is long)."""
    proc = subprocess.run(
        argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=3600, check=False
    )
    return proc.returncode


def cached_build() -> Path | None:
    """The newest finished build under /opt, whatever tarball it came from (None: none)."""
    done = [p for p in PREFIX_ROOT.glob("fedhpc-openpbs-*") if p.is_dir() and built(p)]
    return max(done, key=lambda p: (p / DONE).stat().st_mtime) if done else None


def ready_prefix(log_dir: Path) -> Path:
    """The prefix to run: the tarball's build (made first when absent); without a tarball (a
    checkout with no ../shared/vendor beside it, on a machine that built OpenPBS before), the
    newest finished build under /opt, said in the log (never in place of a tarball named by
    $FEDHPC_OPENPBS_TARBALL). Raises `DevfedError` when neither."""
    try:
        tarball = find_tarball()
    except DevfedError:
        prefix = None if OPENPBS_TARBALL.read() else cached_build()  # a named one must exist
        if prefix is None:
            raise
        log.info("devfed.pbs.cached", prefix=str(prefix), why="no OpenPBS tarball found")
        return prefix
    return ensure_built(tarball, log_dir)


def ensure_built(tarball: Path, log_dir: Path) -> Path:
    """The prefix of this tarball's build, building it first when absent (one builder at a
    time: a lock file beside the prefix). Returns at once when it is already built."""
    prefix = prefix_for(tarball)
    if built(prefix):
        return prefix
    if not is_root():
        raise DevfedError(f"OpenPBS is not built at {prefix} and building it needs root", hint="")
    ensure_build_packages()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / "openpbs-build.log"
    with (PREFIX_ROOT / f"{prefix.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built(prefix):  # another process built it while we waited
            return prefix
        shutil.rmtree(prefix, ignore_errors=True)  # a half-finished build
        log.info("devfed.pbs.build", tarball=str(tarball), prefix=str(prefix), log=str(log_file))
        seconds = _build(tarball, prefix, log_file)
        (prefix / DONE).write_text(f"tarball={tarball.name}\nbuild_s={seconds:.0f}\n")
        log.info("devfed.pbs.built", prefix=str(prefix), seconds=round(seconds))
    return prefix
