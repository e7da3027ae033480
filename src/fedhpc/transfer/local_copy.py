"""The local backend's worker: copy one spec between storage roots on this machine, hashing
every file (sha256), never reading or writing outside the two roots, then write the result.

Run as `python -I local_copy.py <state-dir> [lock-fd]` (stdlib only: it starts in
milliseconds): a process of its own, so a copy survives a daemon restart, and one per transfer
(an exclusive lock) however often it is started."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CopyFault", "copy_spec", "main"]

_CHUNK = 1 << 20


class CopyFault(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _real(path: str, root: str, what: str) -> str:
    """The real path (symlinks followed) if it stays inside the root's real path."""
    real = os.path.realpath(path)
    if not _inside(real, os.path.realpath(root)):
        raise CopyFault("outside_root", f"{what} {path} resolves to {real}, outside {root}")
    return real


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _skip(src: str, dst: str, level: str | None) -> bool:
    """Globus sync-level semantics: skip when the destination already matches."""
    if level is None or not os.path.lexists(dst):
        return False
    if level == "exists":
        return True
    s, d = os.stat(src), os.stat(dst)
    if level == "size":
        return s.st_size == d.st_size
    if level == "mtime":
        return s.st_size == d.st_size and int(d.st_mtime) >= int(s.st_mtime)
    return s.st_size == d.st_size and _sha256(src) == _sha256(dst)


def _mkdirs(path: str, root: str) -> None:
    """Create `path` one level at a time, each level checked to stay inside `root`."""
    missing: list[str] = []
    p = path
    while not os.path.isdir(p):
        if os.path.normpath(p) == os.path.normpath(root):  # the root itself: never made here
            raise CopyFault(
                "storage_root_missing",
                f"the destination storage root {root} does not exist: create it on the site "
                "(mkdir -p) or fix the root's path in the site's profile or your config",
            )
        missing.append(p)
        p = os.path.dirname(p)
    _real(p, root, "destination folder")
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o755)
        _real(d, root, "destination folder")


def _copy_file(src: str, dst: str, dst_root: str, verify: bool) -> tuple[int, str]:
    """Copy through a temporary file in the destination folder, then rename (atomic)."""
    _mkdirs(os.path.dirname(dst), dst_root)
    tmp = os.path.join(
        os.path.dirname(dst), f".fedhpc-partial-{os.getpid()}-{os.path.basename(dst)}"
    )
    h = hashlib.sha256()
    size = 0
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while block := fin.read(_CHUNK):
                h.update(block)
                fout.write(block)
                size += len(block)
            fout.flush()
            os.fsync(fout.fileno())
        digest = h.hexdigest()
        if verify and _sha256(tmp) != digest:
            raise CopyFault("checksum_mismatch", f"{dst}: the copy's sha256 differs from {src}")
        st = os.stat(src)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.chmod(tmp, st.st_mode & 0o777)
        if os.path.islink(dst) or os.path.isdir(dst):
            raise CopyFault("destination_conflict", f"{dst} is a link or a folder")
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return size, digest


def _files(src: str, src_root: str) -> Iterator[tuple[str, str]]:
    """(absolute source, relative path) of every file below `src`; links must stay inside."""
    for folder, dirs, names in os.walk(src, followlinks=False):
        for d in dirs:
            if os.path.islink(os.path.join(folder, d)):
                _real(os.path.join(folder, d), src_root, "source link")
        for name in sorted(names):
            path = os.path.join(folder, name)
            _real(path, src_root, "source file")
            yield path, os.path.relpath(path, src)


def copy_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Perform the copy `spec` describes; the result as a JSON-able dict."""
    src_root, dst_root = spec["source_root"], spec["destination_root"]
    src, dst = spec["source"], spec["destination"]
    if not (_inside(src, src_root) and _inside(dst, dst_root)):
        raise CopyFault("outside_root", "a path is outside its storage root")
    if not os.path.lexists(src):
        raise CopyFault("source_missing", f"{src} does not exist")
    real_src = _real(src, src_root, "source")
    level, verify = spec.get("sync_level"), bool(spec.get("verify_checksum", True))
    if os.path.isdir(real_src):
        if not spec.get("recursive"):
            raise CopyFault("source_is_folder", f"{src} is a folder: set recursive")
        items = [(p, os.path.join(dst, rel), rel) for p, rel in _files(real_src, src_root)]
    else:
        if spec.get("recursive"):
            raise CopyFault("source_not_folder", f"{src} is a file: unset recursive")
        items = [(real_src, dst, os.path.basename(dst))]
    checksums: dict[str, str] = {}
    moved = files = 0
    for path, target, rel in items:
        if _skip(path, target, level):
            checksums[rel] = _sha256(target)
            continue
        size, digest = _copy_file(path, target, dst_root, verify)
        checksums[rel] = digest
        moved += size
        files += 1
    return {
        "state": "succeeded",
        "bytes": moved,
        "files": files,
        "checksums": checksums,
        "checksum_verified": verify,
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    """argv: the state folder, and the descriptor of its lock if the spawner holds it for us."""
    state = Path(argv[0])
    if len(argv) > 1:
        lock_fd = int(argv[1])  # inherited, already locked: no gap for a second worker
    else:
        lock_fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another worker owns this transfer
    try:
        if (state / "result.json").exists():
            return 0
        spec = json.loads((state / "spec.json").read_text())
        try:
            result = copy_spec(spec)
        except CopyFault as exc:
            result = {"state": "failed", "code": exc.code, "message": exc.message}
        except OSError as exc:
            result = {"state": "failed", "code": "io_error", "message": str(exc)}
        _write_json(state / "result.json", result)
    finally:
        os.close(lock_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
