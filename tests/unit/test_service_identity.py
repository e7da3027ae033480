"""Service mode's identities (issue 34): each Slurm job names the person it runs for in its
comment (text no directive can be broken out of), and `fedhpc service` refuses an SSH site
whose login the operator did not name."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.cli.service import site_identities
from fedhpc.domain import JobSpec
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.job import Shape, job_comment
from fedhpc.placement.credit import predict_charge
from fedhpc.placement.spend import ledger_rows
from fedhpc.profiles import load_profiles
from tests.injection_corpus import corpus

ISSUER = "https://idp.example.org/realms/hpc"


def _spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "fedhpc-t1-1",
        "command": ["true"],
        "partition": "cpu",
        "shape": {"nodes": 1, "cpus": 1, "wall_time_s": "5m"},
    }
    return JobSpec.model_validate({**base, **kw})


def test_a_slurm_job_names_the_person_in_its_comment() -> None:
    comment = job_comment(f"{ISSUER}|4f1c-a9")
    assert comment == f"fedhpc-for:{ISSUER}|4f1c-a9"
    script = SlurmDialect().render_script(_spec(comment=comment), load_profiles()["devdelta"])
    assert f"#SBATCH --comment={comment}" in script.splitlines()
    plain = SlurmDialect().render_script(_spec(), load_profiles()["devdelta"])
    assert "--comment" not in plain  # the single-user default names nobody


def test_any_subject_becomes_a_comment_that_stays_one_directive(tmp_path: Path) -> None:
    for hostile in [*corpus(tmp_path), "x" * 500]:
        comment = job_comment(f"{ISSUER}|{hostile}")
        spec = _spec(comment=comment)
        script = SlurmDialect().render_script(spec, load_profiles()["devdelta"])
        lines = [line for line in script.splitlines() if "--comment" in line]
        assert lines == [f"#SBATCH --comment={comment}"], hostile
        assert len(comment) <= len("fedhpc-for:") + 200


def test_a_comment_fedhpc_did_not_write_is_refused() -> None:
    for bad in ("someone", "fedhpc-for:a b", "fedhpc-for:x\n#SBATCH --uid=0", "fedhpc-for:"):
        with pytest.raises(ValidationError):
            _spec(comment=bad)


def test_an_ssh_site_without_a_named_login_is_a_problem_and_others_are_not() -> None:
    profiles = load_profiles()
    named = Site(profiles["delta"], UserSiteConfig.model_validate({"transport": {"user": "proj"}}))
    unnamed = Site(profiles["vista"], UserSiteConfig())
    local = Site(profiles["devdelta"], UserSiteConfig())
    ids = {i.site: i for i in site_identities({"delta": named, "vista": unnamed, "l": local})}
    assert ids["delta"].runs_as is not None and ids["delta"].runs_as.startswith("proj@")
    assert ids["delta"].problem is None
    assert ids["vista"].runs_as is None
    assert ids["vista"].problem and "[sites.vista.transport] user" in ids["vista"].problem
    assert ids["l"].problem is None


def test_the_ledger_charges_ended_attempts_for_their_run_and_live_ones_in_full() -> None:
    profile = load_profiles()["devdelta"]
    part = profile.partitions[0]
    site = Site(profile, UserSiteConfig())
    shape = {"nodes": 1, "cpus": 2, "gpus": 0, "wall_time_s": 3600}
    body = {"account": "acct", "shape": shape}

    def row(owner: str | None, state: str, **extra: object) -> dict[str, object]:
        b = {**body, **extra}
        return {
            "owner": owner,
            "site": "devdelta",
            "partition": part.name,
            "state": state,
            "body": b,
        }

    attempts = [
        row("a", "completed", runtime_s=1800),  # half an hour of a one-hour shape
        row("a", "running"),  # the whole hour
        row("a", "pending", superseded=True),  # replaced before it ran: nothing
        row("a", "failed"),  # no runtime known: nothing
        row("b", "completed", runtime_s=3600),
        {**row("a", "running"), "site": "gone"},  # a site no longer configured
    ]
    full = predict_charge(profile, part, Shape.model_validate(shape))
    rows = {r["owner"]: r for r in ledger_rows(attempts, {"devdelta": site})}
    assert rows["a"]["used"] == round(full.amount / 2, 4)
    assert rows["a"]["committed"] == full.amount and rows["a"]["attempts"] == 2
    assert rows["b"]["used"] == full.amount and rows["b"]["committed"] == 0
    # A row whose stored shape cannot be read is named and left out; the others still count.
    bad = {**row("a", "running", shape={"nodes": "many"}), "task_id": "t-bad"}
    unreadable: list[str] = []
    again = ledger_rows([*attempts, bad], {"devdelta": site}, unreadable=unreadable)
    assert {r["owner"]: r for r in again} == rows
    assert unreadable == ["t-bad"]
