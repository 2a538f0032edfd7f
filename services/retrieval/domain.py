"""Retrieval rules: the operation registry and its strict argument checks, time scopes and
temporal matches, and reciprocal rank fusion. Pure: no transport, no driver."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.platform.errors import FieldViolation, InvalidArgument, NotFound, ValidationFailed

RRF_K = 60

# --------------------------------------------------------------------------------------
# the operation registry (closed JSON Schemas: unknown arguments are refused)
# --------------------------------------------------------------------------------------

_TIME_SCHEMA: dict[str, Any] = {
    "type": "object", "default": {"mode": "current"},
    "oneOf": [
        {"properties": {"mode": {"const": "current"}}, "required": ["mode"], "additionalProperties": False},
        {"properties": {"mode": {"const": "at"}, "at": {"type": "string", "format": "date-time"}},
         "required": ["mode", "at"], "additionalProperties": False},
        {"properties": {"mode": {"const": "overlap"}, "from": {"type": "string", "format": "date-time"},
                        "to": {"type": "string", "format": "date-time"}},
         "required": ["mode", "from", "to"], "additionalProperties": False},
        {"properties": {"mode": {"const": "history"}}, "required": ["mode"], "additionalProperties": False},
    ],
}
_QUERY = {"type": "string", "minLength": 1, "maxLength": 8192}
_HOPS = {"type": "integer", "default": 1, "minimum": 1, "maximum": 2}
_PREDICATE = {"type": "string", "minLength": 1, "maxLength": 200}


def _ids(max_items: int) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "format": "uuid"}, "minItems": 1, "maxItems": max_items,
            "uniqueItems": True}


def _closed(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


@dataclass(frozen=True)
class Operation:
    name: str
    description: str
    input_schema: dict[str, Any]
    result_contract: str  # envelope | context_bundle_v2
    output_grain: str | None
    answer_intent: str
    version: int
    implementation_plan_hash: str


OPERATIONS: tuple[Operation, ...] = (
    Operation("resolve_entity", "Resolve a name to ranked current candidates; never silently guess.",
              _closed({"name": {"type": "string", "minLength": 1}}, ["name"]), "envelope", "fact", "identity", 1,
              "fcf8f8bd08efe28d62af572dbd4f81601b03f1744d993021225454b55748059a"),
    Operation("claims_and_sources_context", "High-recall current claims and confirmed source passages.",
              _closed({"query": _QUERY, "entity_ids": _ids(20),
                       "k": {"type": "integer", "default": 50, "minimum": 1, "maximum": 100},
                       "candidate_k": {"type": "integer", "default": 200, "minimum": 1, "maximum": 400}},
                      ["query"]), "envelope", "evidence", "claims_and_sources", 2,
              "cb897d871de908ee47b4bd80b313cf3b1df86c6e6d2a83882c3c3c3320ce4278"),
    Operation("facts_context", "Adjudicated relations and observations under an explicit world-time scope, with "
              "bounded graph expansion for current or point-in-time entity anchors.",
              _closed({"query": _QUERY, "entity_ids": _ids(19),
                       "k": {"type": "integer", "default": 15, "minimum": 1, "maximum": 30},
                       "evidence_per_fact": {"type": "integer", "default": 3, "minimum": 1, "maximum": 5},
                       "hops": _HOPS, "predicate": _PREDICATE, "time": _TIME_SCHEMA}, ["query"]),
              "envelope", "fact", "facts", 3, "88264ee8ce445d7145b6138e8ea97e9c91d441512816186d5d064519499e339f"),
    Operation("combined_context", "Claims-and-sources and neighbourhood-aware facts side by side in "
              "ContextBundle/v2.",
              _closed({"query": _QUERY, "entity_ids": _ids(19), "hops": _HOPS, "predicate": _PREDICATE,
                       "time": _TIME_SCHEMA}, ["query"]), "context_bundle_v2", None, "combined_context", 4,
              "d9e9b28cfdf398658459e17839e8f732437c5514aa9927d4f622d9d5175d0f10"),
)
OPERATION_BY_NAME = {op.name: op for op in OPERATIONS}


def operation(name: str) -> Operation:
    op = OPERATION_BY_NAME.get(name)
    if op is None:
        raise NotFound(name, reason="UNKNOWN_OPERATION")  # the bare name is the detail
    return op


def _invalid(message: str) -> InvalidArgument:
    return InvalidArgument({"code": "invalid_parameter", "message": message}, reason="INVALID_PARAMETER",
                           message=message)


def _int(name: str, value: Any, schema: Mapping[str, Any]) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not value.is_integer()):
        raise _invalid(f"invalid {name}: expected an integer")
    number = int(value)
    if "minimum" in schema and number < schema["minimum"]:
        raise _invalid(f"{name} violates minimum={schema['minimum']}")
    if "maximum" in schema and number > schema["maximum"]:
        raise _invalid(f"{name} violates maximum={schema['maximum']}")
    return number


def _str(name: str, value: Any, schema: Mapping[str, Any]) -> str:
    if not isinstance(value, str):
        raise _invalid(f"invalid {name}: expected a string")
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise _invalid(f"{name} violates minLength={schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise _invalid(f"{name} violates maxLength={schema['maxLength']}")
    return value


def _uuids(name: str, value: Any, schema: Mapping[str, Any]) -> list[uuid.UUID]:
    if not isinstance(value, list):
        raise _invalid(f"invalid {name}: expected an array of UUID strings")
    if len(value) < schema["minItems"]:
        raise _invalid(f"{name} violates minItems={schema['minItems']}")
    if len(value) > schema["maxItems"]:
        raise _invalid(f"{name} violates maxItems={schema['maxItems']}")
    out = []
    for item in value:
        if not isinstance(item, str):
            raise _invalid(f"invalid {name}: expected UUID strings")
        try:
            out.append(uuid.UUID(item))
        except ValueError:
            raise _invalid(f"invalid {name}: {item!r} is not a UUID") from None
    if len(set(out)) != len(out):
        raise _invalid(f"{name} violates uniqueItems=true")
    return out


@dataclass(frozen=True)
class TimeScope:
    mode: str  # current | at | overlap | history
    at: dt.datetime | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None


CURRENT = TimeScope("current")


def parse_instant(name: str, raw: Any) -> dt.datetime:
    """A full date-time with a zone (any offset, converted to UTC); dates and naive values refused."""
    if not isinstance(raw, str) or "T" not in raw.upper():
        raise _invalid(f"invalid {name}: expected a date-time with a timezone")
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _invalid(f"invalid {name}: expected a date-time with a timezone") from None
    if value.tzinfo is None:
        raise _invalid(f"invalid {name}: a timezone is required")
    return value.astimezone(dt.UTC)


def parse_time(raw: Any) -> TimeScope:
    if not isinstance(raw, dict):
        raise _invalid("invalid time: expected an object")
    mode = raw.get("mode")
    allowed = {"current": {"mode"}, "at": {"mode", "at"}, "overlap": {"mode", "from", "to"}, "history": {"mode"}}
    if mode not in allowed:
        raise _invalid("invalid time: mode must be one of current, at, overlap, history")
    if set(raw) != allowed[mode]:
        raise _invalid(f"invalid time: mode {mode} takes exactly {sorted(allowed[mode])}")
    if mode == "at":
        return TimeScope("at", at=parse_instant("time", raw["at"]))
    if mode == "overlap":
        start, end = parse_instant("time", raw["from"]), parse_instant("time", raw["to"])
        if end < start:
            raise _invalid("invalid time: to must be at or after from")
        return TimeScope("overlap", start=start, end=end)
    return TimeScope(mode)


def validate_arguments(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Strict: unknown or missing keys refused; JSON types exact (3.0 is an integer, true is not)."""
    op = operation(name)
    schema = op.input_schema
    unknown = sorted(set(arguments) - set(schema["properties"]))
    if unknown:
        raise _invalid(f"unknown argument(s): {', '.join(unknown)}")
    for required in schema["required"]:
        if required not in arguments:
            raise _invalid(required)
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        prop = schema["properties"][key]
        if key == "time":
            out[key] = parse_time(value)
        elif key == "entity_ids":
            out[key] = _uuids(key, value, prop)
        elif prop.get("type") == "integer":
            out[key] = _int(key, value, prop)
        else:
            out[key] = _str(key, value, prop)
    for key, prop in schema["properties"].items():
        if key not in out and "default" in prop:
            out[key] = CURRENT if key == "time" else prop["default"]
    if name == "claims_and_sources_context" and out["candidate_k"] < out["k"]:
        raise _invalid("candidate_k cannot be smaller than k")
    return out


def descriptor_hash(op: Operation) -> str:
    return hashlib.sha256(json.dumps(op.input_schema, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------------------
# time
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Validity:
    valid_from: dt.datetime | None
    valid_until: dt.datetime | None
    precision: str
    superseded: bool = False


def holds(v: Validity, scope: TimeScope, now: dt.datetime) -> bool:
    """Does a fact's world window pass the time filter? Unknown bounds are open; a superseded
    fact with no known end counts as ended for current/at."""
    lo = v.valid_from
    hi = v.valid_until
    ended_unknown = v.superseded and hi is None
    if scope.mode == "history":
        return lo is None or lo <= now
    if scope.mode == "overlap":
        assert scope.start is not None and scope.end is not None
        return (lo is None or lo <= scope.end) and (hi is None or hi > scope.start)
    instant = now if scope.mode == "current" else scope.at
    assert instant is not None
    if ended_unknown:
        return False
    return (lo is None or lo <= instant) and (hi is None or hi > instant)


def temporal_match(v: Validity) -> str:
    complete = v.valid_from is not None and (v.valid_until is not None or v.precision == "open")
    return "confirmed" if complete else "possible"


# --------------------------------------------------------------------------------------
# fusion
# --------------------------------------------------------------------------------------

@dataclass
class Fused:
    item_id: uuid.UUID
    score: float = 0.0
    signals: dict[str, float] = field(default_factory=dict)


def rrf(channels: Mapping[str, Sequence[uuid.UUID]], k: int = RRF_K) -> list[Fused]:
    """Reciprocal rank fusion: Σ 1/(k + rank), each channel's contribution kept."""
    fused: dict[uuid.UUID, Fused] = {}
    for channel, ranked in channels.items():
        for rank, item in enumerate(ranked, start=1):
            entry = fused.setdefault(item, Fused(item))
            contribution = 1.0 / (k + rank)
            entry.score += contribution
            entry.signals[channel] = contribution
    return sorted(fused.values(), key=lambda f: (-f.score, str(f.item_id)))


def bm25_idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def validation(field_name: str, message: str, kind: str, value: Any, ctx: dict[str, Any] | None = None
               ) -> ValidationFailed:
    return ValidationFailed([FieldViolation(field_name, message, kind, value, ctx)])


def bounded_int(name: str, value: int | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if value < low:
        raise validation(name, f"Input should be greater than or equal to {low}", "greater_than_equal", value,
                         {"ge": low})
    if value > high:
        raise validation(name, f"Input should be less than or equal to {high}", "less_than_equal", value,
                         {"le": high})
    return value
