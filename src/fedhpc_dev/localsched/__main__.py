"""`python -m fedhpc_dev.localsched --root DIR VERB`: the local-process batch scheduler's command
line.

Verbs print JSON (submit prints the bare job id, like `sbatch --parsable`); a refusal prints
`localsched: error: ...` on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from fedhpc.settings import LOCALSCHED_ROOT
from fedhpc_dev.localsched import sched
from fedhpc_dev.localsched.model import Config, Rejected
from fedhpc_dev.localsched.store import SchedStore

__all__ = ["main"]

ROOT_ENV = LOCALSCHED_ROOT.name


def _ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    out = []
    for part in text.split(","):
        if not part.strip().isdigit():
            raise Rejected(f"invalid job id {part!r}")
        out.append(int(part))
    return out


def _config(text: str) -> Config:
    try:
        return Config.from_json(json.loads(text))
    except (ValueError, TypeError, KeyError) as exc:
        raise Rejected(f"invalid configuration: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fedhpc_dev.localsched")
    p.add_argument("--root", default=LOCALSCHED_ROOT.read(), help=f"state folder (${ROOT_ENV})")
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("submit", help="queue the script on stdin; prints the job id")
    for verb, what in (("queue", "jobs not finished"), ("acct", "every job, with times")):
        v = sub.add_parser(verb, help=what)
        v.add_argument("--jobs", default=None, help="comma-separated job ids")
    sub.add_parser("cancel", help="cancel jobs").add_argument("ids", nargs="+")
    sub.add_parser("find", help="jobs by name").add_argument("names", nargs="+")
    probe = sub.add_parser("probe", help="capacity and queue counts per partition")
    probe.add_argument("--user", default=None)
    probe.add_argument("--config", default=None, help="JSON configuration to store first")
    conf = sub.add_parser("configure", help="store the JSON configuration (argument or stdin)")
    conf.add_argument("config", nargs="?")
    sub.add_parser("run-job", help=argparse.SUPPRESS).add_argument("id", type=int)
    return p


def _dump(data: Any) -> None:
    print(json.dumps(data, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.root:
        print(f"localsched: error: no --root and no ${ROOT_ENV}", file=sys.stderr)
        return 2
    store = SchedStore(Path(args.root))
    try:
        if args.verb == "run-job":
            # startup: the job wrapper only in the process that runs a job
            from fedhpc_dev.localsched.wrapper import run_job

            return run_job(store, args.id)
        if args.verb == "submit":
            job_id = sched.submit(store, sys.stdin.read(), env=sched.own_env(), cwd=os.getcwd())
            print(job_id)
        elif args.verb == "queue":
            _dump(sched.queue(store, _ids(args.jobs)))
        elif args.verb == "acct":
            _dump(sched.acct(store, _ids(args.jobs)))
        elif args.verb == "find":
            _dump(sched.find(store, args.names))
        elif args.verb == "cancel":
            errors = sched.cancel(store, _ids(",".join(args.ids)) or [])
            for e in errors:
                print(f"localsched: error: {e}", file=sys.stderr)
            return 1 if errors else 0
        elif args.verb == "probe":
            config = _config(args.config) if args.config else None
            _dump(sched.probe(store, args.user, config))
        elif args.verb == "configure":
            changed = sched.configure(store, _config(args.config or sys.stdin.read()))
            _dump({"changed": changed})
    except Rejected as exc:
        print(f"localsched: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
