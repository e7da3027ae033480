"""`fedhpc deliveries check` against the real Claude Code and Codex CLIs: it starts the
runtime the way the daemon would (the `[resume]` binary and environment, no model request),
and the commands the resumed CLI starts (Codex's registered MCP server, Claude's fedhpc
hooks) under that environment, and says what is missing, with the fix."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fake_models import FakeOpenAI
from tests.integration.npm_tools import CLAUDE_CODE, CODEX, npm_tool

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def claude() -> Path:
    return npm_tool(*CLAUDE_CODE)


def _check(home: Path, config: str, runtime: str = "claude-code") -> tuple[int, dict[str, Any]]:
    (home / "config.toml").write_text(config)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "FEDHPC_HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-in-the-callers-env-only",
    }
    out = subprocess.run(
        [f"{VENV_BIN}/fedhpc", "deliveries", "check", "--runtime", runtime, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return out.returncode, json.loads(out.stdout)


def test_check_reports_missing_credentials_with_the_fix_then_ok(
    claude: Path, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    base = f'[resume.claude-code]\nbinary = "{claude}"\n'
    rc, body = _check(home, base)  # the caller's key is not the resume's
    (report,) = body["runtimes"]
    assert rc == 1 and report["ok"] is False
    assert any("ANTHROPIC_API_KEY" in fix and "env_file" in fix for fix in report["fix"])
    secret = home / "claude.env"
    secret.write_text("ANTHROPIC_API_KEY=sk-fake-for-check\n")
    rc, body = _check(home, base + f'env_file = "{secret}"\n')
    (report,) = body["runtimes"]
    assert rc == 0 and report["ok"] is True, report
    assert "2.1.197" in report["detail"]
    assert "sk-fake-for-check" not in json.dumps(body)
    rc, body = _check(home, '[resume.claude-code]\nbinary = "/nonexistent/claude"\n')
    (report,) = body["runtimes"]
    assert rc == 1 and "not found" in report["detail"]
    assert "[resume.claude-code]" in report["fix"][0]


def test_check_starts_what_a_resume_starts_by_name_on_the_resume_path(
    claude: Path, tmp_path: Path
) -> None:
    """Codex's registered server and Claude's fedhpc hooks are started under the resume
    environment (its PATH lacks fedhpc's folder here): by name they run (the resume's PATH
    starts with the daemon's own fedhpc); a command that cannot run is named, with the fix."""
    codex = npm_tool(*CODEX)
    home = tmp_path / "h"
    (home / ".claude").mkdir(parents=True)
    (home / ".codex").mkdir()
    claude_cfg = f'[resume.claude-code]\nbinary = "{claude}"\npath = "/usr/bin:/bin"\n'
    claude_cfg += f'env_file = "{home / "k.env"}"\n'
    (home / "k.env").write_text("ANTHROPIC_API_KEY=sk-fake-for-check\n")
    codex_cfg = f'[resume.codex]\nbinary = "{codex}"\npath = "/usr/bin:/bin"\n'
    for program, ok in (("fedhpc", True), ("/nonexistent/fedhpc", False)):
        hook = {"type": "command", "command": f"{program} hook pre-tool-use"}
        hooks = {"PreToolUse": [{"matcher": "mcp__fedhpc__.*", "hooks": [hook]}]}
        (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
        rc, body = _check(home, claude_cfg)
        (report,) = body["runtimes"]
        assert report["ok"] is ok and rc == (0 if ok else 1), report
        if not ok:
            assert any(program in fix and "absolute path" in fix for fix in report["fix"])
        with FakeOpenAI() as model:  # the endpoint answers: only the server is judged here
            (home / ".codex" / "config.toml").write_text(
                'model_provider = "gw"\n[model_providers.gw]\nname = "gw"\n'
                f'base_url = "{model.url}/v1"\nwire_api = "responses"\n'
                f'[mcp_servers.fedhpc]\ncommand = "{program}"\nargs = ["serve"]\n'
            )
            rc, body = _check(home, codex_cfg, "codex")
        (report,) = body["runtimes"]
        assert report["ok"] is ok and rc == (0 if ok else 1), report
        if not ok:
            assert any(program in fix and "codex mcp add" in fix for fix in report["fix"])


def test_check_names_a_codex_model_it_does_not_know_and_an_endpoint_it_cannot_reach(
    tmp_path: Path,
) -> None:
    """Codex prints "Model metadata for `<name>` not found" before every turn for a model
    name it does not know (a note: gateways name their own models); an endpoint that does not
    answer makes every resume fail (a fix). Nothing but the endpoint's model list is asked."""
    codex = npm_tool(*CODEX)
    home = tmp_path / "h"
    (home / ".codex").mkdir(parents=True)
    codex_cfg = f'[resume.codex]\nbinary = "{codex}"\n'

    def config(model: str, url: str) -> None:
        (home / ".codex" / "config.toml").write_text(
            f'model = "{model}"\nmodel_provider = "gw"\n[model_providers.gw]\nname = "gw"\n'
            f'base_url = "{url}/v1"\nwire_api = "responses"\n'
            '[mcp_servers.fedhpc]\ncommand = "fedhpc"\nargs = ["serve"]\n'
        )

    with FakeOpenAI() as endpoint:
        config("fake-model", endpoint.url)
        rc, body = _check(home, codex_cfg, "codex")
        (report,) = body["runtimes"]
        assert rc == 0 and report["ok"] is True, report
        assert "model fake-model" in report["detail"]
        (note,) = report["notes"]
        assert "does not know the model `fake-model`" in note and "Model metadata" in note
        assert ("GET", "/v1/models") in endpoint.extra  # its list, never a model request
        assert endpoint.exchanges == []
        config("gpt-5.5", endpoint.url)  # a model in Codex's catalog
        rc, body = _check(home, codex_cfg, "codex")
        assert rc == 0 and body["runtimes"][0]["notes"] == []
    config("gpt-5.5", "http://127.0.0.1:9")  # nothing listens there
    rc, body = _check(home, codex_cfg, "codex")
    (report,) = body["runtimes"]
    assert rc == 1 and report["ok"] is False
    assert any("cannot be reached" in f and "127.0.0.1:9" in f for f in report["fix"])


def test_check_asks_the_chatgpt_backend_when_codex_is_signed_in_with_chatgpt(
    tmp_path: Path,
) -> None:
    """Codex signed in with ChatGPT (auth.json holds tokens, no API key) sends its model
    requests to the ChatGPT backend, not to api.openai.com: the check asks that endpoint (here
    the fake, through `chatgpt_base_url`), never sends the login's token, and says so."""
    codex = npm_tool(*CODEX)
    home = tmp_path / "h"
    (home / ".codex").mkdir(parents=True)
    token = "canary-chatgpt-access-token"

    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    claims = {
        "email": "someone@example.org",
        "exp": 4102444800,
        "https://api.openai.com/auth": {"chatgpt_plan_type": "plus", "chatgpt_account_id": "a1"},
    }
    id_token = f"{part({'alg': 'none'})}.{part(claims)}.sig"  # what Codex reads of a login
    tokens = {"id_token": id_token, "access_token": token, "refresh_token": "r", "account_id": "a1"}
    (home / ".codex" / "auth.json").write_text(
        json.dumps(
            {"OPENAI_API_KEY": None, "tokens": tokens, "last_refresh": "2026-12-05T00:00:00Z"}
        )
    )
    with FakeOpenAI() as backend:
        (home / ".codex" / "config.toml").write_text(
            f'model = "gpt-5.5"\nchatgpt_base_url = "{backend.url}/backend-api/codex"\n'
            '[mcp_servers.fedhpc]\ncommand = "fedhpc"\nargs = ["serve"]\n'
        )
        rc, body = _check(home, f'[resume.codex]\nbinary = "{codex}"\n', "codex")
    (report,) = body["runtimes"]
    assert rc == 0 and report["ok"] is True, report
    assert ("GET", "/backend-api/codex/models") in backend.extra  # not the platform API
    assert backend.exchanges == []
    assert any("signed in with ChatGPT" in n for n in report["notes"]), report
    assert token not in json.dumps(body)
