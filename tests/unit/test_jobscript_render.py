"""A script brought for one scheduler, rendered for another: the target's own header from the
envelope, the site's prologue, and the body run unchanged (checked by running both)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fedhpc.adapters.dialects import get_dialect
from fedhpc.domain.job import JobSpec, Shape
from fedhpc.domain.jobscript import parse_script, script_command, script_envelope
from fedhpc.domain.site import SiteProfile

# A body that a re-quoting slip would change: quotes of both kinds, $((...)), a heredoc, a
# comment line, a trailing backslash continuation and a non-zero status it tolerates.
SCRIPT = r"""#!/bin/bash
#SBATCH --job-name=carry
#SBATCH --nodes=1
#SBATCH --gres=gpu:a100:2
#SBATCH --cpus-per-task=8
#SBATCH --time=00:30:00
#SBATCH --mail-type=END
# a comment in the header
echo "center=${CENTER:-none} it's \"quoted\" $((6 * 7))"
false || echo 'tolerated: no strict mode leaks in'
cat <<'END'
  $HOME stays literal in a quoted heredoc
END
printf '%s|%s\n' one \
  two
"""

HEADER = {"slurm": "#SBATCH", "pbs": "#PBS", "lsf": "#BSUB", "process": "#LOCALSCHED"}


def _profile(dialect: str) -> SiteProfile:
    return SiteProfile.model_validate(
        {
            "name": f"{dialect}site",
            "dialect": dialect,
            "arch": "x86_64",
            "charge": {"kind": "node-hours"},
            "conventions": {"prologue": ["export CENTER=here"], "account_required": False},
            "partitions": [
                {
                    "name": "gpu",
                    "max_wall_s": "24h",
                    "node": {
                        "cpus": 64,
                        "memory_mib": "256G",
                        "count": 2,
                        "accelerator": {"type": "a100", "memory_gib": 40, "count": 4},
                    },
                }
            ],
        }
    )


def _run(script: str, tmp_path: Path) -> str:
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(path)], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    return done.stdout


@pytest.mark.parametrize("dialect", ["slurm", "pbs", "lsf", "process"])
def test_a_slurm_script_is_rendered_in_the_target_dialect_and_its_body_runs_unchanged(
    dialect: str, tmp_path: Path
) -> None:
    script = parse_script(SCRIPT)
    env, _ = script_envelope(script)
    assert env["gpus"] == {"min": 2} and env["cpus"] == {"min": 8}
    spec = JobSpec(
        name="fedhpc-t1-1",
        command=script_command(script),
        partition="gpu",
        shape=Shape(nodes=1, cpus=8, gpus=2, wall_time_s=1800, accelerator_type="a100"),
    )
    rendered = get_dialect(dialect).render_script(spec, _profile(dialect))
    header = [line for line in rendered.splitlines()[1:] if line.startswith("#")]
    assert header and all(line.startswith(HEADER[dialect] + " ") for line in header)
    assert "export CENTER=here" in rendered.splitlines()  # the site's prologue
    if dialect != "slurm":
        assert "#SBATCH" not in rendered
    ran = _run(rendered, tmp_path)
    original = _run(SCRIPT.replace("#!/bin/bash\n", "#!/bin/bash\nexport CENTER=here\n"), tmp_path)
    assert ran == original
    assert 'center=here it\'s "quoted" 42' in ran and "tolerated" in ran
    assert "$HOME stays literal" in ran and "one|two" in ran
