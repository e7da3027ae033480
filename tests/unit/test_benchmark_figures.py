"""The committed matched-rounds figures (benchmarks/results/*.svg, drawn from their CSVs by
benchmarks/plots.py) tell the truth: text is text, separate rounds are points never joined by a
line, and a job censored at the round timeout is drawn apart (a lower bound), as its CSV says."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SVG = "{http://www.w3.org/2000/svg}"
FIGURES = sorted(p.stem for p in RESULTS.glob("matched_rounds*.csv"))


def _picks(stem: str) -> tuple[Counter[str], Counter[str]]:
    """Per policy, how many of its picks finished and how many were censored (the CSV)."""
    done: Counter[str] = Counter()
    cut: Counter[str] = Counter()
    with (RESULTS / f"{stem}.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            if not row["completion_s"]:
                continue
            for name in row["picked_by"].split():
                (cut if row["censored"] == "1" else done)[name] += 1
    return done, cut


def test_there_are_figures_to_check() -> None:
    assert FIGURES == [
        "matched_rounds",
        "matched_rounds-churn",
        "matched_rounds-quick",
        "matched_rounds-trace",
        "matched_rounds-trace-seed2",
    ]


@pytest.mark.parametrize("stem", FIGURES)
def test_each_figure_keeps_its_text_as_text(stem: str) -> None:
    root = ET.parse(RESULTS / f"{stem}.svg").getroot()
    texts = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    # The glyphs were paths: not one <text>, nothing to search or select.
    assert "completion of each policy's pick per round" in texts, texts[:200]
    assert "round" in texts and "completion (s)" in texts


@pytest.mark.parametrize("stem", FIGURES)
def test_rounds_are_points_and_censored_jobs_are_drawn_apart(stem: str) -> None:
    root = ET.parse(RESULTS / f"{stem}.svg").getroot()
    drawn: dict[str, int] = {}
    for g in root.iter(f"{SVG}g"):
        gid = g.get("id", "")
        if gid.startswith(("done-", "cut-")):
            # Markers only: a <path> of its own here would be a line joining the rounds.
            assert not [c for c in g if c.tag == f"{SVG}path"], gid
            if n := len(list(g.iter(f"{SVG}use"))):
                drawn[gid] = n
    done, cut = _picks(stem)
    assert sum(cut.values()) > 0  # every committed run had a censored pick
    want = {f"done-{k}": n for k, n in done.items()} | {f"cut-{k}": n for k, n in cut.items()}
    assert drawn == want
    texts = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    assert "censored at the round timeout" in texts
