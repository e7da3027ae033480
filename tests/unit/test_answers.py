"""The contract's answers tell the truth: `next` for every tool and state, compact results,
"did you mean" for unknown keys, confined workdirs and usable site names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import JobState, Shape
from fedhpc.domain.site import StorageRoot
from fedhpc.errors import ValidationFailed
from fedhpc.mcp_server.results import answer_result, compact, validation_failed
from fedhpc.ops.hints import next_hint
from fedhpc.ops.sitecheck import check_site_names
from fedhpc.ops.suggest import nearest, unknown_field_reason
from fedhpc.ops.task_views import AttemptView, ResultManifest, TaskHandle
from fedhpc.ops.tasks import SubmitGroupRequest, SubmitTaskRequest
from fedhpc.ops.workdir import check_workdir, resolve_workdir, sites_holding
from fedhpc.placement.policy import PolicyKind
from tests.unit.test_placement_world import cpu_partition, env, profile

LIVE = ("submitted", "pending", "running", "accepted", "placing")
ENDED = ("completed", "failed", "cancelled", "timeout", "unschedulable")
TOOLS = ("submit_task", "replan", "get_result", "submit_group", "group")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("state", LIVE)
def test_live_work_says_end_your_turn_only_when_a_continuation_will_wake_the_agent(
    tool: str, state: str
) -> None:
    woken = next_hint(tool, state, resumes=True)  # type: ignore[arg-type]
    alone = next_hint(tool, state, resumes=False)  # type: ignore[arg-type]
    if tool.startswith("submit_"):
        assert "End your turn" in woken  # the caller is the session the continuation names
    else:  # get_result/replan/group may come from another session: name whom fedhpc resumes
        assert "End your turn" not in woken and "the session that submitted it" in woken
    assert "Do not poll" in woken
    assert "End your turn" not in alone and "resumes" not in alone
    assert "get_result" in alone


def test_an_unschedulable_group_child_is_not_sent_to_a_replan_its_ended_round_refuses() -> None:
    hint = next_hint("get_result", "unschedulable", resumes=True, ref="t1", child=True)
    assert "round is open" in hint and "submit_group" in hint
    assert "submit_group" not in next_hint("get_result", "unschedulable", resumes=True)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("state", ENDED)
@pytest.mark.parametrize("resumes", [True, False])
def test_finished_work_never_says_wait_and_suggests_replan_only_where_it_works(
    tool: str, state: str, resumes: bool
) -> None:
    hint = next_hint(tool, state, resumes=resumes, ref="t1")  # type: ignore[arg-type]
    assert "End your turn" not in hint
    assert "resumes you" not in hint
    if state == "unschedulable":
        assert "replan" in hint and "envelope" in hint  # replan places it again
    else:
        assert "replan" not in hint  # replan refuses other finished tasks
    if state in {"completed", "failed"} and tool not in {"get_result", "submit_group", "group"}:
        assert "get_result(task_id='t1')" in hint


def test_cancel_of_a_finished_task_says_nothing_was_cancelled() -> None:
    for state in ENDED:
        hint = next_hint("cancel", state, resumes=True, ref="t1")
        assert hint.startswith("Nothing was cancelled") and state in hint
    stopped = next_hint("cancel", "cancelled", resumes=True, cancelled_now=True)
    assert stopped.startswith("Cancelled: fedhpc stopped it") and "if one was" in stopped


def test_a_failed_result_points_at_the_stderr_tail() -> None:
    assert "stderr tail" in next_hint("get_result", "failed", resumes=True)
    assert "wall_time" in next_hint("get_result", "timeout", resumes=True)


def test_compact_answers_leave_out_empty_optional_fields_but_still_validate() -> None:
    handle = TaskHandle(
        task_id="t1", state=JobState.PENDING, site="a", shape=Shape(cpus=2), next="go"
    )
    data = compact(handle)
    assert data == {
        "task_id": "t1",
        "state": "pending",
        "site": "a",
        "shape": {"nodes": 1, "cpus": 2, "wall_time_s": 600},
        "next": "go",
    }
    assert TaskHandle.model_validate(data).shape == Shape(cpus=2)
    result = answer_result(handle)
    text = result.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == result.structured_content == data
    assert ": " not in text and "\n" not in text  # compact, not pretty-printed
    manifest = ResultManifest(
        task_id="t1",
        state=JobState.COMPLETED,
        attempts=(
            AttemptView(n=1, site="a", partition="p", state=JobState.COMPLETED, exit_code=0),
        ),
    )
    got = compact(manifest)
    assert got["attempts"] == [
        {"n": 1, "site": "a", "partition": "p", "state": "completed", "exit_code": 0}
    ]  # an exit code of 0 is a value, not an empty one
    assert ResultManifest.model_validate(got) == manifest


def test_an_unknown_key_gets_the_nearest_field_name() -> None:
    assert nearest("walltime", ["wall_time", "gpus"]) == "wall_time"
    assert nearest("max_retry", ["max_retries", "wall_factor"]) == "max_retries"
    assert nearest("zzz", ["gpus"]) is None
    assert "did you mean 'wall_time'?" in unknown_field_reason(
        SubmitTaskRequest, ("envelope", "walltime")
    )
    assert "did you mean envelope.wall_time?" in unknown_field_reason(
        SubmitTaskRequest, ("walltime",)
    )
    with pytest.raises(ValidationError) as caught:
        SubmitTaskRequest.model_validate(
            {"command": ["x"], "envelope": {"wall_time": {"min": 60, "mx": 120}}}
        )
    failed = validation_failed(caught.value)
    assert failed.issues[0].field == "envelope.wall_time.mx"
    assert "did you mean 'max'?" in failed.issues[0].reason


@pytest.mark.parametrize("argv", [[""], ["  "], [" python"], ["a\x00b"]])
def test_a_program_that_can_only_fail_later_is_refused_now(argv: list[str]) -> None:
    with pytest.raises(ValidationError, match="command"):
        SubmitTaskRequest(command=tuple(argv), envelope=ResourceEnvelope())
    with pytest.raises(ValidationError, match="command"):
        SubmitGroupRequest.model_validate(
            {"objective": "o", "children": [{"command": argv}], "envelope": {}}
        )
    SubmitTaskRequest(command=("printf", ""), envelope=ResourceEnvelope())  # an empty arg is meant


def test_fixed_site_alone_implies_the_policy_and_conflicts_are_errors() -> None:
    env = ResourceEnvelope()
    req = SubmitTaskRequest(command=("x",), envelope=env, fixed_site="a")
    assert req.policy is PolicyKind.FIXED_SITE and not req.fallback
    with pytest.raises(ValidationError, match="fixed_site"):
        SubmitTaskRequest(
            command=("x",), envelope=env, fixed_site="a", policy=PolicyKind.SHORTEST_QUEUE
        )
    with pytest.raises(ValidationError, match="fallback"):
        SubmitTaskRequest(command=("x",), envelope=env, fallback=True)
    with pytest.raises(ValidationError, match="needs fixed_site"):
        SubmitTaskRequest(command=("x",), envelope=env, policy=PolicyKind.FIXED_SITE)


@pytest.mark.parametrize("bad", ["~", "~/x", "//server/share/x", "/", ".", "a/./b", "../x"])
def test_workdirs_that_escape_or_mean_nothing_are_refused_before_submission(bad: str) -> None:
    with pytest.raises(ValidationError, match="workdir"):
        SubmitTaskRequest(command=("x",), envelope=ResourceEnvelope(), workdir=bad)
    with pytest.raises(ValueError):  # noqa: PT011 (the message is checked above)
        check_workdir(bad)


def test_workdirs_resolve_under_the_task_folder_or_inside_a_storage_root() -> None:
    root = "/scratch"
    p = profile("s", cpu_partition("c"), storage=(StorageRoot(name="scratch", path=root),))
    assert resolve_workdir(None, "/b/t1", p) == "/b/t1"
    assert resolve_workdir("run/1", "/b/t1", p) == "/b/t1/run/1"
    assert resolve_workdir(f"{root}/mine", "/b/t1", p) == f"{root}/mine"
    assert sites_holding(f"{root}/mine", [p]) == {"s"}
    assert sites_holding("/etc", [p]) == set()
    with pytest.raises(ValidationFailed) as caught:
        resolve_workdir("/etc/x", "/b/t1", p)
    assert caught.value.issues[0].field == "workdir"
    assert root in caught.value.message


def test_a_shipped_site_without_an_account_points_to_the_config_not_unknown_site() -> None:
    kw = {
        "usable": {"a"},
        "enabled": {"a", "b"},
        "profiles": {"a", "b", "delta"},
        "config_path": "/home/u/config.toml",
    }
    check_site_names({"fixed_site": "a"}, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed) as caught:
        check_site_names(
            {"fixed_site": "delta", "envelope.sites_include[0]": "b", "x": "nosuch"},
            **kw,  # type: ignore[arg-type]
        )
    err = caught.value
    assert err.code == "site_not_usable"
    reasons = {i.field: i.reason for i in err.issues}
    assert "not enabled in /home/u/config.toml" in reasons["fixed_site"]
    assert "[sites.delta]" in reasons["fixed_site"]
    assert "no account is known" in reasons["envelope.sites_include[0]"]
    assert reasons["x"] == "no site is called 'nosuch'"
    assert "Usable sites: a" in err.hint


def test_a_result_that_shows_all_the_output_says_so_and_points_nowhere_else() -> None:
    assert next_hint("get_result", "completed", resumes=False, whole=True) == (
        "Completed: preview is all of its output."
    )
    assert "outputs" in next_hint("get_result", "completed", resumes=False)


# -- a continuation whose runtime cannot start wakes nobody: say so, never "end your turn" ------


def _bridge(tmp_path: Any, binary: str) -> Any:
    from fedhpc.bridge import Bridge
    from fedhpc.domain.config import ResumeConfig, ResumeRuntime

    cfg = ResumeConfig.model_validate({"claude-code": ResumeRuntime(binary=binary)})
    return Bridge(None, tmp_path, resume=lambda: cfg)  # type: ignore[arg-type]


def test_the_bridge_says_why_a_runtime_cannot_start_and_how_to_fix_it(tmp_path: Any) -> None:
    missing = _bridge(tmp_path, "/nonexistent/claude").blocker("claude-code")
    assert "claude not found for resumes at /nonexistent/claude" in missing
    assert "[resume.claude-code]" in missing and "fedhpc deliveries check" in missing
    assert _bridge(tmp_path, "/bin/true").blocker("claude-code") == ""
    assert _bridge(tmp_path, "/nonexistent/claude").blocker("command") == ""


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("state", LIVE)
def test_live_work_with_a_blocked_runtime_says_why_and_never_to_wait(tool: str, state: str) -> None:
    why = "claude not found for resumes. Set binary under [resume.claude-code]."
    for resumes in (True, False):
        hint = next_hint(tool, state, resumes=resumes, ref="t1", blocked=why)  # type: ignore[arg-type]
        assert "cannot resume this session" in hint and why.rstrip(".") in hint
        assert "End your turn now" not in hint and "Do not end your turn" in hint
        assert "get_result" in hint and "fedhpc deliveries retry" in hint


async def test_a_submit_bound_to_a_runtime_that_cannot_start_is_told_so(
    store: Any, tmp_path: Any
) -> None:
    from fedhpc.collector import Collector
    from fedhpc.ops.continuations import ContinuationSpec, Runtime
    from fedhpc.orchestrator.service import Orchestrator

    o = Orchestrator(store, Collector({}, {}, store), {})
    spec = ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id="s-1", cwd=str(tmp_path))
    req = SubmitTaskRequest(command=("echo", "hi"), envelope=env(cpus=1), continuation=spec)
    handle = await o.intake.submit_task(req, wait_s=0)
    assert "End your turn now" in (await o.answers.hinted(handle, "submit_task")).next
    o.resume_blocker = _bridge(tmp_path, "/nonexistent/claude").blocker
    told = (await o.answers.hinted(handle, "submit_task")).next
    assert "cannot resume this session" in told and "End your turn now" not in told
    assert "/nonexistent/claude" in told
