"""Run a parsed command: a FedError exits with its class's code (docs/errors.md), printed as
'error[code]: message' and 'hint: ...' on stderr, or as one JSON object on stdout under --json."""

from __future__ import annotations

import argparse
import json
import sys

from fedhpc.errors import EXIT_CODES, FedError

__all__ = ["error_json", "run"]


def error_json(exc: FedError) -> str:
    """`{"error": {code, kind, message, hint[, fields]}}` on one line."""
    return json.dumps({"error": {**exc.as_dict(), "kind": exc.kind.value}}, ensure_ascii=False)


def run(args: argparse.Namespace) -> int:
    """The command's own status, the error class's exit code for a typed error, 130 for
    Ctrl-C."""
    try:
        code: int = args.func(args)
    except FedError as exc:
        if getattr(args, "json", False):
            print(error_json(exc), flush=True)
        else:
            print(f"error[{exc.code}]: {exc.message}", file=sys.stderr)
            if exc.hint:
                print(f"hint: {exc.hint}", file=sys.stderr)
        return EXIT_CODES[exc.kind]
    except KeyboardInterrupt:
        return 130
    return code
