""" "Did you mean": the nearest field name for an unknown key in a request (pure)."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Collection, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.ops.data import MoveDataRequest
from fedhpc.ops.draft import DraftRequest
from fedhpc.ops.tasks import (
    AdaptationPolicy,
    ReplanRequest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)

__all__ = ["fields_named", "model_at", "nearest", "request_model", "unknown_field_reason"]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, tuples, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is None:
        return []
    args = get_args(annotation)
    if origin in (Union, types.UnionType, tuple, list, set, frozenset):
        return [m for a in args if a is not Ellipsis for m in _models_in(a)]
    if origin is dict and len(args) == 2:
        return _models_in(args[1])
    return [m for a in args for m in _models_in(a)]  # Annotated and the like


def model_at(root: type[BaseModel], path: Sequence[int | str]) -> type[BaseModel] | None:
    """The model that holds the key at the end of `path` (indices and dict keys skipped)."""
    current: type[BaseModel] | None = root
    for part in path:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            continue  # a dict key or a union tag: stay on the same model
        models = _models_in(field.annotation)
        current = models[0] if models else None
    return current


def _squash(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def nearest(word: str, names: Collection[str]) -> str | None:
    """The known name `word` most likely meant: same letters without '_' first, then the
    closest spelling (difflib, ratio >= 0.6)."""
    squashed = {_squash(n): n for n in names}
    if _squash(word) in squashed:
        return squashed[_squash(word)]
    close = difflib.get_close_matches(word, sorted(names), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_field_reason(root: type[BaseModel] | None, loc: Sequence[int | str]) -> str:
    """The reason for an extra key at `loc`: the fields allowed there and the nearest one."""
    key = str(loc[-1]) if loc else ""
    holder = model_at(root, loc[:-1]) if root is not None else None
    if holder is None:
        return f"unknown field {key!r}"
    names = list(holder.model_fields)
    guess = nearest(key, names)
    if guess is not None:
        return f"unknown field {key!r}; did you mean {guess!r}?"
    for name, field in holder.model_fields.items():  # a nested field written at this level
        for inner in _models_in(field.annotation):
            deeper = nearest(key, list(inner.model_fields))
            if deeper is not None:
                return f"unknown field {key!r}; did you mean {name}.{deeper}?"
    return f"unknown field {key!r}; the fields here are: {', '.join(names)}"


def fields_named(root: type[BaseModel] | None, message: str) -> list[str]:
    """The fields of `root` that a model-level check's message names (whole words, in the
    model's order): the fields it concerned, when its message says so."""
    if root is None:
        return []
    return [
        name
        for name in root.model_fields
        if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", message)
    ]


def request_model(title: str) -> type[BaseModel] | None:
    """A contract model by the title pydantic gives its validation errors."""
    models: tuple[type[BaseModel], ...] = (
        SubmitTaskRequest,
        SubmitGroupRequest,
        ReplanRequest,
        ResultRequest,
        MoveDataRequest,
        DraftRequest,
        ResourceEnvelope,
        AdaptationPolicy,
    )
    return next((m for m in models if m.__name__ == title), None)
