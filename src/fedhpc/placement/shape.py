"""The DDP shape a stated GPU count makes with the stated node count and the launch flags
(`--nproc_per_node`, `--nnodes`, which may be an elastic `MIN:MAX`): pure, for the drafter."""

from __future__ import annotations

from dataclasses import dataclass

from fedhpc.placement.stated import Stated

__all__ = ["NODE_GPUS", "Shape", "ddp_shape", "node_range", "nodes_flag"]

# GPUs per node assumed when a stated count is more than a node holds (8: DGX/HGX nodes).
NODE_GPUS = 8


@dataclass(frozen=True, slots=True)
class Shape:
    """GPUs per node and nodes as (min, max) and the reasons, as the rationale names them."""

    gpus: tuple[int, int]
    nodes: tuple[int, int]
    reasons: tuple[str, ...]


def _ceil(a: int, b: int) -> int:
    return -(-a // max(b, 1))


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def nodes_flag(nnodes: tuple[int, int]) -> str:
    """`--nnodes` as written: "2", or an elastic "1:4"."""
    return str(nnodes[0]) if nnodes[0] == nnodes[1] else f"{nnodes[0]}:{nnodes[1]}"


def node_range(
    text: Stated | None, nnodes: tuple[int, int] | None, why: list[str]
) -> tuple[int, int] | None:
    """Nodes from the text and from `--nnodes` (min, max: elastic when they differ): where
    they overlap, the overlap; when they disagree, the wider range, said."""
    if text is None:
        return nnodes
    lo, hi = text.lo, text.upper(nnodes[1] if nnodes else text.lo)
    if nnodes is None:
        return lo, hi
    both = max(lo, nnodes[0]), min(hi, nnodes[1])
    if both[0] <= both[1]:
        return both
    wide = min(lo, nnodes[0]), max(hi, nnodes[1])
    why.append(
        f"the text says {text.phrase!r}, the code --nnodes={nodes_flag(nnodes)}: they "
        f"disagree, so nodes {_span(*wide)} (the wider); replan with the one you mean"
    )
    return wide


def ddp_shape(
    gpus: Stated,
    nodes_text: Stated | None,
    nproc: int | None,
    nnodes: tuple[int, int] | None,
    default_max: int,
) -> Shape:
    """GPUs per node and nodes for a stated GPU count. The count is per node when "per node"/
    "each" follows it, or when a node count is known and it fits a node (8 gpus on 4 nodes: 8
    per node); else it is the total, over ceil(N / 8) nodes or the known node count. A
    `--nproc_per_node` the text contradicts widens the GPU range to hold both, said."""
    why: list[str] = []
    nproc = nproc or None  # --nproc_per_node=0 says nothing
    nodes = node_range(nodes_text, nnodes, why)
    lo, hi = gpus.lo, gpus.upper(max(nproc or default_max, 1))
    flag = f"--nnodes={nodes_flag(nnodes)}" if nnodes is not None else ""
    nsrc = (flag if nodes_text is None else f"stated {nodes_text.phrase!r}") + (
        f", {flag}" if nodes_text is not None and flag else ""
    )
    total_fits = nodes is not None and nproc is not None and lo <= nproc * nodes[0] <= hi
    if gpus.per_node or (nodes is not None and hi <= NODE_GPUS and not total_fits):
        nlo, nhi = nodes or (1, 1)
        glo, ghi = lo, hi
        reason = (
            f"{_span(glo, ghi)} GPU{'s' if ghi > 1 else ''} per node (stated {gpus.phrase!r}) on "
            + (
                f"{_span(nlo, nhi)} node{'s' if nhi > 1 else ''} ({nsrc}): "
                f"{_span(glo * nlo, ghi * nhi)} in all"
                if nodes is not None
                else "1 node (no node count stated)"
            )
        )
    elif nodes is not None:
        nlo, nhi = nodes
        ghi = _ceil(hi, nlo)
        glo = min(_ceil(lo, nhi), ghi)
        reason = f"{_span(lo, hi)} GPUs in all (stated {gpus.phrase!r}) over {_span(nlo, nhi)} "
        reason += f"nodes ({nsrc}): {_span(glo, ghi)} per node"
    else:
        nlo, nhi = _ceil(lo, NODE_GPUS), _ceil(hi, NODE_GPUS)
        # Not fewer than stated: 16-20 over 2-3 nodes is 8 per node (16-24), not 7 (14-21).
        ghi = max(_ceil(hi, nhi), _ceil(lo, nlo))
        glo = min(_ceil(lo, nlo), ghi)
        reason = f"{_span(lo, hi)} GPUs (stated {gpus.phrase!r})"
        if nhi > 1:
            reason += f": {_span(nlo, nhi)} nodes of {_span(glo, ghi)}"
    why.insert(0, reason)
    if gpus.bound == "min":
        why.insert(1, f"{gpus.phrase!r} is a minimum: the job may want more (raise gpus.max)")
    elif gpus.bound == "max":
        why.insert(1, f"{gpus.phrase!r} is a maximum: the draft allows fewer")
    if nproc is not None:
        if glo <= nproc <= ghi:
            why.append(f"--nproc_per_node={nproc} agrees")
        else:
            wide = min(glo, nproc), max(ghi, nproc)
            why.append(
                f"the text says {gpus.phrase!r} ({_span(glo, ghi)} per node), the code "
                f"--nproc_per_node={nproc}: they disagree, so GPUs {_span(*wide)} per node "
                "(the wider)"
                + (
                    f"; if it is {hi // nproc} nodes of {nproc}, say so (--nnodes)"
                    if nodes is None and nproc < hi and hi % nproc == 0
                    else ""
                )
            )
            glo, ghi = wide
    return Shape((glo, ghi), (nlo, nhi), tuple(why))
