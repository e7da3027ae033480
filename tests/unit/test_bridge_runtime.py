"""The resume bridge's pure parts: the resume environment from `[resume]`, the per-session
key, the session record check, and how a finished resume is judged (tools present or not)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.bridge.outcome import Outcome, check_result, model_answered, why_silent
from fedhpc.bridge.records import record_path, seen
from fedhpc.bridge.routing import session_key
from fedhpc.bridge.runtimes import binary, fedhpc_bin, resume_env
from fedhpc.cli.hooks import pre_tool_use
from fedhpc.domain.config import ResumeRuntime, UserConfig
from fedhpc.errors import TransientError, UsageError
from fedhpc.ops.continuations import ContinuationSpec, Runtime, ToolBinding


def _claude(session: str = "s1", cwd: str = "/work/p") -> ContinuationSpec:
    return ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id=session, cwd=cwd)


def test_the_resume_environment_comes_from_the_config_never_from_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-the-client-that-started-the-daemon")
    monkeypatch.setenv("PATH", "/some/client/path")
    secret = tmp_path / "claude.env"
    secret.write_text("# creds\nexport ANTHROPIC_API_KEY='sk-from-file'\nEMPTY=\n")
    cfg = ResumeRuntime(env={"ANTHROPIC_BASE_URL": "http://gw"}, env_file=str(secret))
    env = resume_env(cfg, tmp_path)
    assert env["ANTHROPIC_API_KEY"] == "sk-from-file"
    assert env["ANTHROPIC_BASE_URL"] == "http://gw"
    assert env["PATH"] == f"{tmp_path / 'bin'}:/usr/local/bin:/usr/bin:/bin"  # not the client's
    assert env["FEDHPC_HOME"] == str(tmp_path)
    bare = resume_env(ResumeRuntime(), tmp_path)
    assert "ANTHROPIC_API_KEY" not in bare
    # a `command` continuation runs what its registrant named: it keeps the daemon's environment
    mine = resume_env(ResumeRuntime(env={"X": "1"}), tmp_path, inherit=True)
    assert mine["PATH"] == f"{tmp_path / 'bin'}:/some/client/path" and mine["X"] == "1"


def test_a_resume_finds_the_daemons_own_fedhpc_whatever_its_path_says(tmp_path: Path) -> None:
    """Claude's resumed turn runs `fedhpc hook pre-tool-use` and Codex starts `fedhpc serve`
    by name, from the resume's PATH: a `[resume]` path without fedhpc's folder used to break
    both (`fedhpc: not found`). The folder first on that PATH holds only `fedhpc`."""
    bare = resume_env(ResumeRuntime(path="/usr/bin:/bin"), tmp_path / "h")
    assert shutil.which("fedhpc", path=bare["PATH"]) is None  # until a launch makes it
    folder = fedhpc_bin(tmp_path / "h")
    for cfg in (ResumeRuntime(path="/usr/bin:/bin"), ResumeRuntime(env={"PATH": "/bin"})):
        env = resume_env(cfg, tmp_path / "h")
        assert shutil.which("fedhpc", path=env["PATH"]) == str(folder / "fedhpc")
        assert [p.name for p in folder.iterdir()] == ["fedhpc"]  # no `python` put first
        hook = '{"session_id":"s","cwd":"/","tool_use_id":"t","tool_name":"Bash"}'
        for cmd in ("fedhpc --version", "fedhpc hook pre-tool-use"):
            out = subprocess.run(
                ["/bin/sh", "-c", cmd],
                env=env,
                input=hook,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert out.returncode == 0 and out.stderr == "", (cmd, out.stderr)


def test_a_missing_env_file_or_binary_is_a_usage_error_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="env_file"):
        resume_env(ResumeRuntime(env_file=str(tmp_path / "nope")), tmp_path)
    cfg = ResumeRuntime(binary="/nonexistent/claude")
    with pytest.raises(UsageError, match="not found") as err:
        binary(Runtime.CLAUDE_CODE, cfg, resume_env(cfg, tmp_path))
    assert "[resume.claude-code]" in (err.value.hint or "")


def test_the_resume_section_parses_per_runtime_and_rejects_bad_names() -> None:
    cfg = UserConfig.model_validate(
        {
            "resume": {
                "claude-code": {"binary": "/opt/claude", "env": {"A_B": "1"}},
                "codex": {"path": "/bin"},
            }
        }
    )
    assert cfg.resume.get("claude-code").binary == "/opt/claude"
    assert cfg.resume.get("codex").path == "/bin"
    assert cfg.resume.get("command") == ResumeRuntime()
    with pytest.raises(ValidationError):
        UserConfig.model_validate({"resume": {"claude-code": {"env": {"A=B": "1"}}}})
    with pytest.raises(ValidationError):
        UserConfig.model_validate({"resume": {"claude": {}}})


def test_one_queue_per_session_and_per_command_target() -> None:
    assert session_key(_claude("s1")) == session_key(_claude("s1", "/other"))
    assert session_key(_claude("s1")) != session_key(_claude("s2"))
    cmd = ContinuationSpec(runtime=Runtime.COMMAND, command=("agent",))
    narrow = cmd.model_copy(update={"events": ("task.terminal",)})
    assert session_key(cmd) == session_key(narrow)  # the same agent, whatever it listens to
    other = ContinuationSpec(runtime=Runtime.COMMAND, command=("agent", "2"))
    assert session_key(cmd) != session_key(other)


def test_the_session_record_tells_which_deliveries_it_already_holds(tmp_path: Path) -> None:
    cwd = "/work/my project"
    folder = tmp_path / ".claude" / "projects" / "-work-my-project"
    folder.mkdir(parents=True)
    text = 'fedhpc event:\n{"fedhpc":"continuation","delivery":"d7-cx","event":"task.terminal"}'
    line = {"type": "user", "message": {"content": text}}
    (folder / "s1.jsonl").write_text(json.dumps(line) + "\n")
    env = {"HOME": str(tmp_path)}
    spec = _claude("s1", cwd)
    assert record_path(spec, env) == folder / "s1.jsonl"
    assert seen(spec, env, ["d7-cx", "d8-cx"]) == ["d7-cx"]
    assert seen(_claude("s2", cwd), env, ["d7-cx"]) == []  # another session's record
    # a nudge that only names the id is not the event itself
    nudge = {"type": "user", "message": {"content": "fedhpc: the event(s) d8-cx in an earlier"}}
    with (folder / "s1.jsonl").open("a") as fh:
        fh.write(json.dumps(nudge) + "\n")
    assert seen(spec, env, ["d8-cx"]) == []
    # Codex: the rollout named by the thread
    roll = tmp_path / "codex" / "sessions" / "2026" / "11" / "30"
    roll.mkdir(parents=True)
    (roll / "rollout-2026-11-30T12-00-00-th1.jsonl").write_text(json.dumps(line) + "\n")
    codex = ContinuationSpec(runtime=Runtime.CODEX, session_id="th1")
    assert seen(codex, {"CODEX_HOME": str(tmp_path / "codex")}, ["d7-cx"]) == ["d7-cx"]


def _out(folder: Path, *lines: Mapping[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "out").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_a_claude_resume_counts_only_with_fedhpcs_tools_connected(tmp_path: Path) -> None:
    spec = _claude()
    ok = {"type": "result", "is_error": False, "result": "done"}
    good = {
        "type": "system",
        "subtype": "init",
        "tools": ["Bash", "mcp__fedhpc__get_result"],
        "mcp_servers": [{"name": "fedhpc", "status": "connected"}],
    }
    _out(tmp_path / "a", good, ok)
    assert check_result(spec, tmp_path / "a", Outcome(0, "", "")) is True
    pending = {**good, "tools": ["Bash"], "mcp_servers": [{"name": "fedhpc", "status": "pending"}]}
    _out(tmp_path / "b", pending, ok)
    with pytest.raises(TransientError, match="without fedhpc's tools"):
        check_result(spec, tmp_path / "b", Outcome(0, "", ""))
    failed = {"type": "result", "is_error": True, "result": "Not logged in · Please run /login"}
    _out(tmp_path / "c", good, failed)
    with pytest.raises(TransientError, match="Not logged in"):
        check_result(spec, tmp_path / "c", Outcome(1, json.dumps(failed), ""))


def test_codex_liveness_counts_model_output_items_never_its_own_error_notices(
    tmp_path: Path,
) -> None:
    """Codex prints an `error` item for every model name it does not know, before any
    request: a resume holding only that is still waiting for the model."""
    spec = ContinuationSpec(runtime=Runtime.CODEX, session_id="th1")
    notice = "Model metadata for `gw-model` not found. Defaulting to fallback metadata"
    started = {"type": "thread.started", "thread_id": "th1"}
    error = {"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": notice}}
    _out(tmp_path / "a", started, {"type": "turn.started"}, error)
    assert model_answered(spec, tmp_path / "a") is False
    assert why_silent(tmp_path / "a") == f" (codex said: {notice})"
    call = {"id": "item_1", "type": "mcp_tool_call", "tool": "get_result", "status": "in_progress"}
    _out(tmp_path / "b", started, error, {"type": "item.started", "item": call})
    assert model_answered(spec, tmp_path / "b") is True
    text = {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message"}}
    _out(tmp_path / "c", started, error, text)
    assert model_answered(spec, tmp_path / "c") is True
    assert why_silent(tmp_path / "d") == ""


def test_a_failure_reason_keeps_both_output_tails() -> None:
    reason = Outcome(7, "x" * 5000 + "OUT-END", "ERR-END").reason()
    assert reason.startswith("exit 7") and "OUT-END" in reason and "ERR-END" in reason
    assert len(reason) < 1400


def test_the_pre_tool_use_hook_never_blocks_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEDHPC_HOME", str(tmp_path / "h"))
    assert pre_tool_use("not json") == 0
    assert "unusable hook input" in capsys.readouterr().err
    other = {"session_id": "s1", "cwd": "/w", "tool_use_id": "toolu_1", "tool_name": "Bash"}
    assert pre_tool_use(json.dumps(other)) == 0  # not fedhpc's: ignored, no daemon started
    assert not (tmp_path / "h").exists()
    b = ToolBinding.model_validate({**other, "hook_event_name": "PreToolUse", "tool_input": {}})
    assert b.tool_use_id == "toolu_1"
    with pytest.raises(ValidationError):
        ToolBinding.model_validate({**other, "cwd": "relative/path"})


def test_a_malformed_env_file_line_is_reported_by_number_never_quoted(tmp_path: Path) -> None:
    canary = "sk-ant-CANARY-7f3e9d"
    secret = tmp_path / "claude.env"
    secret.write_text(f"# creds\nOK=1\n{canary}\n")  # a pasted key without its NAME=
    with pytest.raises(UsageError) as err:
        resume_env(ResumeRuntime(env_file=str(secret)), tmp_path)
    said = f"{err.value.message} {err.value.hint} {err.value!r}"
    assert "line 3" in said and str(secret) in said
    assert "CANARY" not in said and "sk-ant" not in said
