"""Cell encoding: one JSON shape per SQL type, decided by the type alone, never by the value.

- SQL NULL → null, and nothing else is null.
- smallint/integer, real/double precision → numbers; NaN and ±infinity → "NaN", "inf", "-inf".
- bigint and numeric → exact decimal strings (a 64-bit integer or a wide decimal does not
  survive a JSON number; a wire type that changed with the value would break typed clients).
- timestamps → ISO 8601 (with tz: UTC, ``+00:00``); dates and times ISO 8601;
  intervals → ISO 8601 durations; bytea → padded base64.
- arrays → JSON arrays (elements by the element type); jsonb/json → the JSON value;
  composites → JSON objects; everything else → its text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import uuid
from typing import Any

# asyncpg type name → PostgreSQL's display name (format_type).
DISPLAY = {
    "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real", "float8": "double precision",
    "bool": "boolean", "timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone",
    "varchar": "character varying", "bpchar": "character", "timetz": "time with time zone",
    "time": "time without time zone",
}
_NUMBER = frozenset({"int2", "int4", "float4", "float8", "oid"})
_EXACT = frozenset({"int8", "numeric"})


def display_type(name: str, element: str | None = None) -> str:
    if element is not None:
        return f"{DISPLAY.get(element, element)}[]"
    return DISPLAY.get(name, name)


def _float(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def iso_duration(value: dt.timedelta) -> str:
    total_us = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
    sign = "-" if total_us < 0 else ""
    total_us = abs(total_us)
    days, rest = divmod(total_us, 86_400_000_000)
    hours, rest = divmod(rest, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, micros = divmod(rest, 1_000_000)
    out = f"{sign}P{days}D" if days else f"{sign}P"
    if hours or minutes or seconds or micros or not days:
        out += "T"
        if hours:
            out += f"{hours}H"
        if minutes:
            out += f"{minutes}M"
        if seconds or micros or not (hours or minutes):
            out += f"{seconds}.{micros:06d}S".replace(".000000S", "S") if micros else f"{seconds}S"
    return out


def encode(value: Any, type_name: str, element: str | None = None) -> Any:
    """One cell. ``type_name`` is the asyncpg type name (``int8``, ``timestamptz``, ``_text``…)."""
    if value is None:
        return None
    if element is not None:
        return [encode(v, element) for v in value]
    if type_name in _NUMBER:
        return _float(float(value)) if isinstance(value, float) else value
    if type_name in _EXACT:
        if isinstance(value, decimal.Decimal):
            return "NaN" if value.is_nan() else format(value, "f")
        return str(value)
    if type_name == "bool":
        return bool(value)
    if type_name in ("jsonb", "json"):
        return json.loads(value) if isinstance(value, str) else value
    return python_value(value)


def python_value(value: Any) -> Any:
    """The same rules by the decoded Python type, for values without a known SQL type
    (record fields)."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, decimal.Decimal):
        return "NaN" if value.is_nan() else format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return iso_duration(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, list | tuple):
        return [python_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): python_value(v) for k, v in value.items()}
    if hasattr(value, "items"):  # asyncpg.Record (a composite)
        return {str(k): python_value(v) for k, v in value.items()}
    return str(value)


def row_bytes(row: list[Any]) -> int:
    return len(json.dumps(row, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode())
