"""The orchestrator: durable tasks and attempts, bounded adaptation, groups, restart safety."""

from fedhpc.orchestrator.book import TaskNotFound
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.service import Orchestrator

__all__ = ["AttemptRecord", "Orchestrator", "TaskNotFound", "TaskRecord"]
