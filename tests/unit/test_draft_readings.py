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


@pytest.mark.parametrize(
    ("description", "zero", "gpus"),
    [
        ("Preprocess the data CPU only, then train ResNet with DDP on 8 GPUs", "CPU only", 8),
        ("The tokenizer step is cpu-only; fine-tune llama with 4 A100s", "cpu-only", 4),
        ("no GPU required for the eval, training on 4 GPUs", "no GPU", 4),
        ("Compare CPU only vs 8 GPUs", "CPU only", 8),
        ("0 gpus for the eval, 8 gpus for training", "0 gpus", 8),
        ("fewer than 1 gpu for the eval, train on 4 gpus", "fewer than 1 gpu", 4),
    ],
)
def test_a_stated_zero_beside_a_gpu_count_drafts_the_count_and_says_part_is_cpu_only(
    description: str, zero: str, gpus: int
) -> None:
    """A zero anywhere before a count drafted the whole task CPU-only (0 GPUs)."""
    draft = draft_envelope(description)
    assert draft.workload is Workload.MULTI_GPU_DDP
    assert _shape(draft) == (gpus, gpus, 1, 1)
    assert f"gpus={gpus}" in draft.signals and "read as none" not in draft.rationale
    assert (
        f"part of the work is stated CPU-only ({zero!r}): drafted for the GPU part; if that "
        "part is a separate step, two tasks (CPU-only, then GPUs) may suit"
    ) in draft.rationale


@pytest.mark.parametrize(
    ("description", "phrase"),
    [
        ("train on fewer than 1 gpu", "fewer than 1 gpu"),
        ("score it on less than one GPU", "less than one GPU"),
    ],
)
def test_fewer_than_one_gpu_is_a_stated_zero(description: str, phrase: str) -> None:
    """'fewer than 1 gpu' was drafted as one GPU."""
    draft = draft_envelope(description)
    assert draft.workload is Workload.CPU_PREPROCESSING
    assert _shape(draft)[:2] == (0, 0)
    assert f"no GPUs (stated {phrase!r}: read as none)" in draft.rationale


def test_a_type_not_wanted_does_not_hide_the_count_after_it() -> None:
    """'0 a100s' stopped the reading: '4 v100s' after it was not read (a CPU draft)."""
    assert _shape(draft_envelope("0 a100s, use 4 v100s"))[:2] == (4, 4)


@pytest.mark.parametrize(
    ("description", "written", "nodes", "phrase"),
    [
        ("train with DDP, batch size 64 x 8 GPUs", "64 x 8 GPUs", 64, "8 GPUs"),
        ("Global batch 256 = 32 x 8 gpus", "32 x 8 gpus", 32, "8 gpus"),
        ("per-device batch 4 x 8 A100s", "4 x 8 A100s", 4, "8 A100s"),
        ("train with bs=64x8 gpus", "64x8 gpus", 64, "8 gpus"),
    ],
)
def test_n_times_m_after_a_batch_word_is_batch_arithmetic_not_nodes(
    description: str, written: str, nodes: int, phrase: str
) -> None:
    """'batch size 64 x 8 GPUs' drafted 64 nodes of 8 (512 GPUs)."""
    draft = draft_envelope(description)
    assert _shape(draft) == (8, 8, 1, 1)
    assert not any(s.startswith("nodes") for s in draft.signals)
    assert (
        f"{written!r} is batch arithmetic, not {nodes} nodes: the count read is {phrase!r}"
    ) in draft.rationale


def test_n_times_m_reads_n_as_nodes_only_up_to_64() -> None:
    """'256 x 8 gpus' drafted 256 nodes (2,048 GPUs); 64 x 8 is still 64 nodes of 8."""
    draft = draft_envelope("train on 256 x 8 gpus")
    assert _shape(draft) == (8, 8, 1, 1)
    assert (
        "'256 x 8 gpus' is not read as 256 nodes (more than 64; if you mean them, state the "
        "node count): the count read is '8 gpus'"
    ) in draft.rationale
    assert _shape(draft_envelope("train on 64 x 8 gpus")) == (8, 8, 64, 64)


@pytest.mark.parametrize(
    ("flag", "why", "fix"),
    [
        ("--nnodes=4:1", "a MIN above MAX", "--nnodes=1:4"),
        ("--nnodes 0:4", "a MIN below 1", "--nnodes=1:4"),
    ],
)
def test_an_nnodes_range_torchrun_refuses_is_quoted_as_written_and_not_read(
    flag: str, why: str, fix: str
) -> None:
    """'--nnodes=4:1' was swapped silently and quoted back as '--nnodes=1:4' (1-4 nodes);
    torchrun's rendezvous refuses MIN > MAX and MIN < 1."""
    draft = draft_envelope("train the model", [f"torchrun {flag} --nproc_per_node=8 t.py"])
    assert _shape(draft) == (1, 8, 1, 1)
    assert not any(s.startswith("nnodes") for s in draft.signals)
    assert "elastic" not in draft.rationale
    assert (
        f"{flag!r} is not a valid range (torchrun refuses {why}): nodes not read from it; "
        f"if you mean {fix}, write that"
    ) in draft.rationale


@pytest.mark.parametrize(
    ("flag", "why", "fix"),
    [
        ("--nnodes=4:0", "not a valid range (torchrun refuses a MAX of 0)", "--nnodes=4"),
        ("--nnodes=0", "not a valid node count (torchrun needs at least 1)", "--nnodes=1"),
        ("--nnodes=-1:4", "not a valid range (torchrun refuses a negative count)", None),
        (
            "--nnodes=:4",
            "not a valid range (torchrun refuses a range without a MIN)",
            "--nnodes=1:4",
        ),
        ("--nnodes=4:", "not a valid range (torchrun refuses a range without a MAX)", "--nnodes=4"),
        ("--nnodes=four", "not a valid node count (torchrun takes N or MIN:MAX)", None),
    ],
)
def test_an_nnodes_value_torchrun_cannot_parse_is_named_not_drafted_as_a_count(
    flag: str, why: str, fix: str | None
) -> None:
    """'4:0', '0', '-1:4' and ':4' were ignored without a word and '4:' was read as 4 nodes:
    a launch line that cannot start was drafted as one that runs."""
    draft = draft_envelope("train the model", [f"torchrun {flag} --nproc_per_node=8 t.py"])
    assert _shape(draft) == (1, 8, 1, 1)
    assert not any(s.startswith("nnodes") for s in draft.signals)
    mean = f"; if you mean {fix}, write that" if fix else ""
    assert f"{flag!r} is {why}: nodes not read from it{mean}" in draft.rationale
    assert "elastic" not in draft.rationale


def test_an_nnodes_set_at_run_time_is_said_not_read_and_prose_is_no_flag() -> None:
    draft = draft_envelope("train the model", ["torchrun --nnodes=$SLURM_NNODES t.py"])
    assert "'--nnodes=$SLURM_NNODES' is set when the job runs: nodes not read" in draft.rationale
    prose = draft_envelope("train the model; --nnodes to scale out, --nnodes=2, later", [])
    assert "2 nodes (--nnodes=2)" in prose.rationale, prose.rationale


@pytest.mark.parametrize(
    ("description", "zero", "workload", "gpus"),
    [
        (
            "Fine-tune the model on a GPU; tokenization is CPU only",
            "CPU only",
            Workload.SINGLE_GPU_INFERENCE,
            (1, 1),
        ),
        (
            "Run inference on an A100, preprocessing cpu-only",
            "cpu-only",
            Workload.SINGLE_GPU_INFERENCE,
            (1, 1),
        ),
        (
            "train with DDP on the GPU nodes, no GPU needed for eval",
            "no GPU",
            Workload.MULTI_GPU_DDP,
            (1, 4),
        ),
    ],
)
def test_a_stated_zero_beside_gpus_named_without_a_count_is_a_part_of_the_work(
    description: str, zero: str, workload: Workload, gpus: tuple[int, int]
) -> None:
    """Each was drafted CPU-only (0 GPUs): a zero won over every GPU the text names unless a
    count stood beside it."""
    draft = draft_envelope(description)
    assert draft.workload is workload
    assert _shape(draft)[:2] == gpus
    assert "read as none" not in draft.rationale
    assert f"part of the work is stated CPU-only ({zero!r}) while the text names GPUs" in (
        draft.rationale
    )


@pytest.mark.parametrize(
    "description",
    [
        "run on cpu only, no gpus",
        "GPU not needed, cpu only",
        "cpu only, no need for a GPU",
        "cpu only; cuda not installed",
        "evaluate on 0 a100s, CPU-only",
    ],
)
def test_a_zero_whose_text_names_gpus_only_to_rule_them_out_stays_cpu_only(
    description: str,
) -> None:
    draft = draft_envelope(description)
    assert draft.workload is Workload.CPU_PREPROCESSING
    assert _shape(draft)[:2] == (0, 0)
    assert "read as none" in draft.rationale
