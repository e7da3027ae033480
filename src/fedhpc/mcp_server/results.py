"""Every failure becomes a tool result the model can read: `{code, message, hint[, fields]}`."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import structlog
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from fedhpc.errors import ErrorKind, FedError, FieldIssue, ValidationFailed, typed_error
from fedhpc.ops.suggest import fields_named, request_model, unknown_field_reason

__all__ = [
    "MAX_RESPONSE_BYTES",
    "InternalError",
    "ResponseTooLarge",
    "UnknownTool",
    "answer_result",
    "arguments_error",
    "check_fields",
    "compact",
    "error_result",
    "guarded",
    "project",
    "validation_failed",
]

log = structlog.get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T", bound=BaseModel)

# Tool answers are context the model pays for; beyond this, answer with a pointer instead.
MAX_RESPONSE_BYTES = 48 * 1024


class InternalError(FedError):
    """A bug or an answer fedhpc did not expect; the details stay in the server's log."""

    code = "internal"
    default_hint = "This is a fedhpc bug: retry once, then report it with the server's stderr."


class UnknownTool(FedError):
    code = "unknown_tool"
    kind = ErrorKind.NOT_FOUND


class ResponseTooLarge(FedError):
    code = "too_large"
    kind = ErrorKind.TOO_LARGE


def validation_failed(
    exc: ValidationError, prefix: str = "", root: type[BaseModel] | None = None
) -> ValidationFailed:
    """Pydantic's errors as one ValidationFailed naming each field by its dotted path; an
    unknown key says which field was probably meant."""
    root = root or request_model(exc.title)
    issues: list[FieldIssue] = []
    for err in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(p) for p in err["loc"])
        field = ".".join(p for p in (prefix, path) if p)
        reason = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            reason = unknown_field_reason(root, tuple(err["loc"]))
        if not field:  # a check across the arguments: the fields its message names, if any
            named = fields_named(root, reason)
            issues.extend(FieldIssue(name, reason) for name in named)
            if named:
                continue
            field, reason = "(arguments)", f"the arguments as a whole: {reason}"
        issues.append(FieldIssue(field, reason))
    return ValidationFailed(issues)


def error_result(exc: FedError) -> CallToolResult:
    """The is_error result: compact JSON text, so every client shows the model the same thing.

    No structuredContent on purpose: it would have to match the tool's outputSchema."""
    text = json.dumps(exc.as_dict(), separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


_EMPTY: tuple[object, ...] = (None, "", (), [], {}, False, 0)


def _is_empty(value: object) -> bool:
    return any(value == e and type(value) is type(e) for e in _EMPTY) or value is None


def compact(value: Any) -> Any:
    """A model as plain JSON data without what carries nothing: an optional field (one with a
    default) is left out when it is null, or empty/false/zero and equal to its default (an
    exit code of 0 stays: its default is null). Required fields always stay,
    so the result still validates as the model (and matches the tool's output schema)."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        out: dict[str, Any] = {}
        for name, info in fields.items():
            item = getattr(value, name)
            if (
                not info.is_required()
                and _is_empty(item)
                and (item is None or item == info.get_default(call_default_factory=True))
            ):
                continue  # null, or empty and equal to its default: it carries nothing
            out[info.serialization_alias or name] = compact(item)
        return out
    if isinstance(value, dict):
        return {str(k): compact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [compact(v) for v in value]
    return to_jsonable_python(value)


def check_fields(model: type[BaseModel], fields: list[str]) -> None:
    """A `validation` error naming each of `fields` that `model` does not have."""
    known = model.model_fields
    unknown = [(i, f) for i, f in enumerate(fields) if f not in known]
    if unknown:
        names = ", ".join(known)
        issues = [
            FieldIssue(f"fields[{i}]", f"no field {f[:64]!r}; fields: {names}") for i, f in unknown
        ]
        raise ValidationFailed(issues, hint="Name fields of the answer, or pass no fields.")


def project(answer: T, fields: list[str]) -> T:
    """Only the named fields of an answer (and its required ones, which name it): the others
    are reset to their defaults, which `compact` leaves out. No fields: the whole answer."""
    if not fields:
        return answer
    check_fields(type(answer), fields)
    model = type(answer).model_fields
    reset = {
        name: info.get_default(call_default_factory=True)
        for name, info in model.items()
        if name not in fields and not info.is_required()
    }
    return answer.model_copy(update=reset)


def answer_result(answer: BaseModel) -> CallToolResult:
    """A successful answer: compact JSON text (what the model reads), and the same data as
    `structuredContent`."""
    data = compact(answer)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


class _Known(dict[str, object]):
    """Format values; a placeholder with no value stays as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _pointer(pointer: str, answer: BaseModel, args: dict[str, Any], size: int) -> str:
    """The pointer with this answer's ids filled in (`{task_id}`, `{group_id}`), and `{fit}`:
    a `max_bytes` that would have fitted (escaped control characters make a tail bigger
    than its bytes, so the ratio is measured, not assumed)."""
    values = _Known({k: v for k, v in args.items() if isinstance(v, str | int)})
    values.update({k: getattr(answer, k) for k in ("task_id", "group_id") if hasattr(answer, k)})
    if isinstance(args.get("max_bytes"), int):
        values["fit"] = max(1, int(args["max_bytes"] * MAX_RESPONSE_BYTES / size * 0.9))
    return pointer.format_map(values)


def _size_checked(name: str, answer: T, pointer: str, args: dict[str, Any]) -> CallToolResult:
    result = answer_result(answer)
    size = len(result.content[0].text.encode())  # type: ignore[union-attr]
    if size <= MAX_RESPONSE_BYTES:
        return result
    return error_result(
        ResponseTooLarge(
            f"{name}'s answer is {size} bytes, above the {MAX_RESPONSE_BYTES}-byte cap",
            hint=_pointer(pointer, answer, args, size),
        )
    )


def guarded(
    pointer: str = "Narrow the request.",
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T | CallToolResult]]]:
    """Wrap a tool so nothing escapes as an untyped error, and cap the answer's size.

    `functools.wraps` keeps the signature, so the SDK still derives the input and output
    schemas from the wrapped function; it passes a returned CallToolResult through as is."""

    def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T | CallToolResult]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T | CallToolResult:
            try:
                answer = await fn(*args, **kwargs)
            except ValidationError as exc:
                return error_result(validation_failed(exc))
            except FedError as exc:
                return error_result(exc)
            except Exception as exc:
                if typed := typed_error(exc):  # raised inside a task group
                    return error_result(typed)
                log.exception("tool crashed", tool=fn.__name__)
                return error_result(InternalError(f"{fn.__name__} failed: {type(exc).__name__}"))
            return _size_checked(fn.__name__, answer, pointer, dict(kwargs))

        return wrapper

    return decorate


def arguments_error(
    tool: str, exc: ValidationError, root: type[BaseModel] | None = None
) -> CallToolResult:
    """The typed answer for arguments that do not match a tool's input schema."""
    failed = validation_failed(exc, root=root)
    failed.hint = f"Fix the named fields of {tool} and call it again."
    return error_result(failed)
