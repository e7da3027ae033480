"""The suite's scheduling scopes (tests/conftest.py `_scope`): a test that uses the shared Slurm
federation (its `devfed` mark, or the `devfed` fixture) runs in one of the two Slurm halves, one
at a time, wherever its module runs: a Slurm test beside another on the same instance would see
(or drain) the other's jobs. Read from the test modules' source, as the xdist controller sees
only node ids."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import HALVES, SLURM_B, _scope

INTEGRATION = Path(__file__).parent.parent / "integration"


def _marked_devfed(decorators: list[ast.expr]) -> bool:
    return any("devfed" in ast.unparse(d) for d in decorators)


def _uses_slurm(module: ast.Module) -> list[str]:
    """The test functions of `module` that use the Slurm federation."""
    whole = any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        and "devfed" in ast.unparse(n.value)
        for n in module.body
    )
    out = []
    for n in module.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_"):
            args = {a.arg for a in n.args.args}
            if whole or _marked_devfed(n.decorator_list) or "devfed" in args:
                out.append(n.name)
    return out


def test_every_test_on_the_slurm_federation_runs_in_the_slurm_scope() -> None:
    wrong = []
    for path in sorted(INTEGRATION.glob("test_*.py")):
        module = ast.parse(path.read_text())
        for name in _uses_slurm(module):
            nodeid = f"tests/integration/{path.name}::{name}"
            if _scope(nodeid) not in {*HALVES, "pbs"}:
                wrong.append(nodeid)
    assert not wrong, f"Slurm tests scheduled beside the Slurm scope: {wrong}"


def test_a_process_site_test_of_a_mixed_module_runs_beside_the_slurm_scope() -> None:
    e2e = "tests/integration/test_e2e_claude.py"
    assert _scope(f"{e2e}::test_twenty_consecutive_resumes_all_have_fedhpcs_tools") == e2e
    slurm = "test_claude_is_resumed_once_with_the_payload_and_reads_the_result[clean]"
    assert _scope(f"{e2e}::{slurm}") == "slurm-a"


def test_each_slurm_module_runs_whole_in_one_half_and_each_half_on_its_own_instance() -> None:
    halves: dict[str, set[str]] = {}
    for path in sorted(INTEGRATION.glob("test_*.py")):
        for name in _uses_slurm(ast.parse(path.read_text())):
            halves.setdefault(path.stem, set()).add(
                _scope(f"tests/integration/{path.name}::{name}")
            )
    assert all(len(h) == 1 for h in halves.values()), halves
    assert {m for m, h in halves.items() if h == {"slurm-b"}} == SLURM_B  # none listed idly
    assert sorted(HALVES.values()) == [1, 2]


def test_a_module_on_devpolaris_alone_runs_in_the_pbs_scope_not_the_slurm_one() -> None:
    arrays = (INTEGRATION / "test_arrays_pbs.py").read_text()
    assert "devfed" not in arrays and 'FEDHPC_DEVFED="pbs"' in arrays  # no Slurm cluster
    test = "test_alike_children_run_as_one_qsub_j_and_one_subjob_is_cancelled_alone"
    assert _scope(f"tests/integration/test_arrays_pbs.py::{test}") == "pbs"
    demo = "tests/integration/test_demo_slurm_pbs.py"  # Slurm and PBS: the Slurm scope
    assert _scope(f"{demo}::test_demo_places_one_group_over_slurm_and_pbs") == "slurm-a"
