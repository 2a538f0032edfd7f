"""Request values every service parses the same way: UTC instants, bounded integers,
page cursors, and the stage vocabulary's wire enums (ids and the limits of request fields
are the contract's buf.validate rules: services/platform/validation.py). Refusals use the
pydantic/FastAPI 422 shapes RememberStack's routes answer with, so a field is refused alike
everywhere.

The change feed's cursor (services/retrieval/changefeed.py) is not a page cursor: it is
bound to a space and checked byte for byte, so it keeps its own codec.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import uuid
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from testament.common.v1 import stage_pb2

from services.platform.errors import BadRequest, FieldViolation, InvalidArgument, ValidationFailed

CURSOR_MALFORMED = "cursor is malformed"
T = TypeVar("T")


def parse_utc(name: str, raw: str, *, refusal: str | None = None) -> dt.datetime:
    """An ISO 8601 date-time with a zero UTC offset. A naive value or another offset is
    refused with ``refusal`` (the route's own 422 string) when given."""
    text = raw.strip()
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValidationFailed([FieldViolation(
            name, "Input should be a valid datetime, invalid character in year", "datetime_from_date_parsing", raw,
        )]) from None
    if value.tzinfo is None or value.utcoffset() != dt.timedelta(0):
        if refusal is not None:
            raise InvalidArgument(refusal, reason="NOT_UTC")
        raise ValidationFailed([FieldViolation(name, "Input should have a zero UTC offset", "timezone_aware", raw)])
    return value.astimezone(dt.UTC)


def bounded_int(name: str, value: int | None, default: int, low: int, high: int) -> int:
    """``value`` within [low, high], or ``default`` when absent."""
    if value is None:
        return default
    if value < low:
        raise ValidationFailed([FieldViolation(name, f"Input should be greater than or equal to {low}",
                                               "greater_than_equal", value, {"ge": low})])
    if value > high:
        raise ValidationFailed([FieldViolation(name, f"Input should be less than or equal to {high}",
                                               "less_than_equal", value, {"le": high})])
    return value


def collect(problems: list[FieldViolation], parse: Callable[..., T], *args: Any) -> T | None:
    """``parse(*args)``, or None with its violations added to ``problems`` (for routes that
    report every refused field at once)."""
    try:
        return parse(*args)
    except ValidationFailed as refused:
        problems.extend(refused.violations)
        return None


def encode_cursor(fields: dict[str, str | int]) -> str:
    """An opaque page cursor: compact JSON in unpadded URL-safe base64."""
    payload = json.dumps(fields, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_cursor(raw: str, keys: Collection[str]) -> dict[str, str | int]:
    """The fields of a cursor :func:`encode_cursor` made with exactly ``keys``; anything else
    is 400 ``cursor is malformed`` (reason CURSOR_MALFORMED)."""
    try:
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode())
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict) or set(data) != set(keys):
        raise BadRequest(CURSOR_MALFORMED, reason="CURSOR_MALFORMED")
    return data


def cursor_instant(value: object) -> dt.datetime:
    """A timezone-aware instant stored in a cursor, or CURSOR_MALFORMED."""
    try:
        when = dt.datetime.fromisoformat(str(value))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise BadRequest(CURSOR_MALFORMED, reason="CURSOR_MALFORMED")
    return when


def cursor_uuid(value: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise BadRequest(CURSOR_MALFORMED, reason="CURSOR_MALFORMED") from None


# The work queue's vocabulary (work_units.status, defer_reason) as the contract's enums.
STAGE_STATUS: dict[str, stage_pb2.StageStatus.ValueType] = {
    "missing": stage_pb2.STAGE_STATUS_MISSING, "pending": stage_pb2.STAGE_STATUS_PENDING,
    "running": stage_pb2.STAGE_STATUS_RUNNING, "succeeded": stage_pb2.STAGE_STATUS_SUCCEEDED,
    "failed": stage_pb2.STAGE_STATUS_FAILED, "dead_letter": stage_pb2.STAGE_STATUS_DEAD_LETTER,
    "skipped": stage_pb2.STAGE_STATUS_SKIPPED,
}
DEFER_REASON: dict[str, stage_pb2.DeferReason.ValueType] = {
    "scheduled": stage_pb2.DEFER_REASON_SCHEDULED, "retry_backoff": stage_pb2.DEFER_REASON_RETRY_BACKOFF,
    "budget": stage_pb2.DEFER_REASON_BUDGET, "no_route": stage_pb2.DEFER_REASON_NO_ROUTE,
}
