"""`fedhpc store status|migrate|export|import`: the daemon's store, SQLite or PostgreSQL
(FEDHPC_STORE_URL), read and moved directly, not through the daemon."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

__all__ = ["add_parser"]

DIRECT = "Reads the daemon's store directly (not through the daemon)."


def _status_cmd(args: argparse.Namespace) -> int:
    from fedhpc.daemon import store_admin as admin  # the store only for this command

    out = admin.missing_store() or anyio.run(admin.store_status)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"store: {out['engine']} at {out['location']}")
    if not out["exists"]:
        print("not created yet (the daemon or `fedhpc store migrate` makes it)")
        return 0
    behind = " (run `fedhpc store migrate`)" if out["schema"] < out["fedhpc_schema"] else ""
    print(f"schema: {out['schema']} (this fedhpc: {out['fedhpc_schema']}){behind}")
    if out.get("rows"):
        print(f"newest event seq: {out['last_seq']}")
        print("rows: " + ", ".join(f"{t} {n}" for t, n in out["rows"].items()))
    if lead := out.get("leader"):
        state = "leads" if lead["live"] else "led (its lease lapsed)"
        print(f"leader: {lead['holder']} {state}, token {lead['token']}")
    return 0


def _migrate_cmd(args: argparse.Namespace) -> int:
    from fedhpc.daemon import store_admin as admin  # the store only for this command

    out = anyio.run(admin.migrate_store)
    if args.json:
        print(json.dumps(out))
    elif out["from"] == out["to"]:
        print(f"{out['location']}: schema {out['to']}, up to date")
    else:
        print(f"{out['location']}: schema {out['from']} -> {out['to']}")
    return 0


def _export_cmd(args: argparse.Namespace) -> int:
    from fedhpc.daemon import store_admin as admin  # the store only for this command

    if args.file == "-":
        anyio.run(admin.export_store, sys.stdout)
        return 0
    with Path(args.file).open("w", encoding="utf-8") as out:
        rows = anyio.run(admin.export_store, out)
    print(f"exported {rows} rows to {args.file}", file=sys.stderr)
    return 0


def _import_cmd(args: argparse.Namespace) -> int:
    from fedhpc.daemon import store_admin as admin  # the store only for this command

    if args.file == "-":
        counts = anyio.run(admin.import_store, sys.stdin)
    else:
        with Path(args.file).open(encoding="utf-8") as lines:
            counts = anyio.run(admin.import_store, lines)
    if args.json:
        print(json.dumps(counts))
    else:
        print("imported " + (", ".join(f"{t} {n}" for t, n in counts.items() if n) or "nothing"))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "store",
        help="the daemon's store (SQLite, or PostgreSQL by FEDHPC_STORE_URL): status, "
        "migrate, export, import",
        description=DIRECT,
    )
    ops = p.add_subparsers(dest="store_command", required=True, metavar="ACTION")
    for name, func, text in (
        ("status", _status_cmd, "engine, where, schema version, rows per table"),
        ("migrate", _migrate_cmd, "bring the store's schema to this fedhpc's version"),
        ("export", _export_cmd, "every row as JSON lines (to move a store between engines)"),
        ("import", _import_cmd, "an export into this (new, empty) store"),
    ):
        op = ops.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}. {DIRECT}")
        if name in ("export", "import"):
            where = (
                "where to write (- for stdout)" if name == "export" else "the export (- for stdin)"
            )
            op.add_argument("file", metavar="FILE", help=where)
        if name != "export":
            op.add_argument("--json", action="store_true", help="as JSON")
        op.set_defaults(func=func)
