"""The benchmark figures, drawn with matplotlib (the optional `bench` extra:
`pip install -e '.[bench]'`): the matched-rounds experiment's completion per policy per round,
and the Figure-1 scatter of pending jobs vs free GPUs per site (medians as large markers).
Writes SVG (vector, for the docs) and PNG."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["matched_rounds_figure"]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt

        # SVG text stays text (searchable, selectable, smaller), not glyphs drawn as paths;
        # no hash salt, so a redraw of the same CSV gives the same file.
        plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "fedhpc"})
    except ImportError as exc:  # the bench extra is optional
        raise SystemExit(
            "the benchmark figures need matplotlib: pip install -e '.[bench]'"
        ) from exc
    return plt


def matched_rounds_figure(
    rounds: Sequence[Any], policies: Iterable[str], *, title: str, out_stem: Path
) -> list[Path]:
    """Left: completion of each policy's pick per round (black tick: the fastest finished job).
    Rounds are separate experiments: points, never joined by lines. A job censored at the round
    timeout (still pending or running) is drawn hollow with an up arrow: its completion is
    only a lower bound. Right: the queue shape per site at each round's snapshot (pending jobs
    vs free GPUs), when the rounds carry their snapshots' queues (an older CSV does not)."""
    plt = _pyplot()
    sites = sorted({s for r in rounds for s in r.queues})
    if sites:
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    else:  # a CSV from before the queue snapshots were recorded: the completions only
        fig, left = plt.subplots(1, 1, figsize=(7, 4.8), constrained_layout=True)
    fig.suptitle(title, fontsize=10)
    any_censored = False
    for i, name in enumerate(policies):
        col = COLORS[i % len(COLORS)]
        done: tuple[list[float], list[float]] = ([], [])
        cut: tuple[list[float], list[float]] = ([], [])
        for ri, r in enumerate(rounds, start=1):
            job = r.jobs.get(r.picks.get(name, ""))
            if job is not None and job.completion is not None:
                xy = cut if job.censored else done
                xy[0].append(ri + (i - 2) * 0.06)
                xy[1].append(job.completion)
        left.plot(*done, ls="none", marker="o", ms=5, color=col, label=name, gid=f"done-{name}")
        if cut[0]:
            any_censored = True
            left.plot(*cut, ls="none", marker="^", ms=7, mfc="none", mec=col, gid=f"cut-{name}")
    if any_censored:  # one legend entry for every policy's censored points
        left.plot(
            [],
            [],
            ls="none",
            marker="^",
            ms=7,
            mfc="none",
            mec="gray",
            label="censored at the round timeout (completion at least this)",
        )
    best = []
    for ri, r in enumerate(rounds, start=1):
        got = [j.completion for j in r.jobs.values() if j.completion is not None and not j.censored]
        if got:
            best.append((ri, min(got)))
    if best:
        left.scatter(
            *zip(*best, strict=True),
            marker="_",
            s=220,
            color="black",
            lw=2,
            label="fastest finished job",
            zorder=5,
        )
    left.set(
        title="completion of each policy's pick per round", xlabel="round", ylabel="completion (s)"
    )
    left.set_ylim(bottom=0)
    left.set_xticks(range(1, len(rounds) + 1))
    left.grid(alpha=0.3)
    # Below the axes: inside, it hid the censored points at the top.
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)

    if sites:
        _queue_scatter(right, rounds, sites)
    paths = [out_stem.with_suffix(".svg"), out_stem.with_suffix(".png")]
    for p in paths:
        fig.savefig(p, dpi=110, metadata={"Date": None} if p.suffix == ".svg" else None)
    plt.close(fig)
    return paths


def _queue_scatter(right: Any, rounds: Sequence[Any], sites: list[str]) -> None:
    """Pending jobs vs free GPUs per site at each round's snapshot (large marker: the median)."""
    rng = random.Random(0)  # jitter for overlapping points only  # noqa: S311
    for si, site in enumerate(sites):
        pts = [r.queues[site] for r in rounds if site in r.queues]  # (pending, free GPUs)
        col = COLORS[si % len(COLORS)]
        right.scatter(
            [f + rng.uniform(-0.08, 0.08) for _, f in pts],
            [p + rng.uniform(-0.08, 0.08) for p, _ in pts],
            s=22,
            alpha=0.55,
            color=col,
            label=site,
        )
        if pts:
            right.scatter(
                [statistics.median(f for _, f in pts)],
                [statistics.median(p for p, _ in pts)],
                s=140,
                marker="D",
                color=col,
                edgecolor="black",
                zorder=5,
            )
    right.set(
        title="pending jobs vs free GPUs per site (large: median; Figure 1)",
        xlabel="free GPUs",
        ylabel="pending jobs",
    )
    right.set_xlim(left=-0.5)
    right.set_ylim(bottom=-0.5)
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
