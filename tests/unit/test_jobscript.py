"""Job scripts from Slurm, PBS and LSF users: each header read into envelope bounds, each
directive given a fate (never dropped silently), the body kept byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.jobscript import (
    MAX_SCRIPT_CHARS,
    JobScript,
    parse_script,
    script_command,
    script_envelope,
)

CORPUS = Path(__file__).parents[1] / "fixtures" / "jobscripts"


def _read(name: str) -> tuple[JobScript, dict[str, object], tuple[str, ...]]:
    script = parse_script((CORPUS / name).read_text())
    env, notes = script_envelope(script)
    return script, env, notes


def _fates(script: JobScript) -> dict[str, str]:
    return {d.text: d.fate for d in script.directives}


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.sh")), ids=lambda p: p.name)
def test_every_directive_line_of_the_corpus_is_accounted_for(path: Path) -> None:
    text = path.read_text()
    script = parse_script(text)
    header = {
        n
        for n, line in enumerate(text.splitlines(), start=1)
        if line.startswith(("#SBATCH", "#PBS", "#BSUB"))
    }
    assert {d.line for d in script.directives} == header
    assert all(d.note for d in script.directives)
    ResourceEnvelope.model_validate(script_envelope(script)[0])  # a valid envelope each time
    # The body is the script without its #! line and header directives, unchanged.
    late = {d.line for d in script.directives if "ignores it" in d.note}
    assert script.body == "".join(
        line
        for n, line in enumerate(text.splitlines(keepends=True), start=1)
        if n != 1 and (n not in header or n in late)
    )


def test_slurm_mpi_script_reads_tasks_cpus_and_memory_per_cpu_per_node() -> None:
    script, env, notes = _read("slurm_mpi.sh")
    assert script.scheduler == "slurm"
    assert env == {
        "nodes": {"min": 2},
        "cpus": {"min": 128},  # 64 tasks x 2 CPUs
        "memory": {"min": 128 * 1900},
        "wall_time": {"min": 36 * 3600},
    }
    fates = _fates(script)
    assert fates["--constraint=scratch&projects"] == "dropped"
    assert fates["--partition=cpu"] == fates["--account=bbka-delta-cpu"] == "dropped"
    assert fates["--output=melt-%j.out"] == fates["--job-name=lammps-melt"] == "fedhpc"
    assert any("64 tasks per node" in n for n in notes)
    assert "the body runs srun: present only where its scheduler is" in script.notes
    assert script.body.lstrip().startswith("# Load the toolchain")


def test_slurm_short_options_gres_type_array_and_a_late_directive() -> None:
    script, env, _ = _read("slurm_gpu_array.sh")
    assert script.interpreter == ("/bin/bash", "-l")
    assert env["gpus"] == {"min": 4} and env["accelerator_types"] == ["a100"]
    assert env["cpus"] == {"min": 32} and env["memory"] == {"min": 240 * 1024}
    assert env["wall_time"] == {"min": 4 * 3600}
    fates = _fates(script)
    assert fates["-a 0-99%10"] == "dropped"
    assert fates["--gpu-bind=closest"] == "dropped"  # unknown: kept and reported
    assert script.request.array == "0-99%10"
    late = [d for d in script.directives if d.line == 18]
    assert late and late[0].fate == "dropped" and "ignores it" in late[0].note
    assert "#SBATCH --time=99:00:00\n" in script.body  # a comment to bash: left in place
    assert any("SLURM_ARRAY_TASK_ID" in n for n in script.notes)


def test_slurm_gpus_per_task_mem_per_gpu_and_dependencies() -> None:
    script, env, _ = _read("slurm_deps.sh")
    assert env["nodes"] == {"min": 1}  # 1-4: the range's minimum
    assert env["wall_time"] == {"min": 90 * 60}  # a bare number is minutes in Slurm
    # --gres=gpu:2 on the later line wins over 8 tasks x 1 GPU per task
    assert env["gpus"] == {"min": 2} and env["memory"] == {"min": 2 * 32 * 1024}
    assert script.request.dependency == "afterok:123456:123457"
    fates = _fates(script)
    assert fates["--dependency=afterok:123456:123457"] == "dropped"
    notes = [d.note for d in script.directives if d.text == "--gres=gpu:2,nvme:100"]
    assert any("nvme:100" in n for n in notes)
    assert fates["--signal=B:USR1@300"] == "dropped"


def test_pbs_select_chunk_walltime_and_site_resources() -> None:
    script, env, _ = _read("pbs_polaris.sh")
    assert script.scheduler == "pbs"
    assert env == {
        "nodes": {"min": 4},
        "cpus": {"min": 64},
        "gpus": {"min": 4},
        "wall_time": {"min": 6 * 3600},
    }
    fates = _fates(script)
    assert fates["-l filesystems=home:eagle"] == "dropped"
    assert fates["-l place=scatter"] == "fedhpc"
    assert fates["-W depend=afterok:4821.polaris-pbs-01"] == "dropped"
    assert fates["-m abe"] == fates["-M someone@example.edu"] == "dropped"
    assert script.request.partition == "prod" and script.request.account == "CosmoSim"


def test_torque_nodes_ppn_job_memory_and_walltime_in_seconds() -> None:
    script, env, _ = _read("pbs_torque.sh")
    assert env == {
        "nodes": {"min": 2},
        "cpus": {"min": 16},
        "gpus": {"min": 2},
        "memory": {"min": 32 * 1024},  # mem is for the whole job: split over 2 nodes
        "wall_time": {"min": 3600},  # a bare walltime is seconds in PBS
    }
    assert _fates(script)["-l gpu_type=v100"] == "dropped"
    assert script.request.array == "1-20:2"


def test_lsf_summit_nnodes_wall_minutes_array_in_the_name_and_done_dependency() -> None:
    script, env, _ = _read("lsf_summit.sh")
    assert script.scheduler == "lsf"
    assert env["nodes"] == {"min": 8} and env["wall_time"] == {"min": 2 * 3600}
    assert script.request.job_name == "nekrs" and script.request.array == "[1-10]%2"
    fates = _fates(script)
    assert fates["-w done(4711)"] == "dropped"
    assert fates["-alloc_flags gpumps smt4"] == "dropped"
    assert "the body runs jsrun: present only where its scheduler is" in script.notes


def test_lsf_slots_ptile_rusage_affinity_and_gpu() -> None:
    script, env, notes = _read("lsf_rusage.sh")
    assert env["nodes"] == {"min": 2}  # 32 slots, 16 per host
    assert env["cpus"] == {"min": 32}  # 16 tasks x core(2)
    assert env["memory"] == {"min": 16 * 4000}
    assert env["gpus"] == {"min": 2} and env["wall_time"] == {"min": 45 * 60}
    notes_by_text = {d.text: d.note for d in script.directives}
    assert (
        "select[model==XeonGold6248]"
        in notes_by_text["-R span[ptile=16] rusage[mem=4000] select[model==XeonGold6248]"]
    )
    assert "mode=exclusive_process" in notes_by_text["-gpu num=2:mode=exclusive_process"]
    assert any("rusage[mem]" in n for n in notes)


def test_the_command_runs_the_body_unchanged_under_the_scripts_interpreter() -> None:
    script = parse_script("#!/bin/bash -l\n#SBATCH -t 10\necho 'a b' \"$HOME\"\n")
    assert script_command(script) == ("/bin/bash", "-l", "-c", "echo 'a b' \"$HOME\"\n")
    bare = parse_script("#SBATCH -t 10\nhostname\n")
    assert script_command(bare) == ("/bin/bash", "-c", "hostname\n")


def test_a_script_of_two_schedulers_keeps_the_first_and_reports_the_other() -> None:
    script = parse_script("#!/bin/bash\n#SBATCH -N 2\n#PBS -l walltime=1:00:00\nhostname\n")
    assert script.scheduler == "slurm"
    (other,) = [d for d in script.directives if d.line == 3]
    assert other.fate == "dropped" and "#PBS line in a slurm script" in other.note


def test_unreadable_values_are_reported_not_guessed() -> None:
    script = parse_script(
        "#!/bin/bash\n#SBATCH --nodes=many\n#SBATCH --mem=0\n#SBATCH --time=UNLIMITED\n"
        '#SBATCH --comment="unbalanced\ntrue\n'
    )
    fates = {d.line: (d.fate, d.note) for d in script.directives}
    assert all(f == "dropped" for f, _ in fates.values())
    assert "cannot read" in fates[2][1] and "cannot read" in fates[3][1]
    assert "cannot split" in fates[5][1]
    env, notes = script_envelope(script)
    assert env == {"nodes": {"min": 1}, "cpus": {"min": 1}}
    assert any("no time limit" in n for n in notes)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("#!/bin/bash\nhostname\n", "no #SBATCH"),
        ("#!/bin/bash\nhostname\n#SBATCH -N 1\n", "no #SBATCH"),
        ("#SBATCH -N 1\n\x00", "NUL"),
        ("#SBATCH -N 1\n" + "x" * MAX_SCRIPT_CHARS, "at most"),
    ],
)
def test_text_that_is_no_job_script_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_script(text)


def test_a_body_that_looks_for_its_own_file_is_told_it_has_none() -> None:
    script = parse_script('#!/bin/bash\n#SBATCH -t 5\ncd "$(dirname "${BASH_SOURCE[0]}")"\n')
    assert any("BASH_SOURCE" in n for n in script.notes)
    assert not parse_script("#SBATCH -t 5\necho $10\n").notes
