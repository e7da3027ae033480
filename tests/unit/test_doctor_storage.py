"""The doctor's storage check: the probe runs through a real local transport (bash), expanding
`$NAME` roots in the remote shell; a shared root the user cannot write is a note, not a failure;
a probe that fails is one failed check that says why. (Tests run as root, where `-w` is always
true, so the read-only case is checked on the probe's output.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhpc.adapters.command import CommandResult
from fedhpc.adapters.site import open_adapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.domain.site import TransportSpec
from fedhpc.onboard.doctor import _Run
from fedhpc.onboard.doctor_slurm import check_test_submits
from fedhpc.onboard.doctor_storage import parse_storage, probe_storage
from fedhpc.profiles import load_federation


def _local(env: dict[str, str]) -> LocalTransport:
    return LocalTransport(TransportSpec(kind="local", env=env))


async def test_a_variable_root_is_expanded_by_the_remote_shell(tmp_path: Path) -> None:
    (tmp_path / "scratch" / "sub").mkdir(parents=True)
    env = {"FEDHPC_T_SCRATCH": str(tmp_path / "scratch"), "FEDHPC_T_EMPTY": ""}
    roots = [
        ("scratch", "$FEDHPC_T_SCRATCH"),
        ("sub", "$FEDHPC_T_SCRATCH/sub"),
        ("gone", "$FEDHPC_T_SCRATCH/nope"),
        ("empty", "$FEDHPC_T_EMPTY"),
        ("unset", "$FEDHPC_T_NO_SUCH_VARIABLE"),
        ("bad", "$(touch x)"),
        ("plain", str(tmp_path)),
    ]
    checks = {c[0]: c for c in await probe_storage(_local(env), "s", roots)}
    assert checks["storage:scratch"][1:3] == (
        True,
        f"$FEDHPC_T_SCRATCH = {tmp_path}/scratch: writable",
    )
    assert checks["storage:sub"][1] is True
    assert checks["storage:sub"][2].startswith(f"$FEDHPC_T_SCRATCH/sub = {tmp_path}/scratch/sub")
    assert checks["storage:gone"][1] is False and checks["storage:gone"][2].endswith("missing")
    for name in ("empty", "unset"):
        assert checks[f"storage:{name}"][1] is False
        assert "variable is not set" in checks[f"storage:{name}"][2]
    assert checks["storage:bad"][1] is False and "not a $NAME" in checks["storage:bad"][2]
    assert not (Path.cwd() / "x").exists()  # nothing in a root is run
    assert checks["storage:plain"][1:3] == (True, f"{tmp_path}: writable")


async def test_a_missing_plain_root_fails_with_its_fix(tmp_path: Path) -> None:
    [check] = await probe_storage(_local({}), "s", [("scratch", str(tmp_path / "no"))])
    name, ok, detail, fix = check
    assert (name, ok, detail) == ("storage:scratch", False, f"{tmp_path}/no: missing")
    assert fix.startswith(f"create {tmp_path}/no at the site")


def test_a_shared_root_the_user_cannot_write_is_a_note_not_a_failure() -> None:
    roots = [("home", "/u"), ("scratch", "$SCRATCH"), ("workdir", "/u/me/work")]
    out = "readonly /u\nuser /scratch/07/me\nreadonly /u/me/work\n"
    home, scratch, workdir = parse_storage("delta", roots, CommandResult(0, out, ""))
    assert home[1] is None and home[2].startswith("/u: exists, not writable by you")
    assert scratch[1:3] == (True, "$SCRATCH = /scratch/07/me: your folder is writable")
    # The workdir is where fedhpc writes: it must be writable.
    assert workdir[1] is False and workdir[2] == "/u/me/work: not writable by you"
    assert "workdir under [sites.delta]" in workdir[3]


def test_a_failed_probe_is_one_failed_check_that_says_why() -> None:
    roots = [("home", "/u"), ("scratch", "/s")]
    res = CommandResult(127, "", "bash: command not found\n")
    assert parse_storage("delta", roots, res) == [
        (
            "storage",
            False,
            "storage check failed: bash: command not found",
            "run `bash -c true` at delta through its transport; fix what it reports",
        )
    ]
    # Output that does not match the roots is not read as 'missing' for each.
    [check] = parse_storage("delta", roots, CommandResult(0, "ok /u\n", ""))
    assert check[1] is False and check[2].startswith("storage check failed: unexpected output")


async def test_a_transport_error_is_one_failed_check() -> None:
    spec = TransportSpec(kind="local", options={"attempts": "1"})
    # argv[0] 'bash' resolves through PATH: an empty PATH makes the transport itself fail.
    transport = LocalTransport(spec.model_copy(update={"env": {"PATH": "/nonexistent"}}))
    [check] = await probe_storage(transport, "s", [("home", "/")])
    assert check[0] == "storage" and check[1] is False
    assert check[2].startswith("storage check failed: ")


async def test_an_error_running_test_only_fails_that_check_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport or parse error in `sbatch --test-only` is that partition's failed check (with
    the error's message and hint), not the end of the site's doctor run; the detail says what
    was asked (1 GPU on a GPU partition)."""
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    monkeypatch.setenv("FEDHPC_DEVFED_DIR", str(tmp_path / "devfed"))
    site = load_federation()["devdeltaai"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_bytes(b"\x7fELF not a program")  # exec fails: ENOEXEC
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # only it: exec would try the next sbatch
    run = _Run(site)
    adapter = open_adapter(site)
    try:
        await check_test_submits(run, adapter, "slurm")
    finally:
        await adapter.transport.aclose()
    parts = [p for p in site.profile.partitions if p.name not in site.profile.blocked_partitions]
    assert [c.name for c in run.checks] == [f"test_submit:{p.name}" for p in parts]
    gpu = next(p for p in parts if p.node.accelerator)
    check = next(c for c in run.checks if c.name == f"test_submit:{gpu.name}")
    assert check.status == "fail"
    acc = gpu.node.accelerator
    assert acc is not None
    assert check.detail.startswith(f"sbatch --test-only (a 1-CPU 1-GPU ({acc.type}) job): ")
    assert "could not start sbatch" in check.detail
