"""A user's per-site `prologue` and probe floor in config.toml: the prologue replaces the
profile's in every rendered script; the floor only ever raises the profile's."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fedhpc.adapters.dialects import get_dialect
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.job import JobSpec, Shape
from fedhpc.domain.jobscript import parse_script, script_command
from tests.unit.test_placement_world import cpu_partition, profile

SCRIPT = "#!/bin/bash\n#SBATCH -N 1\n#SBATCH -t 10\nmodule list\n"


def test_the_users_prologue_replaces_the_profiles_before_the_scripts_body() -> None:
    base = profile("center", cpu_partition("p"), min_refresh_s=60)
    base = base.model_copy(
        update={"conventions": base.conventions.model_copy(update={"prologue": ("module purge",)})}
    )
    mine = ("module load gcc/13.2", "module load openmpi/5.0")
    site = Site(base, UserSiteConfig(prologue=mine))
    assert site.profile.conventions.prologue == mine
    spec = JobSpec(
        name="fedhpc-t1-1",
        command=script_command(parse_script(SCRIPT)),
        partition="p",
        shape=Shape(cpus=1),
    )
    lines = get_dialect("slurm").render_script(spec, site.profile).splitlines()
    assert "module purge" not in lines
    body = next(i for i, line in enumerate(lines) if line.startswith("/bin/bash -c"))
    assert lines.index(mine[0]) < lines.index(mine[1]) < body
    assert Site(base, UserSiteConfig()).profile.conventions.prologue == ("module purge",)


def test_the_users_probe_floor_only_raises_the_profiles() -> None:
    base = profile("center", cpu_partition("p"), min_refresh_s=60)
    assert Site(base, UserSiteConfig(min_refresh_s=180)).profile.min_refresh_s == 180
    assert Site(base, UserSiteConfig(min_refresh_s=5)).profile.min_refresh_s == 60


@pytest.mark.parametrize("line", ["echo a\nrm -rf ~", "x\x00y", "x" * 1001])
def test_a_prologue_line_is_one_line(line: str) -> None:
    with pytest.raises(ValidationError):
        UserSiteConfig(prologue=(line,))
