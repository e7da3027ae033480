"""draft_envelope's reading of what a description states beyond a plain count: a stated zero
("no gpus", "cpu only"), bounds written before or after the count ("8 or more gpus", ">= 8"),
torchrun's elastic `--nnodes=MIN:MAX`, and "NxM gpus" (N nodes of M)."""

from __future__ import annotations

import pytest

from fedhpc.ops.draft import EnvelopeDraft, draft_envelope
from fedhpc.placement import Workload


def _shape(draft: EnvelopeDraft) -> tuple[int, int, int, int]:
    e = draft.envelope
    assert e is not None, draft.issues
    return (e.gpus.min, e.gpus.upper, e.nodes.min, e.nodes.upper)


@pytest.mark.parametrize(
    ("description", "phrase"),
    [
        ("preprocess the data, 0 gpus", "0 gpus"),
        ("tokenize the corpus with no GPUs", "no GPUs"),
        ("zero gpus: resize the images", "zero gpus"),
        ("run inference, cpu only", "cpu only"),
        ("run inference on the test set without a GPU", "without a GPU"),
        ("evaluate the model, CPU-only", "CPU-only"),
        ("score the test set, only on CPUs", "only on CPUs"),
    ],
)
def test_a_stated_zero_drafts_no_gpu_and_says_it_read_none(description: str, phrase: str) -> None:
    """'0 gpus' and 'no GPUs' were drafted as one GPU: the word 'gpu' counted as a GPU signal."""
    draft = draft_envelope(description)
    assert draft.workload is Workload.CPU_PREPROCESSING
    assert _shape(draft)[:2] == (0, 0)
    assert f"no GPUs (stated {phrase!r}: read as none)" in draft.rationale
    assert "gpus=0" in draft.signals


def test_a_stated_zero_outweighs_gpu_code_and_keeps_the_node_count() -> None:
    draft = draft_envelope("cpu only", ["torchrun --nnodes=2 --nproc_per_node=4 t.py"])
    assert draft.workload is Workload.CPU_PREPROCESSING
    assert _shape(draft) == (0, 0, 2, 2)
    assert "2 nodes (--nnodes=2)" in draft.rationale


def test_a_sweep_with_no_gpus_gets_a_cpu_child() -> None:
    draft = draft_envelope("hyperparameter sweep over 24 configs, no GPUs")
    assert draft.workload is Workload.PARAMETER_SWEEP and draft.fanout == 24
    assert _shape(draft)[:2] == (0, 0)
    assert "one small CPU envelope per sweep child" in draft.rationale


@pytest.mark.parametrize(
    ("description", "gpus"),
    [
        ("saw no gpu memory errors; train on 8 gpus", (8, 8)),  # a remark, not a request
        ("there are no gpu nodes at alpha; train on 4 gpus", (4, 4)),
        ("no a100s, use 4 v100s", (4, 4)),  # a type not wanted, not zero GPUs
        ("train on no more than 8 gpus", (1, 8)),
    ],
)
def test_no_before_gpu_that_is_not_a_stated_zero_is_not_read_as_none(
    description: str, gpus: tuple[int, int]
) -> None:
    draft = draft_envelope(description)
    assert _shape(draft)[:2] == gpus
    assert "read as none" not in draft.rationale


@pytest.mark.parametrize(
    ("description", "phrase"),
    [
        ("train on 8 or more gpus", "8 or more gpus"),
        ("train on eight or more GPUs", "eight or more GPUs"),
        ("train on at least 8 gpus", "at least 8 gpus"),
        ("train on >= 8 GPUs", ">= 8 GPUs"),
        ("train on >=8 GPUs", ">=8 GPUs"),
        ("train on \u2265 8 GPUs", "\u2265 8 GPUs"),
        ("train on 8 gpus or more", "8 gpus or more"),
        ("train on 8 gpus minimum.", "8 gpus minimum"),
    ],
)
def test_a_lower_bound_drafts_the_minimum_and_says_more_may_be_wanted(
    description: str, phrase: str
) -> None:
    """'8 or more gpus' was not read (one GPU); '>= 8 GPUs' was read as exactly 8."""
    draft = draft_envelope(description)
    assert draft.workload is Workload.MULTI_GPU_DDP
    assert _shape(draft) == (8, 8, 1, 1)
    assert "gpus>=8" in draft.signals
    assert f"8 GPUs (stated {phrase!r})" in draft.rationale
    assert f"{phrase!r} is a minimum: the job may want more (raise gpus.max)" in draft.rationale


@pytest.mark.parametrize(
    ("description", "phrase", "gpus"),
    [
        ("train on up to 8 gpus", "up to 8 gpus", 8),
        ("train on <= 8 gpus", "<= 8 gpus", 8),
        ("train on 8 or fewer gpus", "8 or fewer gpus", 8),
        ("train on 8 gpus or fewer", "8 gpus or fewer", 8),
        ("train on 8 gpus at most", "8 gpus at most", 8),
        ("train on fewer than 4 gpus", "fewer than 4 gpus", 3),
    ],
)
def test_an_upper_bound_drafts_one_to_the_bound_and_says_it_is_a_maximum(
    description: str, phrase: str, gpus: int
) -> None:
    """'<= 8 gpus' and '8 gpus or fewer' were read as exactly 8."""
    draft = draft_envelope(description)
    assert _shape(draft) == (1, gpus, 1, 1)
    assert f"1-{gpus} GPUs (stated {phrase!r})" in draft.rationale
    assert f"{phrase!r} is a maximum: the draft allows fewer" in draft.rationale


def test_more_than_n_is_at_least_n_plus_one() -> None:
    draft = draft_envelope("train on more than 2 gpus")
    assert _shape(draft) == (3, 4, 1, 1) and "gpus>=3" in draft.signals


@pytest.mark.parametrize(
    "description",
    [
        "train on 8 gpus, at least 2 hours",
        "train on 8 gpus at most 4 hours",
        "train on 8 gpus or more nodes",
    ],
)
def test_a_bound_after_the_count_that_belongs_to_something_else_is_not_read(
    description: str,
) -> None:
    draft = draft_envelope(description)
    assert _shape(draft)[:2] == (8, 8)
    assert "gpus=8" in draft.signals


def test_elastic_nnodes_drafts_its_range_and_says_it_is_elastic() -> None:
    """torchrun's --nnodes=1:4 was read as 1 node."""
    draft = draft_envelope("train the model", ["torchrun --nnodes=1:4 --nproc_per_node=8 t.py"])
    assert _shape(draft) == (1, 8, 1, 4)
    assert "nnodes=1:4" in draft.signals
    assert "1-4 nodes (--nnodes=1:4)" in draft.rationale
    assert "--nnodes=1:4 is elastic: it runs on 1 node and grows up to 4" in draft.rationale


def test_elastic_nnodes_with_a_stated_count_per_node() -> None:
    draft = draft_envelope("train on 8 gpus", ["torchrun --nnodes=2:4 t.py"])
    assert _shape(draft) == (8, 8, 2, 4)
    assert "8 GPUs per node (stated '8 gpus') on 2-4 nodes (--nnodes=2:4)" in draft.rationale
    assert "it runs on 2 nodes and grows up to 4" in draft.rationale


def test_a_stated_node_count_inside_the_elastic_range_is_kept() -> None:
    draft = draft_envelope("train on 2 nodes", ["torchrun --nnodes=1:4 --nproc_per_node=4 t.py"])
    assert _shape(draft)[2:] == (2, 2)
    assert "2 nodes (stated '2 nodes', --nnodes=1:4)" in draft.rationale


@pytest.mark.parametrize("flag", ["--nnodes=2", "--nnodes 2", "--nnodes=2:2"])
def test_a_fixed_nnodes_drafts_exactly_that_many_nodes(flag: str) -> None:
    """A fixed --nnodes=2 was drafted as nodes 1-2: torchrun on one node waits for the other."""
    draft = draft_envelope("train the model", [f"torchrun {flag} --nproc_per_node=8 t.py"])
    assert _shape(draft) == (1, 8, 2, 2)
    assert "nnodes=2" in draft.signals and "2 nodes (--nnodes=2)" in draft.rationale
    assert "elastic" not in draft.rationale


@pytest.mark.parametrize(
    ("description", "phrase", "shape"),
    [
        ("train on 4x8 gpus", "4x8 gpus", (8, 8, 4, 4)),
        ("finetune on 2 x 8 A100", "2 x 8 A100", (8, 8, 2, 2)),
        ("pretrain on 2\u00d74 H100s", "2\u00d74 H100s", (4, 4, 2, 2)),
    ],
)
def test_n_times_m_gpus_is_n_nodes_of_m(
    description: str, phrase: str, shape: tuple[int, int, int, int]
) -> None:
    """'4x8 gpus' was not read (one GPU); '2 x 8 A100' was one node of 8."""
    draft = draft_envelope(description)
    assert _shape(draft) == shape
    n, m = shape[2], shape[0]
    assert f"{m} GPUs per node (stated {phrase!r}) on {n} nodes" in draft.rationale
    assert f"{n * m} in all" in draft.rationale


def test_a_node_count_in_a_cpu_job_is_drafted() -> None:
    """'preprocess on 2 nodes' listed nodes=2 among its signals but drafted one node."""
    draft = draft_envelope("preprocess the shards with pandas on 2 nodes")
    assert draft.workload is Workload.CPU_PREPROCESSING
    assert _shape(draft) == (0, 0, 2, 2)
    assert "2 nodes (stated '2 nodes')" in draft.rationale
