"""The commands agents start at every turn or tool call (`fedhpc serve`, `fedhpc hook ...`),
and the daemon an agent's first call starts, load only their own module: none of the other
commands' imports, nor the dev tooling's entry points (their start-up is on the path from a
job's end to the resumed turn's first request)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


HOOK_RUN = """
import json, sys
from fedhpc.cli.main import main
code = main({argv!r})
heavy = sorted(m for m in sys.modules if m in ("fedhpc.client.daemon_client", "fedhpc.daemon.api"))
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
"""


def test_the_prompt_and_post_tool_hooks_never_load_the_daemon_contract(tmp_path: Path) -> None:
    """`fedhpc hook user-prompt-submit` (every prompt) and `post-tool-use` (every fedhpc call)
    run whole, for real, without importing the daemon client and its contract models (0.3 s of
    CPU of the hook's 0.6 s); the prompt hook still injects what waits in the inbox."""
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "s1.jsonl").write_text('{"kind": "task.terminal"}\n')
    env = {**os.environ, "FEDHPC_HOME": str(tmp_path)}
    runs = {
        "user-prompt-submit": '{"session_id": "s1", "prompt": "hi"}',
        "post-tool-use": '{"session_id": "s1", "tool_name": "mcp__fedhpc__get_result"}',
    }
    for event, stdin in runs.items():
        code = HOOK_RUN.format(argv=["hook", event])
        out = subprocess.run(
            [sys.executable, "-c", code], input=stdin, env=env,
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        said = json.loads(out.stderr.strip().splitlines()[-1])
        assert said == {"code": 0, "heavy": []}, (event, out.stderr)
        if event == "user-prompt-submit":
            context = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
            assert '{"kind": "task.terminal"}' in context
