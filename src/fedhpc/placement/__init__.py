"""Best-feasible placement: pure, deterministic functions over an immutable snapshot."""

from fedhpc.placement.candidates import AccountChoice, account_choices, candidate_id
from fedhpc.placement.context import Ledger, Live, shape_key
from fedhpc.placement.credit import Budget, Charge, allowed_budget, predict_charge
from fedhpc.placement.draft import HeuristicDraft, Workload, heuristic_draft
from fedhpc.placement.errors import ErrorObservation, EstimatorError, EstimatorErrors
from fedhpc.placement.estimators import (
    EnvCache,
    RuntimeDeclaration,
    RuntimeModel,
    RuntimeObservation,
    SchedulerEstimates,
    SchedulerKey,
    WaitEstimate,
    WaitHistory,
    WaitObservation,
    paper_wait,
    size_bucket,
)
from fedhpc.placement.group import place_group
from fedhpc.placement.inputs import TOP, PlacementInputs
from fedhpc.placement.normalize import known_accelerator_types, normalize_envelope, parse_envelope
from fedhpc.placement.place import place
from fedhpc.placement.policy import Goal, Objective, Policy, PolicyKind, Settings, WaitMethod
from fedhpc.placement.rules import RULES, Category, Outcome, RuleResult
from fedhpc.placement.sizing import joint_shapes, size_shape
from fedhpc.placement.trace import (
    CandidateReasons,
    CandidateTrace,
    DecisionTrace,
    Estimates,
    Placement,
    PrunedClass,
    Unschedulable,
)

__all__ = [
    "RULES",
    "TOP",
    "AccountChoice",
    "Budget",
    "CandidateReasons",
    "CandidateTrace",
    "Category",
    "Charge",
    "DecisionTrace",
    "EnvCache",
    "ErrorObservation",
    "Estimates",
    "EstimatorError",
    "EstimatorErrors",
    "Goal",
    "HeuristicDraft",
    "Ledger",
    "Live",
    "Objective",
    "Outcome",
    "Placement",
    "PlacementInputs",
    "Policy",
    "PolicyKind",
    "PrunedClass",
    "RuleResult",
    "RuntimeDeclaration",
    "RuntimeModel",
    "RuntimeObservation",
    "SchedulerEstimates",
    "SchedulerKey",
    "Settings",
    "Unschedulable",
    "WaitEstimate",
    "WaitHistory",
    "WaitMethod",
    "WaitObservation",
    "Workload",
    "account_choices",
    "allowed_budget",
    "candidate_id",
    "heuristic_draft",
    "joint_shapes",
    "known_accelerator_types",
    "normalize_envelope",
    "paper_wait",
    "parse_envelope",
    "place",
    "place_group",
    "predict_charge",
    "shape_key",
    "size_bucket",
    "size_shape",
]
