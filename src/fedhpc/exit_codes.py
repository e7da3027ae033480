"""Errors to exit codes: run a parsed command; a FedError exits with its class's code
(docs/errors.md), printed as 'error[code]: message' and 'hint: ...' on stderr, or as one JSON
object on stdout under --json."""

from __future__ import annotations

import argparse
import json
import os
import sys

from fedhpc.errors import EXIT_CODES, FedError, typed_errors
from fedhpc.terminal import for_terminal

__all__ = ["error_json", "run_command"]


def error_json(exc: FedError) -> str:
    """`{"error": {code, kind, message, hint[, fields]}}` on one line."""
    return json.dumps({"error": {**exc.as_dict(), "kind": exc.kind.value}}, ensure_ascii=False)


def _report(errors: list[FedError], as_json: bool) -> int:
    for exc in errors:
        if as_json:
            print(error_json(exc), flush=True)
        else:
            # A message may quote what an agent or a site wrote: shown, never run by the terminal.
            print(f"error[{exc.code}]: {for_terminal(exc.message)}", file=sys.stderr)
            if exc.hint:
                print(f"hint: {for_terminal(exc.hint)}", file=sys.stderr)
    return EXIT_CODES[errors[0].kind]


def run_command(args: argparse.Namespace) -> int:
    """The command's own status, the error class's exit code for a typed error, 130 for
    Ctrl-C. Typed errors raised inside task groups are reported as themselves, each one (the
    exit code is the first one's)."""
    as_json = bool(getattr(args, "json", False))
    try:
        code: int = args.func(args)
    except FedError as exc:
        return _report([exc], as_json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _pipe_closed()
    except BaseExceptionGroup as group:
        if errors := typed_errors(group):
            return _report(errors, as_json)
        if group.subgroup(KeyboardInterrupt) is not None:
            return 130
        raise
    return code


def _pipe_closed() -> int:
    """`fedhpc ... | head` read what it wanted and closed the pipe: stop quietly, as shell
    tools do (128 + SIGPIPE), and point stdout at /dev/null so Python's own flush at exit
    does not print a second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141
