"""The dashboard's pure parts and its gate: attempts as timeline bars (how each attempt came to
be), resume states, the token and host check, and a daemon that is down."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.job import JobState, Shape
from fedhpc.errors import UsageError
from fedhpc.ops.task_views import AttemptView, ResultManifest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.ui.data import MAX_CHILDREN
from fedhpc.ui.server import build_ui_app, delivery_status
from fedhpc.ui.timeline import bar_json, bars, span, why

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _att(
    n: int,
    site: str,
    state: JobState,
    *,
    sup: bool = False,
    reason: str | None = None,
    wall: int = 600,
    at: int = 0,
    end: int | None = 10,
) -> AttemptView:
    return AttemptView(
        n=n,
        site=site,
        partition="p",
        state=state,
        superseded=sup,
        reason=reason,
        shape=Shape(gpus=1, wall_time_s=wall),
        submitted_at=T0 + timedelta(seconds=at),
        started_at=T0 + timedelta(seconds=at + 1),
        ended_at=None if end is None else T0 + timedelta(seconds=end),
    )


def _m(task_id: str, *atts: AttemptView) -> ResultManifest:
    return ResultManifest(task_id=task_id, state=atts[-1].state, attempts=atts, name=task_id)


def test_each_attempt_says_how_it_came_to_be() -> None:
    moved = _m(
        "a",
        _att(1, "devanvil", JobState.CANCELLED, sup=True, reason="re-placed to devdelta/gpuA100x4"),
        _att(2, "devdelta", JobState.COMPLETED, at=10, end=20),
    )
    retried = _m("b", _att(1, "x", JobState.FAILED), _att(2, "x", JobState.COMPLETED, at=10))
    longer = _m(
        "c",
        _att(1, "x", JobState.TIMEOUT, wall=600),
        _att(2, "x", JobState.COMPLETED, wall=1200, at=10, end=None),
    )
    asked = _m(
        "d",
        _att(1, "x", JobState.CANCELLED, sup=True, reason="replanned on request"),
        _att(2, "y", JobState.RUNNING, at=10, end=None),
    )
    out = bars([moved, retried, longer, asked])
    assert [(b.task_id, b.n, b.cause) for b in out] == [
        ("a", 1, "placed"),
        ("a", 2, "re-placed"),
        ("b", 1, "placed"),
        ("b", 2, "retry"),
        ("c", 1, "placed"),
        ("c", 2, "extension"),
        ("d", 1, "placed"),
        ("d", 2, "replanned"),
    ]
    first = out[0]
    assert first.superseded and "superseded (re-placed to devdelta/gpuA100x4)" in why(first)
    assert why(out[1]).startswith("re-placed: the previous attempt was still pending")
    j = bar_json(out[1])
    assert j["label"] == "a #2" and j["site"] == "devdelta" and j["state"] == "completed"
    assert j["submitted"] == "2026-11-30T12:00:10+00:00"
    # An unfinished attempt runs until now on the axis.
    now = T0 + timedelta(seconds=99)
    assert span(out, now) == (T0, now)
    assert span([], now) is None


def test_resume_states_for_people() -> None:
    assert delivery_status({"state": "pending", "attempts": 0}) == "pending"
    assert delivery_status({"state": "pending", "attempts": 2}) == "retrying"
    assert delivery_status({"state": "delivered", "attempts": 1}) == "delivered"
    assert delivery_status({"state": "dead", "attempts": 4}) == "dead"


async def test_the_gate_wants_the_token_and_a_loopback_host_and_a_down_daemon_is_said(
    tmp_path: Path,
) -> None:
    settings = DaemonSettings.from_env(home=tmp_path / "nodaemon")
    async with DaemonClient(settings) as client:
        saved = tmp_path / "home" / "ui.url"
        app = build_ui_app(client, token="s3cret", port=8790, url_file=saved)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8790") as h:
            # The API wants the token in its header: not in the URL, not in a cookie. A
            # refusal is typed, tells a missing token from a wrong one, and names the file
            # holding this run's URL (the page printed `<home>/ui.url` literally).
            missing = await h.get("/api/federation")
            assert missing.status_code == 403 and missing.json()["code"] == "no_token"
            assert missing.json()["hint"].endswith(f"(also in {saved})")
            wrong = {"X-Fedhpc-Token": "wrong"}
            refused = await h.get("/api/federation", headers=wrong)
            assert refused.status_code == 403 and refused.json()["code"] == "wrong_token"
            assert str(saved) in refused.json()["hint"]
            assert (await h.get("/api/federation?token=s3cret")).status_code == 403
            h.cookies.set("fedhpc_ui_8790", "s3cret")
            assert (await h.get("/api/federation")).status_code == 403
            h.cookies.clear()
            assert (await h.get("/api/nothing")).status_code == 403
            evil = await h.get("/", headers={"Host": "evil.example:8790"})
            assert evil.status_code == 403  # DNS rebinding: another name for this address
            assert evil.json()["code"] == "forbidden_host"
            evil = await h.get("/static/app.js", headers={"Host": "evil.example:8790"})
            assert evil.status_code == 403
            # The page and its files hold no data: served without the token, and no cookie
            # (cookies ignore ports: any other server on 127.0.0.1 would receive it).
            page = await h.get("/?token=s3cret")
            assert page.status_code == 200 and "fedhpc dashboard" in page.text
            assert "set-cookie" not in page.headers
            assert page.headers["referrer-policy"] == "no-referrer"
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert (await h.get("/")).status_code == 200  # a reload, the token in sessionStorage
            for name in (
                "app.js",
                "views.js",
                "app.css",
                "vendor/chart.umd.min.js",
                "vendor/vis-timeline-graph2d.min.js",
            ):
                got = await h.get(f"/static/{name}")
                assert got.status_code == 200 and "set-cookie" not in got.headers, name
            js = (await h.get("/static/app.js")).text
            assert '"X-Fedhpc-Token"' in js and "sessionStorage" in js and "replaceState" in js
            assert "document.cookie" not in js and "credentials" not in js
            assert f"const MAX_CHILDREN_SHOWN = {MAX_CHILDREN};" in js  # the page's size
            assert (await h.get("/static/../server.py")).status_code in (403, 404)
            assert (await h.get("/static/index.html")).status_code == 404
            down = await h.get("/api/federation", headers={"X-Fedhpc-Token": "s3cret"})
            assert down.status_code == 503
            body = down.json()
            assert body["code"] == "daemon_unavailable" and "fedhpc daemon" in body["hint"]
            bad = await h.get(
                "/api/events", headers={"X-Fedhpc-Token": "s3cret"}, params={"after": "-1"}
            )
            assert bad.status_code == 400 and "after" in bad.json()["message"]


def test_ui_refuses_a_port_in_use_with_a_hint() -> None:
    from fedhpc.cli.ui import _bind

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(UsageError) as err:
            _bind(port)
    assert "in use" in err.value.message and "--port 0" in (err.value.hint or "")


def test_terminal_timeline_draws_waits_runs_and_the_move(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from fedhpc.ui.term import console, timeline_table

    monkeypatch.delenv("NO_COLOR", raising=False)
    moved = _m(
        "a",
        _att(
            1,
            "devanvil",
            JobState.CANCELLED,
            sup=True,
            at=0,
            end=50,
            reason="re-placed to devdelta/gpuA100x4",
        ),
        _att(2, "devdelta", JobState.COMPLETED, at=50, end=100),
    )
    buf = io.StringIO()
    out = console(file=buf)
    out.width = 160
    out.print(timeline_table(bars([moved]), title="task a", width=21, now=T0))
    text = buf.getvalue()
    rows = [ln for ln in text.splitlines() if ln.startswith(("devanvil", "devdelta"))]
    assert len(rows) == 2, text
    first, second = rows
    assert first.startswith("devanvil") and "✕" in first and "moved ✕" in first
    assert second.startswith("devdelta") and "re-placed" in second and "█" in second
    assert "a #1: first placement; superseded (re-placed to devdelta/gpuA100x4)" in text
    # The moved attempt fills the first half of the axis; its successor the second half.
    assert first.index("✕") <= second.index("█") < second.rindex("█"), text
    empty = timeline_table([], title="task b", now=T0)
    assert "no attempt has been submitted yet" in str(empty)


RED = {"31", "91", "38;5;1", "38;5;9", "38;5;124", "38;5;160", "38;5;196", "38;5;202", "38;5;208"}


def _painted(picture: object) -> set[str]:
    """The foreground colours `picture` is drawn with on a 256-colour terminal."""
    import io
    import re

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="256", width=200).print(picture)
    found = set()
    for params in re.findall(r"\x1b\[([0-9;]*)m", buf.getvalue()):
        codes = params.split(";")
        for i, c in enumerate(codes):
            if c == "38" and i + 2 < len(codes) and codes[i + 1] == "5":
                found.add(f"38;5;{codes[i + 2]}")
            elif c in {str(n) for n in (*range(30, 38), *range(90, 98))}:
                found.add(c)
    return found


def test_the_terminal_keeps_red_for_failures() -> None:
    """Red (and the orange that reads as red) means failed or offline: never a site's own
    colour, a move, or a partition whose GPUs are all taken (busy is yellow)."""
    from fedhpc.ops.inspect import FederationView
    from fedhpc.ui.term import federation_table, timeline_table

    sites = [f"site{i}" for i in range(7)]
    done = [
        _m(f"t{i}", _att(1, s, JobState.CANCELLED, sup=True), _att(2, s, JobState.COMPLETED))
        for i, s in enumerate(sites)
    ]
    part = {
        "name": "gpu",
        "arch": "x86_64",
        "accelerator": "a100",
        "accelerator_memory_gib": 40,
        "gpus_per_node": 4,
        "cpus_per_node": 64,
        "memory_mib_per_node": 1,
        "max_wall_s": 60,
        "max_nodes_per_job": 1,
        "blocked": False,
        "available": True,
        "nodes_usable": 1,
        "nodes_total": 1,
        "free_gpus": 0,  # every GPU taken: busy
        "total_gpus": 4,
        "free_cpus": 0,
        "total_cpus": 64,
        "max_free_gpus_on_node": 0,
        "pending_jobs": 3,
        "running_jobs": 1,
        "user_pending_jobs": 0,
        "user_running_jobs": 0,
    }
    site = {
        "site": "devdelta",
        "title": "t",
        "dialect": "slurm",
        "health": "ok",
        "stale": False,
        "collected_at": T0.isoformat(),
        "age_s": 1.0,
        "error": None,
        "accounts": [],
        "credit": [],
        "partitions": [part],
    }
    full = FederationView.model_validate({"taken_at": T0.isoformat(), "sites": [site]})
    for picture in (
        timeline_table(bars(done), title="seven sites, every task done", now=T0),
        federation_table(full),
    ):
        assert _painted(picture), picture  # drawn in colour
        assert not _painted(picture) & RED, _painted(picture)
    down = {**site, "health": "offline"}
    offline = FederationView.model_validate({"taken_at": T0.isoformat(), "sites": [down]})
    assert _painted(federation_table(offline)) & RED  # an offline site is said in red
