"""The `fedhpc` command line: status and tooling for people; thin over the library."""

__all__: list[str] = []
