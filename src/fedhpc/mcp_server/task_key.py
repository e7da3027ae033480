"""The key that signs Tasks-extension handles, kept in the fedhpc home so that a handle
outlives the `fedhpc serve` process that minted it (a new server on the same home resolves it).

`<home>/mcp-task-key`: 32 random bytes, mode 0600, written once. Two servers starting together
both try; `os.link` of a complete temporary file makes exactly one win, and both read the same."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from fedhpc.settings import fedhpc_home

__all__ = ["task_key"]

_SIZE = 32
_NAME = "mcp-task-key"


def _load(path: Path) -> bytes | None:
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        return None
    return key if len(key) == _SIZE else None


def key_in(home: Path) -> bytes:
    """The home's key, made now if it has none (an unreadable or short one is replaced)."""
    path = home / _NAME
    if (key := _load(path)) is not None:
        return key
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = home / f".{_NAME}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, os.urandom(_SIZE))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # atomic, and refuses to replace a key another server wrote
    except FileExistsError:
        if _load(path) is None:  # a short file from an old crash: replace it
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    key = _load(path)
    assert key is not None  # just written, or written by the winner
    return key


@cache
def task_key() -> bytes:
    """This server's signing key (read once)."""
    return key_in(fedhpc_home())
