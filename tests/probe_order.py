"""The order in which a dialect's batched probe script runs its sections: what the dialect tests
check so that a job the queue view shows running is already in the node view."""

from __future__ import annotations

from collections.abc import Mapping

from fedhpc.adapters.command import BATCH_MARK, Command, batch

__all__ = ["run_order"]


def run_order(sections: Mapping[str, Command]) -> list[str]:
    """Section names in the order the batched `bash -s` script runs them (it runs top down)."""
    begin = f"echo '{BATCH_MARK} begin "
    script = batch(sections).stdin or ""
    lines = script.splitlines()
    return [line[len(begin) :].rstrip("'") for line in lines if line.startswith(begin)]
