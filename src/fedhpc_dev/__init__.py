"""fedhpc's development tooling: the local test federation (`devfed`), the local-process batch
scheduler of the `process` dialect (`localsched`) and the end-to-end demo (`demo`).

Shipped in the same distribution as `fedhpc` but never imported by it: the `fedhpc devfed` and
`fedhpc demo` commands reach the CLI through the `fedhpc.commands` entry-point group
(pyproject.toml), and the `process` dialect names its scheduler module as a string.
"""

__all__: list[str] = []
