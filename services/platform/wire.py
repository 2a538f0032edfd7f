"""Enum wire names shared by the gateway (JSON) and the services that build messages from
the vocabulary they store ("relation", "supports", "T0"…)."""

from __future__ import annotations

import datetime as dt
import functools
import re
from typing import Any

from google.protobuf import timestamp_pb2
from google.protobuf.descriptor import EnumDescriptor
from testament.common.v1 import options_pb2


def _enum_prefix(enum: EnumDescriptor) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


@functools.cache
def enum_wire_names(enum: EnumDescriptor) -> tuple[dict[int, str], dict[str, int]]:
    """Value number ↔ wire string: the value name without the enum's prefix, lower case,
    unless the value carries ``(testament.common.v1.wire)``. UNSPECIFIED has no wire name."""
    prefix = _enum_prefix(enum)
    to_wire: dict[int, str] = {}
    for value in enum.values:
        if value.number == 0:
            continue
        explicit = value.GetOptions().Extensions[options_pb2.wire]
        name = value.name[len(prefix):] if value.name.startswith(prefix) else value.name
        to_wire[value.number] = explicit or name.lower()
    return to_wire, {wire: number for number, wire in to_wire.items()}


def enum_value(enum_type: Any, wire: str) -> Any:
    """The number of a generated enum (e.g. ``types_pb2.Stance``) for its wire string, as
    that enum's ``ValueType``."""
    return enum_type.ValueType(enum_wire_names(enum_type.DESCRIPTOR)[1][wire])


def timestamp(value: dt.datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value.astimezone(dt.UTC))
    return stamp


def optional(message: Any, name: str, default: Any = None) -> Any:
    """A proto3 ``optional`` field's value, or ``default`` when unset."""
    return getattr(message, name) if message.HasField(name) else default
