"""Site adapters: profile x dialect x transport (`fedhpc.adapters.site`), the only code that
talks to a site. This package root stays import-light so the pure dialects load without I/O."""

from fedhpc.adapters.command import Command, CommandResult

__all__ = ["Command", "CommandResult"]
