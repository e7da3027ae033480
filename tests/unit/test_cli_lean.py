"""The commands agents start at every turn or tool call (`fedhpc serve`, `fedhpc hook ...`),
and the daemon an agent's first call starts, load only their own module: none of the other
commands' imports, nor the dev tooling's entry points (their start-up is on the path from a
job's end to the resumed turn's first request)."""

from __future__ import annotations

import json
import subprocess
import sys

from fedhpc.cli.main import LEAN, build_parser

PROBE = """
import json, sys
from fedhpc.cli.main import build_parser
build_parser({command!r}).parse_args({argv!r})
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("fedhpc.cli.", "fedhpc_dev")))))
"""


def _loaded(command: str | None, argv: list[str]) -> list[str]:
    code = PROBE.format(command=command, argv=argv)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_serve_and_the_hooks_load_only_their_own_command_module() -> None:
    assert _loaded("serve", ["serve", "--no-autostart"]) == ["fedhpc.cli.main", "fedhpc.cli.serve"]
    hook = _loaded("hook", ["hook", "pre-tool-use"])
    assert hook == ["fedhpc.cli.hooks", "fedhpc.cli.main"]
    daemon = _loaded("daemon", ["daemon", "--once"])
    assert "fedhpc.cli.daemon" in daemon and "fedhpc.cli.connect" not in daemon
    every = _loaded(None, ["serve"])
    assert "fedhpc.cli.connect" in every and any(m.startswith("fedhpc_dev") for m in every)


def test_a_lean_parser_reads_its_command_as_the_full_one_does() -> None:
    for command in LEAN:
        argv = {
            "serve": ["--log-level", "info", "serve", "--daemon-wait", "3"],
            "hook": ["hook", "pre-tool-use"],
            "deliveries": ["deliveries", "--json", "retry", "--all-dead"],
            "daemon": ["daemon", "--once", "--refresh", "2"],
            "status": ["status", "--site", "devdelta", "--all"],
        }[command]
        lean, full = build_parser(command).parse_args(argv), build_parser().parse_args(argv)
        assert vars(lean) == vars(full)
