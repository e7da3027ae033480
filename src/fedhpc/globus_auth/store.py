"""Where a person's Globus login lives: `$FEDHPC_HOME/globus/` (mode 0700) holding the token
database `tokens.db` and `login.json` (who, which client, which scopes were asked), both 0600.
No tokens in `login.json`: they live only in the token database."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # startup: the Globus SDKs only when a Globus site or login is used
    from globus_sdk.token_storage import SQLiteTokenStorage

__all__ = [
    "NAMESPACE",
    "LoginRecord",
    "globus_dir",
    "open_token_storage",
    "private_dir",
    "read_record",
    "remove_login",
    "tokens_path",
    "write_record",
]

NAMESPACE = "user"  # the token database's partition for the person's own tokens


@dataclass
class LoginRecord:
    client_id: str
    identity_id: str | None = None
    username: str | None = None
    name: str | None = None
    email: str | None = None
    scopes: list[str] = field(default_factory=list)  # what the last login asked for
    logged_in_at: str | None = None


def globus_dir(home: Path) -> Path:
    return home / "globus"


def tokens_path(home: Path) -> Path:
    return globus_dir(home) / "tokens.db"


def _record_path(home: Path) -> Path:
    return globus_dir(home) / "login.json"


def private_dir(path: Path) -> Path:
    """Create the folder 0700 (and tighten it if it exists): tokens never sit in a folder
    another user can list."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)
    return path


def open_token_storage(home: Path, *, create: bool) -> SQLiteTokenStorage | None:
    """The person's token database, or None when there is none and `create` is false."""
    # startup: the Globus SDKs only when a Globus site or login is used
    from globus_sdk.token_storage import SQLiteTokenStorage

    path = tokens_path(home)
    if not path.exists() and not create:
        return None
    private_dir(globus_dir(home))
    # The SDK creates the file under umask 0o177 (0600); tighten an older file all the same.
    storage = SQLiteTokenStorage(path, namespace=NAMESPACE)
    if stat.S_IMODE(path.stat().st_mode) != 0o600:
        path.chmod(0o600)
    return storage


def read_record(home: Path) -> LoginRecord | None:
    path = _record_path(home)
    try:
        data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # unreadable: treated as not logged in; `fedhpc login` rewrites it
    known = {k: v for k, v in data.items() if k in LoginRecord.__dataclass_fields__}
    if not isinstance(known.get("client_id"), str):
        return None
    return LoginRecord(**known)


def write_record(home: Path, record: LoginRecord) -> None:
    """Atomic: written 0600 beside, then renamed."""
    folder = private_dir(globus_dir(home))
    tmp = folder / "login.json.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(record), f, indent=2)
    os.replace(tmp, _record_path(home))


def remove_login(home: Path) -> list[Path]:
    """Delete the token database (and SQLite's side files) and the record; returns what went."""
    gone: list[Path] = []
    db = tokens_path(home)
    for path in (
        db,
        db.with_name(db.name + "-journal"),
        db.with_name(db.name + "-wal"),
        db.with_name(db.name + "-shm"),
        _record_path(home),
    ):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            gone.append(path)
    return gone
