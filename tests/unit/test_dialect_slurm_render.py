"""Slurm batch scripts: directives from the shape and profile; agent text can never escape."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.domain import JobSpec, SiteProfile
from fedhpc.profiles import load_profiles
from tests.injection_corpus import corpus

DIALECT = SlurmDialect()


@pytest.fixture(scope="module")
def delta() -> SiteProfile:
    return load_profiles()["devdelta"]


def _spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "fedhpc-t1-1",
        "command": ["python3", "train.py", "--epochs", "3"],
        "partition": "gpuA100x4",
        "account": "fedhpc-gpu",
        "qos": "normal",
        "shape": {"nodes": 1, "cpus": 8, "gpus": 2, "memory_mib": "32G", "wall_time_s": "1h"},
        "stdout": "/scratch/%x-%j.out",
        "workdir": "/scratch/run1",
        "env": {"OMP_NUM_THREADS": "8"},
    }
    base.update(kw)
    return JobSpec.model_validate(base)


def _directives(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def test_script_carries_every_requested_dimension(delta: SiteProfile) -> None:
    script = DIALECT.render_script(_spec(), delta)
    assert script.startswith("#!/bin/bash\n")
    assert _directives(script) == [
        "#SBATCH --job-name=fedhpc-t1-1",
        "#SBATCH --partition=gpuA100x4",
        "#SBATCH --account=fedhpc-gpu",
        "#SBATCH --qos=normal",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --gres=gpu:a100:2",
        "#SBATCH --mem=32768M",
        "#SBATCH --time=01:00:00",
        "#SBATCH --output=/scratch/%x-%j.out",
        "#SBATCH --chdir=/scratch/run1",
    ]
    assert "export OMP_NUM_THREADS=8" in script
    assert script.rstrip().endswith("python3 train.py --epochs 3")


def test_gpu_request_follows_the_site_convention(delta: SiteProfile) -> None:
    conv = delta.conventions.model_copy(update={"gpu_request_style": "gpus-per-node"})
    site = delta.model_copy(update={"conventions": conv})
    assert "#SBATCH --gpus-per-node=2" in DIALECT.render_script(_spec(), site)
    typed = _spec(shape={"gpus": 2, "accelerator_type": "a100"})
    assert "#SBATCH --gpus-per-node=a100:2" in DIALECT.render_script(typed, site)


def test_cpu_job_has_no_gpu_directive_and_array_is_rendered(delta: SiteProfile) -> None:
    spec = _spec(
        partition="cpu", shape={"cpus": 4}, array={"start": 1, "stop": 9, "step": 2, "limit": 3}
    )
    script = DIALECT.render_script(spec, delta)
    assert not any("--gres" in d or "--gpus" in d for d in _directives(script))
    assert "#SBATCH --array=1-9:2%3" in script


def test_container_wraps_the_command_with_the_quoted_image(delta: SiteProfile) -> None:
    script = DIALECT.render_script(_spec(container_image="docker://nvcr.io/x:1 y"), delta)
    assert script.rstrip().endswith(
        "apptainer exec --nv 'docker://nvcr.io/x:1 y' python3 train.py --epochs 3"
    )


def _body(script: str) -> str:
    return "\n".join(ln for ln in script.splitlines() if not ln.startswith("#"))


def test_injection_corpus_in_argv_env_and_image_never_executes(
    delta: SiteProfile, canary_dir: Path
) -> None:
    for hostile in corpus(canary_dir):
        spec = _spec(
            command=["printf", "%s|%s", hostile, "$HOSTILE"],
            env={"HOSTILE": hostile},
            workdir=None,
            partition="cpu",
            shape={"cpus": 1},
        )
        script = DIALECT.render_script(spec, delta)
        assert len(_directives(script)) == len(
            _directives(
                DIALECT.render_script(
                    _spec(workdir=None, partition="cpu", shape={"cpus": 1}), delta
                )
            )
        ), "a hostile string added a directive"
        out = subprocess.run(
            ["bash", "-c", _body(script)], capture_output=True, cwd=canary_dir, check=True
        )
        assert out.stdout.decode() == f"{hostile}|$HOSTILE"
        wrapped = DIALECT.render_script(
            _spec(container_image=hostile, partition="cpu", shape={"cpus": 1}), delta
        )
        assert len(_directives(wrapped)) == len(_directives(script)) + 1  # + --chdir
    assert not list(canary_dir.iterdir())


@pytest.mark.parametrize("field", ["name", "account", "qos", "partition", "workdir", "stdout"])
def test_injection_corpus_in_directive_fields_is_rejected(field: str, canary_dir: Path) -> None:
    for hostile in corpus(canary_dir):
        with pytest.raises(ValidationError) as info:
            _spec(**{field: hostile})
        assert info.value.errors()[0]["loc"][0] == field


def test_constraint_sites_get_constraint_and_default_qos_not_partition() -> None:
    perlmutter = load_profiles()["perlmutter"]
    spec = JobSpec(
        name="fedhpc-t2-1",
        command=("true",),
        partition="gpu-hbm80g",
        account="m1234_g",
        shape={"gpus": 4},
    )
    directives = _directives(DIALECT.render_script(spec, perlmutter))
    assert not any(d.startswith("#SBATCH --partition") for d in directives)
    assert "#SBATCH --constraint=gpu&hbm80g" in directives
    assert "#SBATCH --qos=regular" in directives


def test_whole_node_gpu_sites_get_no_gpu_flag() -> None:
    vista = load_profiles()["vista"]
    spec = JobSpec(name="fedhpc-t3-1", command=("true",), partition="gh", shape={"gpus": 1})
    assert not any("gpu" in d for d in _directives(DIALECT.render_script(spec, vista)))


def test_profile_extra_directives_are_rendered(delta: SiteProfile) -> None:
    conv = delta.conventions.model_copy(update={"extra_directives": ("--licenses=scratch",)})
    script = DIALECT.render_script(_spec(), delta.model_copy(update={"conventions": conv}))
    assert "#SBATCH --licenses=scratch" in _directives(script)
