"""The inbox file an interactive session's UserPromptSubmit hook drains: the bridge appends one
JSON line per event, the hook takes the whole file. Neither loses a line to the other: the hook
renames the file to a private name before reading, and a writer appends under a lock only to the
file still at the inbox path (one it opened before the rename opens the new one instead)."""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

__all__ = ["append_line", "take_lines"]


def append_line(path: Path, line: str) -> None:
    """Append `line` (no newline) to the inbox at `path`, created 0600 when missing."""
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:  # still the inbox (not taken meanwhile): write while it is locked
                os.write(fd, (line + "\n").encode())
                return
        finally:
            os.close(fd)


def take_lines(path: Path) -> list[str]:
    """Every line in the inbox at `path`, which is then empty (gone); [] when there is none."""
    private = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.taken")
    try:
        os.replace(path, private)
    except FileNotFoundError:
        return []
    fd = os.open(private, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer that checked before the rename finishes first
        with os.fdopen(os.dup(fd), "rb") as fh:
            text = fh.read().decode(errors="replace")
    finally:
        os.close(fd)
    private.unlink(missing_ok=True)
    return text.splitlines()
