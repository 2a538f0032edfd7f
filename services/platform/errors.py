"""Domain errors: what was refused and why, free of any transport.

Domain and application code raise these; one server interceptor
(:mod:`services.platform.grpc_errors`) turns them into gRPC statuses carrying
``google.rpc.ErrorInfo`` (reason, domain ``testament``, the HTTP status and the
RememberStack ``detail`` body), and the gateway turns those into HTTP responses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Code(Enum):
    """Transport-neutral status codes (mirroring gRPC's, by name)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    CANCELLED = "CANCELLED"


@dataclass(frozen=True)
class FieldViolation:
    """One rejected request field, in the shape of a pydantic/FastAPI 422 item.

    ``field`` is the request field path (dots for nesting); ``type`` is the
    validation type (``missing``, ``less_than_equal``, ``extra_forbidden``…).
    """

    field: str
    message: str
    type: str = "value_error"
    input: Any = None
    ctx: dict[str, Any] | None = None


class TestamentError(Exception):
    """Root of every refusal a caller can see."""

    code: Code = Code.INTERNAL
    http_status: int = 500
    reason: str = "INTERNAL"

    def __init__(
        self,
        detail: Any,
        *,
        reason: str | None = None,
        http_status: int | None = None,
        message: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.detail = detail
        if reason is not None:
            self.reason = reason
        if http_status is not None:
            self.http_status = http_status
        self.message = message or (detail if isinstance(detail, str) else self.reason.lower())
        self.retry_after_s = retry_after_s
        super().__init__(self.message)


class InvalidArgument(TestamentError):
    code = Code.INVALID_ARGUMENT
    http_status = 422
    reason = "INVALID_ARGUMENT"


class BadRequest(TestamentError):
    """A malformed value the route reports as 400 rather than 422 (e.g. a bad cursor)."""

    code = Code.INVALID_ARGUMENT
    http_status = 400
    reason = "BAD_REQUEST"


@dataclass
class ValidationFailed(Exception):
    """A request failed field validation: the 422 list form of ``detail``."""

    violations: list[FieldViolation] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__("; ".join(f"{v.field}: {v.message}" for v in self.violations))


class NotFound(TestamentError):
    code = Code.NOT_FOUND
    http_status = 404
    reason = "NOT_FOUND"


class AlreadyExists(TestamentError):
    code = Code.ALREADY_EXISTS
    http_status = 409
    reason = "ALREADY_EXISTS"


class Conflict(TestamentError):
    code = Code.FAILED_PRECONDITION
    http_status = 409
    reason = "CONFLICT"


class Aborted(TestamentError):
    """A concurrent write won: nothing was changed, and the same request may be sent again."""

    code = Code.ABORTED
    http_status = 409
    reason = "ABORTED"


class PermissionDenied(TestamentError):
    code = Code.PERMISSION_DENIED
    http_status = 403
    reason = "PERMISSION_DENIED"


class Unauthenticated(TestamentError):
    code = Code.UNAUTHENTICATED
    http_status = 401
    reason = "UNAUTHENTICATED"


class ResourceExhausted(TestamentError):
    code = Code.RESOURCE_EXHAUSTED
    http_status = 429
    reason = "RESOURCE_EXHAUSTED"


class Unavailable(TestamentError):
    code = Code.UNAVAILABLE
    http_status = 503
    reason = "UNAVAILABLE"


class Unimplemented(TestamentError):
    code = Code.UNIMPLEMENTED
    http_status = 501
    reason = "UNIMPLEMENTED"


class DeadlineExceeded(TestamentError):
    code = Code.DEADLINE_EXCEEDED
    http_status = 504
    reason = "DEADLINE_EXCEEDED"


# The RememberStack perimeter wording, shared by every service and the gateway.
CREDENTIAL_REQUIRED = "a perimeter credential is required"
AUTHENTICATION_FAILED = "perimeter authentication failed"
SCOPE_TOO_NARROW = "credential may not perform this operation"
