"""The heuristic drafter behind `draft_envelope`: limits on its input, and a deterministic guess
of a workload's bounds from signals in a task description and code snippets.

The tool's answer (`EnvelopeDraft`) and the function that assembles it live in `fedhpc.ops.draft`;
here is only the pure guessing. Nothing here bypasses validation or the placement rules: a
draft is a hypothesis, kept beside the normalized envelope."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fedhpc.domain.units import MAX_GROUP_CHILDREN
from fedhpc.errors import FieldIssue, ValidationFailed
from fedhpc.placement.nnodes import read_nnodes
from fedhpc.placement.shape import ddp_shape, node_range, nodes_flag
from fedhpc.placement.stated import Stated, gpus_named_besides_zeros, stated_gpus, stated_nodes
from fedhpc.placement.textscan import Signals, lower_ascii, number_before

__all__ = [
    "MAX_CODE_CONTEXT_CHARS",
    "MAX_CODE_CONTEXT_ITEMS",
    "MAX_DESCRIPTION_CHARS",
    "HeuristicDraft",
    "Workload",
    "check_inputs",
    "heuristic_draft",
]

GIB = 1024

# Input limits, checked before any pattern runs (docs/errors.md). Every pattern below is linear
# in its input, so these bound the drafter's time (benchmarks/hostile.py measures it).
MAX_DESCRIPTION_CHARS = 8000
MAX_CODE_CONTEXT_ITEMS = 32
MAX_CODE_CONTEXT_CHARS = 32_000  # all snippets together (about 800 lines)
# A number longer than this is not a resource count anyone meant; it reads as "huge" and fails
# validation by range, so the draft comes back valid=False instead of raising.
_MAX_DIGITS = 15
_HUGE = 10**_MAX_DIGITS


class Workload(StrEnum):
    """The workload classes the heuristic drafter knows."""

    CPU_PREPROCESSING = "cpu-preprocessing"
    SINGLE_GPU_INFERENCE = "single-gpu-inference"
    MULTI_GPU_DDP = "multi-gpu-ddp"
    PARAMETER_SWEEP = "parameter-sweep"


@dataclass(frozen=True, slots=True)
class HeuristicDraft:
    """The heuristic's guess: the workload class, the bounds as an envelope's JSON, the signals
    found, the reasons for each bound, and (for sweeps) how many children the text suggests."""

    workload: Workload
    proposed: dict[str, Any]
    signals: tuple[str, ...]
    reasons: tuple[str, ...]
    fanout: int | None

    @property
    def confidence(self) -> float:
        """0.3 with no signal, else 0.5 plus 0.1 per signal, at most 0.9."""
        strength = sum(1 for s in self.signals if "=" in s or ":" in s)
        return min(0.9, 0.5 + 0.1 * strength) if strength else 0.3

    @property
    def rationale(self) -> str:
        return f"{self.workload.value}: " + "; ".join(self.reasons)


# Signals, matched on the ASCII-lower-cased text (see textscan: why no pattern is
# case-insensitive or starts with an assertion). `worded` alternatives must start a word.
_SIGNALS = Signals(
    {
        "ddp": (
            r"torch\.distributed|distributeddataparallel|init_process_group|torchrun|"
            r"--nproc[_-]per[_-]node|deepspeed|accelerate launch|multi-?gpu|"
            r"distributed (?:data[- ]parallel )?training",
            r"ddp\b|fsdp\b",
        ),
        "gpu": (r"\.cuda\(\)|torch\.device|\.to\(['\"]cuda", r"cuda\b|gpus?\b"),
        "inference": (
            r"\.generate\(|model\.eval\(\)|no_grad|inference_mode|vllm",
            r"inferen|predict|serv",
        ),
        "sweep": (
            r"grid search|hyper-?parameter|itertools\.product|optuna|ray\.tune|--array|"
            r"for (?:seed|lr|alpha|beta|config)\b",
            r"sweep",
        ),
        "cpu": (
            r"preprocess|tokeni[sz]|pandas|parquet|multiprocessing|joblib|n_jobs|"
            r"feature extraction",
            r"csv\b|resiz|convert|etl\b|dask\b|cpu\b",
        ),
    }
)
# After a literal prefix (on the lower-cased text for the first two): linear as they stand.
_NPROC = re.compile(r"--nproc[_-]per[_-]node[= ](\d+)")
_WORKERS = re.compile(r"num_workers\s*=\s*(\d+)")
_POOL = re.compile(
    r"(?:Pool|ProcessPoolExecutor)\(\s*(?:processes\s*=\s*|max_workers\s*=\s*)?(\d+)|n_jobs\s*=\s*(\d+)"
)
# A number's last digit and its unit; `number_before` reads the number backwards.
_DURATION = re.compile(r"\d\s*(hours?|hrs?|h|minutes?|mins?)\b")
_COUNT = re.compile(r"\d\s*(?:configs?|configurations|runs|trials|settings|combinations|seeds)\b")
_PARAMS = re.compile(r"\d\s*B\b(?:[- ]param\w*|[- ]model)?")  # case matters: 7B, not 7b


def _number(digits: str) -> float:
    """A matched number, capped: an absurdly long one reads as huge (and fails validation),
    never as an OverflowError or Python's int-string limit."""
    whole, _, frac = digits.partition(".")
    if len(whole.lstrip("0")) > _MAX_DIGITS:
        return float(_HUGE)
    return float(f"{whole}.{frac[:_MAX_DIGITS]}" if frac else whole)


def _first_int(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    if m is None:
        return None
    return round(_number(next(g for g in m.groups() if g is not None)))


def _wall(description: str, default: tuple[int, int]) -> tuple[dict[str, int], str]:
    low = lower_ascii(description)
    found = number_before(low, _DURATION)
    if found is None:
        return {"min": default[0], "max": default[1]}, "default wall time for the class"
    number, start, end = found
    scale = 3600 if low[start + len(number) :].lstrip().startswith("h") else 60
    seconds = max(60, round(_number(number) * scale))
    stated = _shown(description[start:end])
    return {"min": seconds, "max": 2 * seconds}, f"stated duration {stated!r}, doubled for max"


def _shown(text: str) -> str:
    """A matched piece of the text for the rationale, shortened when it is a long number."""
    return text if len(text) <= 40 else f"{text[:20]}...{text[-12:]}"


def _classify(hits: set[str], nproc: int | None, stated: Stated | None) -> Workload:
    if stated is not None and stated.none:  # "no gpus", "cpu only": whatever else it says
        return Workload.PARAMETER_SWEEP if "sweep" in hits else Workload.CPU_PREPROCESSING
    if "ddp" in hits or (nproc is not None and nproc > 1):
        return Workload.MULTI_GPU_DDP
    if "sweep" in hits:
        return Workload.PARAMETER_SWEEP
    if stated is not None and (stated.hi is None or stated.hi > 1 or stated.per_node):
        # "train on 8 gpus", "up to 8", "at least 2", "1 gpu per node": more than one GPU
        return Workload.MULTI_GPU_DDP
    if "gpu" in hits or "inference" in hits or stated is not None:
        return Workload.SINGLE_GPU_INFERENCE
    return Workload.CPU_PREPROCESSING


def _nodes_reason(lo: int, hi: int, text: Stated | None, nnodes: tuple[int, int] | None) -> str:
    said = [f"stated {text.phrase!r}"] if text is not None else []
    said += [f"--nnodes={nodes_flag(nnodes)}"] if nnodes is not None else []
    count = str(lo) if lo == hi else f"{lo}-{hi}"
    return f"{count} node{'s' if hi > 1 else ''} ({', '.join(said)})"


def _ddp(
    stated: Stated | None,
    nodes: Stated | None,
    nproc: int | None,
    nnodes: tuple[int, int] | None,
    workers: int | None,
) -> tuple[dict[str, Any], list[str]]:
    """The multi-GPU DDP draft and its reasons: a stated count as stated (`shape.ddp_shape`,
    with the node count and the launch flags), else 1..nproc."""
    why: list[str] = []
    per_gpu = (workers or 7) + 1
    if stated is not None:
        shape = ddp_shape(stated, nodes, nproc, nnodes, default_max=4)
        (gmin, gmax), (nlo, nhi) = shape.gpus, shape.nodes
        why.extend(shape.reasons)
    else:
        gmin, gmax = 1, max(nproc or 4, 1)
        why.append(
            f"GPUs 1-{gmax} ({'nproc_per_node' if nproc else 'DDP default'}); a smaller "
            "shape often completes sooner under a queue"
        )
        nlo, nhi = node_range(nodes, nnodes, why) or (1, 1)
        if nodes is not None or nnodes is not None:
            why.append(_nodes_reason(nlo, nhi, nodes, nnodes))
    if nnodes is not None and nnodes[0] < nnodes[1]:
        why.append(
            f"--nnodes={nodes_flag(nnodes)} is elastic: it runs on {nnodes[0]} node"
            f"{'s' if nnodes[0] > 1 else ''} and grows up to {nnodes[1]}"
        )
    why.append(f"{per_gpu} CPUs per GPU ({'num_workers + 1' if workers else 'default'})")
    draft: dict[str, Any] = {
        "gpus": {"min": gmin, "max": gmax},
        "cpus": {"min": per_gpu, "max": per_gpu * gmax},
        "memory": {"min": 32 * GIB, "max": 128 * GIB},
        "nodes": {"min": nlo, "max": nhi},
    }
    return draft, why


def _sweep(description: str, uses_gpu: bool, why: list[str]) -> tuple[dict[str, Any], int | None]:
    count = number_before(lower_ascii(description), _COUNT)
    fanout = round(_number(count[0])) if count else None
    if fanout is not None and fanout > MAX_GROUP_CHILDREN:
        why.append(
            f"the text asks for {fanout} runs; one group holds at most {MAX_GROUP_CHILDREN}"
            " children, so submit the sweep in several groups"
        )
        fanout = MAX_GROUP_CHILDREN
    draft: dict[str, Any] = (
        {"gpus": {"min": 1, "max": 1}, "cpus": {"min": 2, "max": 8}}
        if uses_gpu
        else {
            "gpus": {"min": 0, "max": 0},
            "cpus": {"min": 1, "max": 4},
            "memory": {"min": 2 * GIB, "max": 8 * GIB},
        }
    )
    why.append(
        f"one {'GPU' if uses_gpu else 'small CPU'} envelope per sweep child"
        + (f"; {fanout} children suggested" if fanout else "")
    )
    return draft, fanout


def _inference(
    text: str, stated: Stated | None, workers: int | None, why: list[str]
) -> dict[str, Any]:
    cmax = (workers or 7) + 1
    draft: dict[str, Any] = {
        "gpus": {"min": 1, "max": 1},
        "cpus": {"min": 2, "max": max(cmax, 2)},
        "memory": {"min": 16 * GIB, "max": 64 * GIB},
    }
    params = number_before(text, _PARAMS)
    if params:
        need = math.ceil(_number(params[0]) * 2 * 1.2)
        draft["min_accelerator_memory_gib"] = need
        said = _shown(text[params[1] : params[2]])
        why.append(f"{said!r}: fp16 weights + 20% need >= {need} GiB per GPU")
    why.append(
        f"one GPU (stated {stated.phrase!r})"
        if stated is not None
        else "one GPU: inference rarely scales across GPUs without model parallelism"
    )
    return draft


def _cpu(
    pool: int | None,
    workers: int | None,
    nodes: Stated | None,
    nnodes: tuple[int, int] | None,
    why: list[str],
) -> dict[str, Any]:
    cmax = max(pool or workers or 64, 4)
    draft: dict[str, Any] = {
        "gpus": {"min": 0, "max": 0},
        "cpus": {"min": 4, "max": cmax},
        "memory": {"min": 8 * GIB, "max": max(2 * GIB * cmax, 8 * GIB)},
    }
    why.append(
        f"CPUs 4-{cmax} ({'pool size' if pool else 'num_workers' if workers else 'default'})"
        "; 2 GiB per CPU at most"
    )
    if (span := node_range(nodes, nnodes, why)) is not None:
        draft["nodes"] = {"min": span[0], "max": span[1]}  # "on 2 nodes", --nnodes
        why.append(_nodes_reason(*span, nodes, nnodes))
    return draft


def heuristic_draft(description: str, code_context: Sequence[str] = ()) -> HeuristicDraft:
    """Bounds guessed from the description and snippets (the caller checks `check_inputs`)."""
    text = "\n".join([description, *code_context])
    low = lower_ascii(text)
    spans = _SIGNALS.search(low)
    hits = set(spans)
    signals = sorted(f"{n}: {text[a:b]!r}" for n, (a, b) in spans.items())
    nproc, (nnodes, refused) = _first_int(_NPROC, low), read_nnodes(low, text)
    workers, pool = _first_int(_WORKERS, text), _first_int(_POOL, text)
    for label, value in (
        ("nproc_per_node", nproc),
        ("nnodes", nodes_flag(nnodes) if nnodes else None),
        ("num_workers", workers),
        ("pool", pool),
    ):
        if value is not None:
            signals.append(f"{label}={value}")
    stated, nodes = stated_gpus(description), stated_nodes(description)
    if (
        stated is not None
        and stated.none
        and gpus_named_besides_zeros(lower_ascii(description), stated.phrase)
    ):
        # "fine-tune on a GPU; tokenization is CPU only": the zero is a part of the work, not
        # the task (a stated count beside a zero is handled as that in stated_gpus).
        remark = (
            f"part of the work is stated CPU-only ({stated.phrase!r}) while the text names "
            "GPUs: drafted for the GPU part; if that part is a separate step, two tasks "
            "(CPU-only, then GPUs) may suit"
        )
        stated, hits = None, hits | {"gpu"}
        remarks: tuple[str, ...] = (remark,)
    else:
        remarks = ()
    if nodes is None and stated is not None and stated.nodes is not None:
        nodes = Stated(stated.nodes, stated.nodes, False, stated.phrase)  # "4x8 gpus"
    if stated is not None:
        signals.append(f"gpus{stated.signal}")
    if nodes is not None:
        signals.append(f"nodes{nodes.signal}")
    kind = _classify(hits, nproc, stated)
    why: list[str] = []
    fanout: int | None = None
    none = stated is not None and stated.none
    if stated is not None and none:
        why.append(f"no GPUs (stated {stated.phrase!r}: read as none)")
    if kind is Workload.MULTI_GPU_DDP:
        draft, reasons = _ddp(stated, nodes, nproc, nnodes, workers)
        why.extend(reasons)
        wall = _wall(description, (2 * 3600, 4 * 3600))
    elif kind is Workload.PARAMETER_SWEEP:
        draft, fanout = _sweep(description, "gpu" in hits and not none, why)
        wall = _wall(description, (1800, 3600))
    elif kind is Workload.SINGLE_GPU_INFERENCE:
        draft = _inference(text, stated, workers, why)
        wall = _wall(description, (1800, 3600))
    else:
        draft = _cpu(pool, workers, nodes, nnodes, why)
        wall = _wall(description, (3600, 2 * 3600))
    why.extend(stated.remarks if stated is not None else remarks)
    why.extend([refused] if refused else [])
    draft["wall_time"] = wall[0]
    why.append(wall[1])
    return HeuristicDraft(kind, draft, tuple(signals), tuple(why), fanout)


def check_inputs(description: str, code_context: Sequence[str]) -> None:
    """`ValidationFailed` naming the field when the text is over the drafter's limits."""
    issues: list[FieldIssue] = []
    if len(description) > MAX_DESCRIPTION_CHARS:
        issues.append(
            FieldIssue(
                "description", f"{len(description)} characters; at most {MAX_DESCRIPTION_CHARS}"
            )
        )
    if len(code_context) > MAX_CODE_CONTEXT_ITEMS:
        issues.append(
            FieldIssue(
                "code_context", f"{len(code_context)} snippets; at most {MAX_CODE_CONTEXT_ITEMS}"
            )
        )
    total = sum(len(s) for s in code_context)
    if total > MAX_CODE_CONTEXT_CHARS:
        issues.append(
            FieldIssue(
                "code_context",
                f"{total} characters in all; at most {MAX_CODE_CONTEXT_CHARS} "
                "(send the relevant lines, not whole files)",
            )
        )
    if issues:
        raise ValidationFailed(issues)
