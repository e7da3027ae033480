"""fedhpc's development tooling: the local test federation (`devfed`), the local-process batch
scheduler of the `process` dialect (`localsched`), the end-to-end demo (`demo`) and the
generator of the docs' settings tables (`settings_docs`).

Shipped in the same distribution as `fedhpc` but never imported by it: the `fedhpc devfed` and
`fedhpc demo` commands reach the CLI through the `fedhpc.commands` entry-point group
(pyproject.toml), the dev sites reach the profile loader through the `fedhpc.profiles` group
(`profiles.py`), and the `process` dialect runs its scheduler module as the setting
`FEDHPC_PROCESS_SCHEDULER` names (default: `localsched`)."""

__all__: list[str] = []
