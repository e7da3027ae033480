"""Run a parsed command: FedErrors become 'error[code]: message' and 'hint: ...' on stderr."""

from __future__ import annotations

import argparse
import sys

from fedhpc.errors import FedError

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Exit status 2 for a typed error, 130 for Ctrl-C, else the command's own."""
    try:
        code: int = args.func(args)
    except FedError as exc:
        print(f"error[{exc.code}]: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
