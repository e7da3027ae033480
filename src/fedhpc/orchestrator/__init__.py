"""The orchestrator: durable tasks and attempts, bounded adaptation, groups, restart safety."""

from fedhpc.orchestrator.answers import hinted, hinted_group, hinted_result
from fedhpc.orchestrator.control import tick
from fedhpc.orchestrator.groups import advance_groups, group_view, submit_group
from fedhpc.orchestrator.placer import place_queued
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.service import Orchestrator, TaskNotFound
from fedhpc.orchestrator.task_tools import cancel, get_result, list_tasks, replan

__all__ = [
    "AttemptRecord",
    "Orchestrator",
    "TaskNotFound",
    "TaskRecord",
    "advance_groups",
    "cancel",
    "get_result",
    "group_view",
    "hinted",
    "hinted_group",
    "hinted_result",
    "list_tasks",
    "place_queued",
    "replan",
    "submit_group",
    "tick",
]
