"""What the job-array tests share: an array's member (its own folder and output), the profiles
they render against, an array script run as one element, the check that only our directives
start a line, and the attempt of a member whose submission's answer was lost."""

from __future__ import annotations

import os
import subprocess
import tomllib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fedhpc.domain.job import JobSpec, Shape
from fedhpc.domain.site import SiteProfile
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc_dev.profiles import dev_profiles_dir

__all__ = [
    "SWEEP_ENV",
    "array_member",
    "dev_profile",
    "lost_member",
    "lsf_profile",
    "only_our_directives",
    "run_element",
]

SWEEP_ENV: Mapping[str, str] = MappingProxyType({"SWEEP": "x y"})


def array_member(
    i: int,
    base: Path,
    arg: str,
    *,
    partition: str,
    account: str | None = None,
    env: Mapping[str, str] = SWEEP_ENV,
) -> JobSpec:
    """Member `i`: prints `arg` into `<base>/t<i>/1.out`, in that folder."""
    folder = base / f"t{i}"
    return JobSpec(
        name=f"fedhpc-tabc-{i:04d}-1",
        command=("printf", "%s", arg),
        partition=partition,
        account=account,
        shape=Shape(cpus=1, wall_time_s=60),
        workdir=str(folder),
        stdout=f"{folder}/1.out",
        stderr=f"{folder}/1.err",
        env=dict(env),
    )


def dev_profile(name: str) -> SiteProfile:
    """A local-test profile as shipped (its `{devfed}` placeholders left as they are)."""
    text = (dev_profiles_dir() / f"{name}.toml").read_text()
    return SiteProfile.model_validate(tomllib.loads(text))


def lsf_profile(**conventions: Any) -> SiteProfile:
    """An LSF site with one CPU queue (no LSF profile ships for the local federation)."""
    return SiteProfile.model_validate(
        {
            "name": "lsfsite",
            "dialect": "lsf",
            "arch": "x86_64",
            "charge": {"kind": "node-hours"},
            "conventions": conventions,
            "partitions": [
                {"name": "cpu", "max_wall_s": "48h", "node": {"cpus": 128, "memory_mib": "244G"}}
            ],
        }
    )


def run_element(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The array script run by bash as the element its scheduler's `env` names."""
    return subprocess.run(
        ["bash"],
        check=False,
        input=script,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )


def only_our_directives(script: str, benign: str) -> None:
    """No member's argument starts a line of `script`: its comment lines are those of the same
    array rendered with harmless arguments, however the text is split into lines."""
    for lines in (script.split("\n"), script.splitlines()):
        assert [ln for ln in lines if ln.startswith("#")] == [
            ln for ln in benign.splitlines() if ln.startswith("#")
        ]


def lost_member(
    n: int, site: str, partition: str, array: str | None, index: int | None
) -> AttemptRecord:
    """Task `tabc-<n>`'s first attempt, member `index` of the array named `array` (or alone)."""
    return AttemptRecord(
        task_id=f"tabc-{n:04d}",
        n=1,
        site=site,
        partition=partition,
        account=None,
        shape=Shape(),
        job_name=f"fedhpc-tabc-{n:04d}-1",
        created_at=datetime(2026, 12, 5, tzinfo=UTC),
        array_name=array,
        array_index=index,
    )
