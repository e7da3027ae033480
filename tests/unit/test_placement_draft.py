"""Envelope normalization (per-field errors) and `draft_envelope` for its three sources."""

from __future__ import annotations

import pytest

from fedhpc.domain import DraftSource, ResourceEnvelope
from fedhpc.errors import ValidationFailed
from fedhpc.ops.draft import draft_envelope
from fedhpc.placement import Workload, normalize_envelope, parse_envelope
from tests.unit.test_placement_world import env, gpu_partition, profile

PROFILES = [profile("alpha", gpu_partition("g")), profile("beta", gpu_partition("h", "h100"))]


def _fields(exc: ValidationFailed) -> list[str]:
    return [i.field for i in exc.issues]


def test_min_above_max_names_the_dimension() -> None:
    with pytest.raises(ValidationFailed) as err:
        parse_envelope({"gpus": {"min": 4, "max": 2}, "cpus": {"min": -1}})
    assert _fields(err.value) == ["gpus", "cpus.min"]
    assert err.value.as_dict()["code"] == "validation"


def test_unknown_accelerator_type_names_the_item_and_the_known_types() -> None:
    with pytest.raises(ValidationFailed) as err:
        normalize_envelope(env(gpus=1, accelerator_types=("A100", "tpu")), PROFILES)
    (issue,) = err.value.issues
    assert issue.field == "accelerator_types[1]" and "a100, h100" in issue.reason


def test_normalization_lowercases_and_deduplicates_accelerator_types() -> None:
    out = normalize_envelope(env(gpus=1, accelerator_types=("A100", "a100 ")), PROFILES)
    assert out.accelerator_types == ("a100",)


def test_unit_slips_are_reported_per_field() -> None:
    with pytest.raises(ValidationFailed) as err:
        normalize_envelope(env(memory=(16, 32), wall_time=2), PROFILES)
    assert _fields(err.value) == ["memory.min", "memory.max", "wall_time.min"]
    assert "'16G'" in err.value.issues[0].reason


def test_contradictory_site_preferences_are_rejected() -> None:
    bad = env(sites_exclude=("beta",), preferences={"sites": ["beta"], "partitions": ["alpha"]})
    with pytest.raises(ValidationFailed) as err:
        normalize_envelope(bad, PROFILES)
    assert _fields(err.value) == ["preferences.sites[0]", "preferences.partitions[0]"]
    with pytest.raises(ValidationFailed) as err:
        normalize_envelope(env(sites_include=("gamma",)), PROFILES)
    assert _fields(err.value) == ["sites_include[0]"]


DDP = """
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
loader = DataLoader(ds, batch_size=64, num_workers=8)
# launch: torchrun --nproc_per_node=4 train.py
"""


@pytest.mark.parametrize(
    ("description", "code", "workload"),
    [
        ("tokenize and shard the corpus with pandas", ["Pool(32)"], Workload.CPU_PREPROCESSING),
        (
            "run inference with a 7B model on the test set",
            ["model.eval()"],
            Workload.SINGLE_GPU_INFERENCE,
        ),
        ("train the ResNet", [DDP], Workload.MULTI_GPU_DDP),
        (
            "hyperparameter sweep over 24 configs of the small MLP on CPU",
            [],
            Workload.PARAMETER_SWEEP,
        ),
    ],
)
def test_heuristic_drafter_recognises_the_workload_class(
    description: str, code: list[str], workload: Workload
) -> None:
    draft = draft_envelope(description, code, profiles=PROFILES)
    assert draft.workload is workload
    assert draft.heuristic and draft.valid and draft.envelope is not None
    assert draft.envelope.draft is not None and draft.envelope.draft.source is DraftSource.HEURISTIC
    assert 0 < draft.confidence <= 0.9 and draft.rationale.startswith(workload.value)


def test_ddp_draft_reads_nproc_per_node_and_num_workers() -> None:
    draft = draft_envelope("train the ResNet", [DDP])
    e = draft.envelope
    assert e is not None
    assert (e.gpus.min, e.gpus.upper) == (1, 4)
    assert (e.cpus.min, e.cpus.upper) == (9, 36)
    assert "nproc_per_node=4" in draft.signals and "num_workers=8" in draft.signals


def test_inference_draft_derives_accelerator_memory_from_model_size() -> None:
    draft = draft_envelope("serve a 13B model for inference", ["x.cuda()"])
    assert draft.envelope is not None and draft.envelope.min_accelerator_memory_gib == 32


def test_sweep_draft_reports_fanout_and_a_cpu_child_envelope() -> None:
    draft = draft_envelope("grid search over 24 configs", ["for lr in [0.1, 0.01]:"])
    assert draft.fanout == 24
    assert draft.envelope is not None and draft.envelope.gpus.upper == 0


def test_stated_duration_sets_the_wall_time() -> None:
    draft = draft_envelope("preprocess the images, takes about 3 hours")
    assert draft.envelope is not None
    assert (draft.envelope.wall_time.min, draft.envelope.wall_time.upper) == (10800, 21600)


def test_user_authored_draft_is_validated_and_recorded_as_given() -> None:
    mine = env(gpus=(1, 2), cpus=8)
    draft = draft_envelope("my job", proposed=mine, source=DraftSource.USER)
    assert draft.source is DraftSource.USER and draft.confidence == 1.0 and not draft.heuristic
    assert draft.envelope is not None and draft.envelope.gpus == mine.gpus
    assert draft.proposed["gpus"] == {"min": 1, "max": 2}


def test_agent_authored_invalid_draft_is_kept_with_per_field_issues() -> None:
    proposed = {"gpus": {"min": 4, "max": 1}, "accelerator_types": ["a100"]}
    draft = draft_envelope("x", proposed=proposed, rationale="guess", confidence=0.7)
    assert draft.source is DraftSource.ASSISTANT and not draft.valid and draft.envelope is None
    assert [i.field for i in draft.issues] == ["gpus"]
    assert draft.proposed == proposed and draft.confidence == 0.7


def test_agent_draft_with_unknown_accelerator_fails_validation_against_profiles() -> None:
    draft = draft_envelope(
        "x", proposed={"gpus": {"min": 1}, "accelerator_types": ["tpu"]}, profiles=PROFILES
    )
    assert not draft.valid and draft.issues[0].field == "accelerator_types[0]"


def test_draft_serializes_with_both_the_original_and_the_normalized_envelope() -> None:
    draft = draft_envelope("train", [DDP])
    data = draft.model_dump(mode="json")
    assert data["proposed"]["gpus"] == {"min": 1, "max": 4}
    assert ResourceEnvelope.model_validate(data["envelope"]) == draft.envelope


@pytest.mark.parametrize(
    ("description", "gpus", "nodes", "phrase"),
    [
        ("train a resnet on 8 gpus", 8, 1, "8 gpus"),
        ("finetune llama on 8x A100", 8, 1, "8x A100"),
        ("pretrain on 4 H100s for 3 hours", 4, 1, "4 H100s"),
        ("train the model on two GPUs", 2, 1, "two GPUs"),
        ("train on 64 GPUs", 8, 8, "64 GPUs"),
    ],
)
def test_a_stated_gpu_count_is_drafted_and_named_in_the_rationale(
    description: str, gpus: int, nodes: int, phrase: str
) -> None:
    """'train a resnet on 8 gpus' was drafted as 1 GPU, single-gpu-inference."""
    draft = draft_envelope(description)
    e = draft.envelope
    assert e is not None and draft.workload is Workload.MULTI_GPU_DDP
    assert (e.gpus.min, e.gpus.upper, e.nodes.min, e.nodes.upper) == (gpus, gpus, nodes, nodes)
    assert f"stated {phrase!r}" in draft.rationale


def test_one_stated_gpu_is_named_in_the_rationale() -> None:
    draft = draft_envelope("run inference on 1 GPU")
    assert draft.workload is Workload.SINGLE_GPU_INFERENCE
    assert draft.envelope is not None and draft.envelope.gpus.upper == 1
    assert "stated '1 GPU'" in draft.rationale


@pytest.mark.parametrize(
    "description",
    [
        "train on 1e400 gpus",  # an exponent's digits: not 400
        "train on -5 gpus",
        "train on 1.5 gpus",
        "train with a100 gpus",  # a model number, not a count
        "train on 8 GPU nodes",  # counts nodes
        "train for 8 gpu-hours",
    ],
)
def test_a_gpu_count_that_cannot_be_read_whole_is_not_read(description: str) -> None:
    draft = draft_envelope(description)
    assert draft.envelope is not None and draft.envelope.gpus.upper == 1
    assert "stated" not in draft.rationale
    assert not any(s.startswith("gpus=") for s in draft.signals)


def _shape(draft: object) -> tuple[int, int | None, int, int | None]:
    e = getattr(draft, "envelope", None)
    assert e is not None
    return (e.gpus.min, e.gpus.upper, e.nodes.min, e.nodes.upper)


@pytest.mark.parametrize(
    ("description", "gpus", "phrase"),
    [
        ("train on up to 8 gpus", (1, 8), "up to 8 gpus"),
        ("finetune with at most 4 GPUs", (1, 4), "at most 4 GPUs"),
        ("train on 1-8 gpus", (1, 8), "1-8 gpus"),
        ("scale from 2 to 8 gpus", (2, 8), "2 to 8 gpus"),
        ("train on two to eight GPUs", (2, 8), "two to eight GPUs"),
        ("train on at least 2 gpus", (2, 4), "at least 2 gpus"),  # max: the class's 4
        ("train on at least 8 gpus", (8, 8), "at least 8 gpus"),  # not less than stated
    ],
)
def test_a_stated_bound_or_range_is_drafted_as_a_range(
    description: str, gpus: tuple[int, int], phrase: str
) -> None:
    """'up to 8 gpus' and '1-8 gpus' were drafted as exactly 8."""
    draft = draft_envelope(description)
    assert draft.workload is Workload.MULTI_GPU_DDP
    assert _shape(draft) == (*gpus, 1, 1)
    assert f"(stated {phrase!r})" in draft.rationale


@pytest.mark.parametrize(
    "description",
    [
        "run 100 gpu jobs",  # was 100 GPUs on 13 nodes
        "a 10x gpu speedup",  # was 10 GPUs on 2 nodes
        "queue 40 gpu tasks",
        "expect a 10x gpu acceleration",
        "budget: 500 gpu hours",
    ],
)
def test_a_count_of_gpu_jobs_or_a_speedup_is_not_a_gpu_count(description: str) -> None:
    draft = draft_envelope(description)
    assert _shape(draft)[1] == 1
    assert "stated" not in draft.rationale
    assert not any(s.startswith("gpus") for s in draft.signals)


def test_one_job_on_n_gpus_is_still_a_gpu_count() -> None:
    draft = draft_envelope("train it as one 8-gpu job")
    assert _shape(draft) == (8, 8, 1, 1) and "stated '8-gpu'" in draft.rationale


@pytest.mark.parametrize(
    ("description", "code", "shape", "said"),
    [
        (
            "train with 8 gpus per node",
            ["torchrun --nnodes=4 train.py"],
            (8, 8, 4, 4),
            "8 GPUs per node (stated '8 gpus per node') on 4 nodes (--nnodes=4): 32 in all",
        ),
        (
            "train on 2 nodes with 8 gpus each",
            [],
            (8, 8, 2, 2),
            "8 GPUs per node (stated '8 gpus each') on 2 nodes (stated '2 nodes'): 16 in all",
        ),
        (
            "train on 8 gpus",
            ["torchrun --nnodes=4 train.py"],
            (8, 8, 4, 4),
            "8 GPUs per node (stated '8 gpus') on 4 nodes (--nnodes=4): 32 in all",
        ),
        (
            "train on 16 gpus across 2 nodes",  # more than a node holds: the total
            [],
            (8, 8, 2, 2),
            "16 GPUs in all (stated '16 gpus') over 2 nodes (stated '2 nodes'): 8 per node",
        ),
    ],
)
def test_a_count_per_node_takes_the_node_count(
    description: str, code: list[str], shape: tuple[int, int, int, int], said: str
) -> None:
    """'8 gpus per node' with --nnodes=4 was drafted as one node of 8."""
    draft = draft_envelope(description, code)
    assert _shape(draft) == shape
    assert said in draft.rationale


def test_nproc_per_node_contradicting_a_stated_count_keeps_the_wider_and_says_both() -> None:
    """'8 gpus' with --nproc_per_node=1 was drafted as 1 GPU, 'GPUs 1-1 (nproc_per_node)'."""
    draft = draft_envelope("train on 8 gpus", ["torchrun --nproc_per_node=1 train.py"])
    assert _shape(draft) == (1, 8, 1, 1)
    assert "stated '8 gpus'" in draft.rationale and "--nproc_per_node=1" in draft.rationale
    assert "they disagree, so GPUs 1-8 per node (the wider)" in draft.rationale
    assert "if it is 8 nodes of 1, say so (--nnodes)" in draft.rationale


def test_nproc_per_node_times_nnodes_matching_a_stated_total_agrees() -> None:
    draft = draft_envelope("train on 8 gpus", ["torchrun --nproc_per_node=1 --nnodes=8 t.py"])
    assert _shape(draft) == (1, 1, 8, 8)
    assert "8 GPUs in all (stated '8 gpus') over 8 nodes" in draft.rationale
    assert "--nproc_per_node=1 agrees" in draft.rationale


def test_a_range_over_several_nodes_is_not_drafted_below_its_minimum() -> None:
    draft = draft_envelope("train on between 16 and 20 gpus")
    assert _shape(draft) == (8, 8, 2, 3)  # 16-24 in all; 7 per node would allow 14
    assert "stated 'between 16 and 20 gpus'" in draft.rationale
