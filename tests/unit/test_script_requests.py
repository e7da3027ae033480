"""Job scripts in requests: submit_task's and draft_envelope's `script` fills what the request
leaves out, the answer says what was read and what was not carried, errors name `script`."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.ops.draft import DraftRequest, draft_envelope
from fedhpc.ops.tasks import SubmitTaskRequest

SLURM = (Path(__file__).parents[1] / "fixtures" / "jobscripts" / "slurm_mpi.sh").read_text()


def test_a_script_alone_gives_the_command_and_the_envelope() -> None:
    req = SubmitTaskRequest.model_validate({"script": SLURM})
    assert req.command[:2] == ("/bin/bash", "-c")
    assert req.command[2].lstrip().startswith("# Load the toolchain")
    assert (req.envelope.nodes.min, req.envelope.cpus.min) == (2, 128)
    assert req.envelope.wall_time.min == 36 * 3600
    reading = req.script_reading
    assert reading is not None and reading.scheduler == "slurm"
    assert any(n.startswith("line 10: --constraint=") for n in reading.not_carried)
    assert any("--mail-user" in n for n in reading.not_carried)


def test_fields_the_caller_sets_win_over_the_header_and_a_command_replaces_the_body() -> None:
    req = SubmitTaskRequest.model_validate(
        {"script": SLURM, "envelope": {"wall_time": {"min": "2h"}}, "command": ["hostname"]}
    )
    assert req.envelope.wall_time.min == 7200 and req.envelope.nodes.min == 2
    assert req.command == ("hostname",)


def test_a_stored_request_reads_back_the_same() -> None:
    req = SubmitTaskRequest.model_validate({"script": SLURM, "name": "melt"})
    again = SubmitTaskRequest.model_validate(req.model_dump(mode="json"))
    assert again == req


def test_a_reading_sent_by_a_caller_is_replaced_by_fedhpcs_own() -> None:
    req = SubmitTaskRequest.model_validate(
        {"command": ["true"], "envelope": {}, "script_reading": {"scheduler": "pbs"}}
    )
    assert req.script_reading is None


def test_text_that_is_no_script_is_one_error_naming_script() -> None:
    with pytest.raises(ValidationError) as info:
        SubmitTaskRequest.model_validate({"script": "python train.py\n"})
    assert [e["loc"] for e in info.value.errors()] == [("script",)]
    assert "no #SBATCH, #PBS or #BSUB line" in str(info.value)


def test_without_a_script_command_and_envelope_are_still_required() -> None:
    with pytest.raises(ValidationError) as info:
        SubmitTaskRequest.model_validate({"command": None, "envelope": None})
    assert sorted(e["loc"] for e in info.value.errors()) == [("command",), ("envelope",)]
    assert {e["type"] for e in info.value.errors()} == {"missing"}


def test_draft_envelope_reads_a_script_as_the_users_bounds_and_says_what_it_left() -> None:
    req = DraftRequest.model_validate({"script": SLURM})
    draft = draft_envelope(
        req.description, req.code_context, req.proposed, source=req.source, rationale=req.rationale
    )
    assert draft.valid and draft.source == "user" and not draft.heuristic
    assert draft.envelope is not None and draft.envelope.cpus.min == 128
    assert "read from the script's slurm header" in draft.rationale
    assert "not carried: line 2: --job-name=lammps-melt" in draft.rationale
    mine = DraftRequest.model_validate(
        {"script": SLURM, "proposed": {"nodes": {"min": 1}}, "description": "melt"}
    )
    assert mine.proposed is not None and mine.proposed["nodes"] == {"min": 1}
    assert mine.proposed["cpus"] == {"min": 128}


def test_a_path_reaches_the_request_models_only_as_text() -> None:
    with pytest.raises(ValidationError) as info:
        SubmitTaskRequest.model_validate({"script": "/scratch/me/run.sbatch"})
    assert [e["loc"] for e in info.value.errors()] == [("script",)]
    assert "/v1/scripts/read" in str(info.value)
