"""The operation contract: request and answer models shared by REST, MCP and the CLI, one
module per operation family (`draft`, `inspect`, `tasks`, `task_views`, `continuations`, ...).

Nothing is imported here: a process that needs one family (`fedhpc hook` reads a tool binding
from `continuations`) does not pay for building every other family's models."""
