"""The facade's state in its own SQLite file: registered clients, sign-ins in flight upstream,
authorization codes, refresh-token families and each person's upstream tokens.

Codes and refresh tokens are stored as their SHA-256 only (a copy of the file mints nothing);
upstream tokens are sealed with Fernet (`Sealer`), so the file alone never shows one in clear.
Every single-use step (a code, a refresh token, a pending sign-in) is taken by one conditional
UPDATE or DELETE, so two requests racing on one value cannot both win."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
from cryptography.fernet import Fernet, InvalidToken

from fedhpc.errors import UsageError

__all__ = ["FacadeStore", "Sealer", "digest", "load_fernet_key", "made_once"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS clients (id TEXT PRIMARY KEY, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pending (key TEXT PRIMARY KEY, record TEXT NOT NULL,
    expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS codes (key TEXT PRIMARY KEY, record TEXT NOT NULL,
    expires_at REAL NOT NULL, family TEXT);
CREATE TABLE IF NOT EXISTS families (id TEXT PRIMARY KEY, person TEXT NOT NULL,
    client_id TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS refresh (key TEXT PRIMARY KEY, family TEXT NOT NULL,
    record TEXT NOT NULL, expires_at REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS upstream (person TEXT PRIMARY KEY, sealed BLOB NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS refreshing (person TEXT PRIMARY KEY, holder TEXT NOT NULL,
    until REAL NOT NULL);
"""


def digest(secret: str) -> str:
    """What the store keeps of a code or a refresh token: its SHA-256 (they are random)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def made_once(path: Path, make: Callable[[], bytes]) -> bytes:
    """The bytes in `path`, made (0600, in a 0700 folder) when the file is missing. Written
    whole under another name and linked into place: the endpoint and the daemon of `fedhpc
    service` start together, and neither may read the other's key half written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists():
        if path.stat().st_mode & 0o077:
            raise UsageError(
                f"{path} may be read by others",
                hint=f"chmod 600 {path}: it holds one of the facade's keys.",
            )
        return path.read_bytes()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(make())
        with contextlib.suppress(FileExistsError):  # the other process made it first: theirs
            os.link(tmp, path)
    finally:
        tmp.unlink()
    return path.read_bytes()


def load_fernet_key(path: Path) -> bytes:
    """The Fernet key in `path`, made (0600, in a 0700 folder) when the file is missing."""
    return made_once(path, Fernet.generate_key).strip()


class Sealer:
    """Upstream tokens sealed for rest (Fernet: AES-128-CBC and HMAC-SHA256)."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    def seal(self, value: dict[str, Any]) -> bytes:
        return self._fernet.encrypt(json.dumps(value).encode())

    def open(self, sealed: bytes) -> dict[str, Any] | None:
        try:
            value: dict[str, Any] = json.loads(self._fernet.decrypt(sealed))
        except InvalidToken:
            return None  # sealed under another key: as if never stored
        return value


class FacadeStore:
    """The facade's tables. `clock` is wall time in seconds (codes and tokens expire by it)."""

    def __init__(self, path: Path, sealer: Sealer, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.sealer = sealer
        self.clock = clock
        self._db: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()

    async def _conn(self) -> aiosqlite.Connection:
        async with self._lock:
            if self._db is None:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self.path.touch(mode=0o600, exist_ok=True)
                db = await aiosqlite.connect(self.path, isolation_level=None)
                await db.executescript(_SCHEMA)
                self._db = db
            return self._db

    async def aclose(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None

    async def _one(self, sql: str, *args: Any) -> tuple[Any, ...] | None:
        db = await self._conn()
        async with db.execute(sql, args) as cursor:
            row = await cursor.fetchone()
        return tuple(row) if row is not None else None

    async def _write(self, sql: str, *args: Any) -> int:
        db = await self._conn()
        async with db.execute(sql, args) as cursor:
            return cursor.rowcount

    # Registered clients (RFC 7591), as the SDK's OAuthClientInformationFull JSON.
    async def put_client(self, client_id: str, info: str) -> None:
        await self._write("INSERT OR REPLACE INTO clients VALUES (?, ?)", client_id, info)

    async def client(self, client_id: str) -> str | None:
        row = await self._one("SELECT info FROM clients WHERE id = ?", client_id)
        return str(row[0]) if row else None

    # A sign-in sent upstream, keyed by fedhpc's own `state`: taken once, by the callback.
    async def put_pending(self, state: str, record: dict[str, Any], ttl_s: float) -> None:
        await self._write(
            "INSERT INTO pending VALUES (?, ?, ?)",
            digest(state),
            json.dumps(record),
            self.clock() + ttl_s,
        )

    async def pending(self, state: str) -> dict[str, Any] | None:
        """The sign-in in flight under `state`, left in place (the consent page shows it)."""
        row = await self._one("SELECT record, expires_at FROM pending WHERE key = ?", digest(state))
        if row is None or float(row[1]) < self.clock():
            return None
        record: dict[str, Any] = json.loads(row[0])
        return record

    async def take_pending(self, state: str) -> dict[str, Any] | None:
        row = await self._one(
            "DELETE FROM pending WHERE key = ? RETURNING record, expires_at", digest(state)
        )
        await self._write("DELETE FROM pending WHERE expires_at < ?", self.clock())
        if row is None or float(row[1]) < self.clock():
            return None
        record: dict[str, Any] = json.loads(row[0])
        return record

    # Authorization codes: the record and its expiry; `family` is set when it is exchanged.
    async def put_code(self, code: str, record: dict[str, Any], expires_at: float) -> None:
        # Spent codes are kept a day past their life (a replay still revokes what they gave);
        # refresh tokens past theirs are of no use to anyone.
        await self._write("DELETE FROM codes WHERE expires_at < ?", self.clock() - 86400)
        await self._write("DELETE FROM refresh WHERE expires_at < ?", self.clock())
        await self._write(
            "INSERT INTO codes VALUES (?, ?, ?, NULL)", digest(code), json.dumps(record), expires_at
        )

    async def code(self, code: str) -> tuple[dict[str, Any], str | None] | None:
        """(record, the family it was exchanged for, or None while unused)."""
        row = await self._one("SELECT record, family FROM codes WHERE key = ?", digest(code))
        if row is None:
            return None
        return json.loads(row[0]), row[1]

    async def use_code(self, code: str, family: str) -> bool:
        """Mark the code exchanged for `family`; False when it already was (a replay)."""
        n = await self._write(
            "UPDATE codes SET family = ? WHERE key = ? AND family IS NULL", family, digest(code)
        )
        return n == 1

    # Refresh-token families: one per sign-in; every rotation stays in it.
    async def new_family(self, family: str, person: str, client_id: str) -> None:
        await self._write("INSERT INTO families VALUES (?, ?, ?, 0)", family, person, client_id)

    async def family_live(self, family: str) -> bool:
        row = await self._one("SELECT revoked FROM families WHERE id = ?", family)
        return row is not None and int(row[0]) == 0

    async def revoke_family(self, family: str) -> None:
        await self._write("UPDATE families SET revoked = 1 WHERE id = ?", family)

    async def put_refresh(
        self, token: str, family: str, record: dict[str, Any], expires_at: float
    ) -> None:
        await self._write(
            "INSERT INTO refresh VALUES (?, ?, ?, ?, 0)",
            digest(token),
            family,
            json.dumps(record),
            expires_at,
        )

    async def refresh(self, token: str) -> tuple[dict[str, Any], str, bool] | None:
        """(record, family, used) of a refresh token; None when unknown."""
        row = await self._one(
            "SELECT record, family, used FROM refresh WHERE key = ?", digest(token)
        )
        if row is None:
            return None
        return json.loads(row[0]), str(row[1]), bool(row[2])

    async def use_refresh(self, token: str) -> bool:
        """Mark the refresh token used (rotated); False when it already was."""
        n = await self._write(
            "UPDATE refresh SET used = 1 WHERE key = ? AND used = 0", digest(token)
        )
        return n == 1

    # Each person's upstream tokens, sealed; never read back but by the service itself.
    async def put_upstream(self, person: str, tokens: dict[str, Any]) -> None:
        await self._write(
            "INSERT OR REPLACE INTO upstream VALUES (?, ?, ?)",
            person,
            self.sealer.seal(tokens),
            self.clock(),
        )

    async def upstream(self, person: str) -> dict[str, Any] | None:
        row = await self._one("SELECT sealed FROM upstream WHERE person = ?", person)
        return self.sealer.open(bytes(row[0])) if row else None

    # Who refreshes a person's upstream tokens now, across processes (the endpoint and the
    # daemon of `fedhpc service` both may): a lease, taken by one conditional upsert.
    async def take_refresh(self, person: str, holder: str, ttl_s: float) -> bool:
        now = self.clock()
        n = await self._write(
            "INSERT INTO refreshing VALUES (?, ?, ?) ON CONFLICT(person) DO UPDATE SET "
            "holder = excluded.holder, until = excluded.until WHERE refreshing.until < ?",
            person,
            holder,
            now + ttl_s,
            now,
        )
        return n == 1

    async def end_refresh(self, person: str, holder: str) -> None:
        await self._write("DELETE FROM refreshing WHERE person = ? AND holder = ?", person, holder)
