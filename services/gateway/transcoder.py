"""JSON <-> protobuf transcoding driven only by the contract's descriptors.

Routes come from ``google.api.http`` annotations; the JSON shape follows fixed,
generic rules so that every annotated RPC is served without a hand-written
handler:

* JSON key = proto field name; repeated and map fields always print (``[]``/``{}``);
  fields with presence (proto3 ``optional``, message fields) print ``null`` when unset.
* enums print their wire string: the value name without the enum's prefix, lower
  case, unless the value carries ``(testament.common.v1.wire)``.
* a message whose only fields form one ``oneof`` is a union and prints as its set member.
* ``google.protobuf.Timestamp`` prints RFC 3339 UTC (``Z``); Struct/Value/ListValue
  print as plain JSON; 64-bit integers print as JSON numbers.

Request decoding applies the same rules in reverse and reports every problem as a
FastAPI-style validation item (``type``, ``loc``, ``msg``, ``input``).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.api import annotations_pb2, field_behavior_pb2, http_pb2
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import (
    Descriptor,
    FieldDescriptor,
    MethodDescriptor,
    ServiceDescriptor,
)
from google.protobuf.message import Message

from services.platform.wire import enum_wire_names

_WKT_TIMESTAMP = "google.protobuf.Timestamp"
_WKT_JSON = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
_INT_TYPES = {
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}
_FLOAT_TYPES = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def _is_repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated if hasattr(field, "is_repeated") else (
        field.label == FieldDescriptor.LABEL_REPEATED)


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


# --------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------

def _timestamp(msg: Message) -> str:
    seconds = msg.seconds  # type: ignore[attr-defined]
    nanos = msg.nanos  # type: ignore[attr-defined]
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds, microseconds=nanos // 1000)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def _plain_json(value: Any) -> Any:
    """Struct/Value numbers are doubles on the wire: print whole ones as JSON integers."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    return value


def _scalar_encoder(field: FieldDescriptor) -> Callable[[Any], Any]:
    if field.type == FieldDescriptor.TYPE_ENUM:
        to_wire, _ = enum_wire_names(field.enum_type)
        return lambda v: to_wire.get(v)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return encode_message
    if field.type in _FLOAT_TYPES:
        return lambda v: v if math.isfinite(v) else str(v)
    if field.type == FieldDescriptor.TYPE_BYTES:
        import base64

        return lambda v: base64.b64encode(v).decode()
    return lambda v: v


def is_union(descriptor: Descriptor) -> bool:
    """All fields belong to one real (non-synthetic) oneof."""
    oneofs = descriptor.oneofs
    return (
        len(oneofs) == 1
        and not oneofs[0].name.startswith("_")  # proto3 `optional` makes synthetic `_name` oneofs
        and len(oneofs[0].fields) == len(descriptor.fields) > 0
    )


@functools.cache
def _plan(descriptor: Descriptor) -> Callable[[Message], Any]:
    full = descriptor.full_name
    if full == _WKT_TIMESTAMP:
        return _timestamp
    if full in _WKT_JSON:
        return lambda m: _plain_json(json_format.MessageToDict(m))
    if is_union(descriptor):
        oneof = descriptor.oneofs[0].name

        def union(msg: Message) -> Any:
            which = msg.WhichOneof(oneof)
            if which is None:
                return None
            value = getattr(msg, which)
            field = descriptor.fields_by_name[which]
            return _scalar_encoder(field)(value)

        return union

    # Every field printed as if unset (``None`` with presence, the default value without; an
    # empty container for repeated and map fields, made anew per message), then the fields
    # that are set (``ListFields``, in C) over them: a message prints every field, but a
    # field-by-field walk in Python cost most of a large envelope's encoding.
    unset: dict[str, Any] = {}
    containers: list[tuple[str, type]] = []
    encoders: dict[str, Callable[[Any], Any]] = {}
    for field in descriptor.fields:
        name = field.name
        enc = _scalar_encoder(field)
        container = _is_map(field) or _is_repeated(field)  # None holds its place in the printed order
        unset[name] = None if field.has_presence or container else enc(field.default_value)
        if _is_map(field):
            value_enc = _scalar_encoder(field.message_type.fields_by_name["value"])
            containers.append((name, dict))
            encoders[name] = lambda v, e=value_enc: {k: e(x) for k, x in sorted(v.items())}
        elif _is_repeated(field):
            containers.append((name, list))
            encoders[name] = lambda v, e=enc: [e(x) for x in v]
        else:
            encoders[name] = enc

    def encode(msg: Message) -> dict[str, Any]:
        out = dict(unset)
        for name, kind in containers:
            out[name] = kind()
        for field, value in msg.ListFields():
            out[field.name] = encoders[field.name](value)
        return out

    return encode


def encode_message(msg: Message) -> Any:
    return _plan(msg.DESCRIPTOR)(msg)


# --------------------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------------------

@dataclass
class Problem:
    type: str
    loc: tuple[str | int, ...]
    msg: str
    input: Any
    ctx: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"type": self.type, "loc": list(self.loc), "msg": self.msg, "input": self.input}
        if self.ctx:
            item["ctx"] = self.ctx
        return item


class DecodeError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc))}: {p.msg}" for p in problems))


_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


_INT_RANGES = {
    **dict.fromkeys((FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32),
                    (-(2**31), 2**31 - 1)),
    **dict.fromkeys((FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32), (0, 2**32 - 1)),
    **dict.fromkeys((FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64),
                    (-(2**63), 2**63 - 1)),
    **dict.fromkeys((FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64), (0, 2**64 - 1)),
}


def _in_range(field: FieldDescriptor, value: int, raw: Any, loc: tuple[str | int, ...]) -> int:
    """A whole number the field's wire type can hold (else 422, never a 500 from protobuf)."""
    low, high = _INT_RANGES[field.type]
    if value > high:
        raise DecodeError([Problem("less_than_equal", loc, f"Input should be less than or equal to {high}", raw,
                                   {"le": high})])
    if value < low:
        raise DecodeError([Problem("greater_than_equal", loc, f"Input should be greater than or equal to {low}",
                                   raw, {"ge": low})])
    return value


def _coerce_scalar(field: FieldDescriptor, raw: Any, loc: tuple[str | int, ...], *, from_text: bool) -> Any:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        if isinstance(raw, str):
            return raw
        raise DecodeError([Problem("string_type", loc, "Input should be a valid string", raw)])
    if t in _INT_TYPES:
        return _in_range(field, _whole(field, raw, loc), raw, loc)
    return _coerce_other(field, raw, loc)


def _whole(field: FieldDescriptor, raw: Any, loc: tuple[str | int, ...]) -> int:
    """A JSON or text value as a whole number (no bools, no fractions)."""
    if isinstance(raw, bool):
        raise DecodeError([Problem("int_type", loc, "Input should be a valid integer", raw)])
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, float):
        raise DecodeError([Problem("int_from_float", loc,
                                   "Input should be a valid integer, got a number with a fractional part", raw)])
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            raise DecodeError([Problem("int_parsing", loc,
                                       "Input should be a valid integer, unable to parse string as an integer",
                                       raw)]) from None
    raise DecodeError([Problem("int_type", loc, "Input should be a valid integer", raw)])


def _coerce_other(field: FieldDescriptor, raw: Any, loc: tuple[str | int, ...]) -> Any:
    t = field.type
    if t in _FLOAT_TYPES:
        if isinstance(raw, bool):
            raise DecodeError([Problem("float_type", loc, "Input should be a valid number", raw)])
        if isinstance(raw, int | float):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw)
            except ValueError:
                raise DecodeError([Problem("float_parsing", loc,
                                           "Input should be a valid number, unable to parse string as a number",
                                           raw)]) from None
        raise DecodeError([Problem("float_type", loc, "Input should be a valid number", raw)])
    if t == FieldDescriptor.TYPE_BOOL:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        raise DecodeError([Problem("bool_parsing" if isinstance(raw, str) else "bool_type", loc,
                                   "Input should be a valid boolean, unable to interpret input"
                                   if isinstance(raw, str) else "Input should be a valid boolean", raw)])
    if t == FieldDescriptor.TYPE_ENUM:
        _, from_wire = enum_wire_names(field.enum_type)
        if isinstance(raw, str) and raw in from_wire:
            return from_wire[raw]
        allowed = " or ".join(f"'{w}'" for w in from_wire)
        raise DecodeError([Problem("enum" if isinstance(raw, str) else "string_type", loc,
                                   f"Input should be {allowed}", raw, {"expected": allowed})])
    if t == FieldDescriptor.TYPE_BYTES:
        import base64

        try:
            return base64.b64decode(raw, validate=True)
        except Exception:  # noqa: BLE001
            raise DecodeError([Problem("bytes_type", loc, "Input should be valid base64", raw)]) from None
    raise DecodeError([Problem("value_error", loc, "unsupported field type", raw)])  # pragma: no cover


def _fill_field(msg: Message, field: FieldDescriptor, raw: Any, loc: tuple[str | int, ...]) -> None:
    name = field.name
    if _is_map(field):
        if not isinstance(raw, dict):
            raise DecodeError([Problem("dict_type", loc, "Input should be a valid dictionary", raw)])
        value_field = field.message_type.fields_by_name["value"]
        target = getattr(msg, name)
        for key, item in raw.items():
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                decode_into(target[key], item, (*loc, key))
            else:
                target[key] = _coerce_scalar(value_field, item, (*loc, key), from_text=False)
        return
    if _is_repeated(field):
        if not isinstance(raw, list):
            raise DecodeError([Problem("list_type", loc, "Input should be a valid list", raw)])
        problems: list[Problem] = []
        container = getattr(msg, name)
        for index, item in enumerate(raw):
            try:
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    decode_into(container.add(), item, (*loc, index))
                else:
                    container.append(_coerce_scalar(field, item, (*loc, index), from_text=False))
            except DecodeError as exc:
                problems.extend(exc.problems)
        if problems:
            raise DecodeError(problems)
        return
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if raw is None:
            return
        decode_into(getattr(msg, name), raw, loc)
        return
    if raw is None:
        if field.has_presence:
            return  # explicit null = absent
        raise DecodeError([Problem(_NULL_TYPES.get(field.type, "value_error"), loc,
                                   "Input should not be null", raw)])
    setattr(msg, name, _coerce_scalar(field, raw, loc, from_text=False))


_NULL_TYPES = {FieldDescriptor.TYPE_STRING: "string_type", FieldDescriptor.TYPE_BOOL: "bool_type"}


def decode_into(msg: Message, raw: Any, loc: tuple[str | int, ...]) -> None:
    """Fill ``msg`` from a JSON value; unknown keys are refused (``extra_forbidden``)."""
    descriptor = msg.DESCRIPTOR
    full = descriptor.full_name
    if full in _WKT_JSON:
        try:
            json_format.ParseDict(raw, msg)
        except json_format.ParseError:
            expected = "dictionary" if full.endswith("Struct") else "list" if full.endswith("ListValue") else "value"
            raise DecodeError([Problem(f"{expected}_type" if expected != "value" else "value_error", loc,
                                       f"Input should be a valid {expected}", raw)]) from None
        return
    if full == _WKT_TIMESTAMP:
        try:
            json_format.ParseDict(raw, msg)
        except (json_format.ParseError, TypeError):
            raise DecodeError([Problem("datetime_from_date_parsing", loc,
                                       "Input should be a valid datetime", raw)]) from None
        return
    if not isinstance(raw, dict):
        raise DecodeError([Problem("model_attributes_type", loc,
                                   "Input should be a valid dictionary or object to extract fields from", raw)])
    problems: list[Problem] = []
    for key, value in raw.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            problems.append(Problem("extra_forbidden", (*loc, key), "Extra inputs are not permitted", value))
            continue
        try:
            _fill_field(msg, field, value, (*loc, key))
        except DecodeError as exc:
            problems.extend(exc.problems)
    if problems:
        raise DecodeError(problems)


def decode_text_field(msg: Message, field: FieldDescriptor, values: Sequence[str], loc: tuple[str | int, ...]) -> None:
    """A query-string or path parameter (text) into ``field``."""
    if _is_repeated(field):
        _fill_field(msg, field, list(values), loc)
        return
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        raise DecodeError([Problem("value_error", loc, "structured values cannot be passed in the URL",
                                   values[-1])])
    setattr(msg, field.name, _coerce_scalar(field, values[-1], loc, from_text=True))


# --------------------------------------------------------------------------------------
# routes
# --------------------------------------------------------------------------------------

_SEGMENT_RE = re.compile(r"\{([a-z_][a-z0-9_.]*)(?:=[^}]*)?\}")


@dataclass(frozen=True)
class Route:
    http_method: str
    template: str
    pattern: re.Pattern[str]
    path_fields: tuple[str, ...]
    method: MethodDescriptor
    body: str
    response_body: str

    @property
    def service(self) -> ServiceDescriptor:
        return self.method.containing_service

    @property
    def full_method(self) -> str:
        return f"/{self.service.full_name}/{self.method.name}"

    def request_class(self) -> type[Message]:
        return message_factory.GetMessageClass(self.method.input_type)

    def response_class(self) -> type[Message]:
        return message_factory.GetMessageClass(self.method.output_type)

    def loc_for(self, field: str) -> tuple[str | int, ...]:
        """Where a request field came from, for the 422 list (``query``/``body``/``path``)."""
        head = field.split(".")[0]
        parts: tuple[str | int, ...] = tuple(int(p) if p.isdigit() else p for p in field.split("."))
        if head in self.path_fields:
            return ("path", *parts)
        if self.body == "*" or (self.body and head == self.body):
            if self.body not in ("*", "") and head == self.body:
                parts = parts[1:]
            return ("body", *parts)
        return ("query", *parts)


def _compile(template: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    names: list[str] = []
    regex = ""
    pos = 0
    for match in _SEGMENT_RE.finditer(template):
        regex += re.escape(template[pos:match.start()])
        regex += rf"(?P<{match.group(1).replace('.', '__')}>[^/]+)"
        names.append(match.group(1))
        pos = match.end()
    regex += re.escape(template[pos:])
    return re.compile("^" + regex + "$"), tuple(names)


def _bindings(rule: http_pb2.HttpRule) -> list[http_pb2.HttpRule]:
    return [rule, *[_ for b in rule.additional_bindings for _ in _bindings(b)]]


def routes_for(services: Sequence[ServiceDescriptor]) -> list[Route]:
    routes: list[Route] = []
    for service in services:
        for method in service.methods:
            options = method.GetOptions()
            if not options.HasExtension(annotations_pb2.http):
                continue
            for rule in _bindings(options.Extensions[annotations_pb2.http]):
                kind = rule.WhichOneof("pattern")
                if kind is None or kind == "custom":
                    continue
                template = getattr(rule, kind)
                pattern, names = _compile(template)
                routes.append(Route(kind.upper(), template, pattern, names, method,
                                    rule.body, rule.response_body))
    return routes


@dataclass
class Match:
    route: Route
    path_params: dict[str, str]


class Router:
    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = list(routes)
        # Literal templates first, so /chunks/adjacent wins over /chunks/{chunk_id}/...
        self.routes.sort(key=lambda r: (len(r.path_fields), -len(r.template)))

    def match(self, http_method: str, path: str) -> Match | None | str:
        """A match; ``"method_not_allowed"`` when only the method differs; None when no path."""
        path_seen = False
        for route in self.routes:
            found = route.pattern.match(path)
            if not found:
                continue
            path_seen = True
            if route.http_method == http_method:
                params = {name: found.group(name.replace(".", "__")) for name in route.path_fields}
                return Match(route, params)
        return "method_not_allowed" if path_seen else None


def _required(descriptor: Descriptor) -> list[str]:
    names = []
    for field in descriptor.fields:
        behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        if field_behavior_pb2.REQUIRED in behaviors:
            names.append(field.name)
    return names


def decode_text_message(
    msg: Message, values: Mapping[str, Sequence[str]], loc: tuple[str | int, ...],
    *, skip: Sequence[str] = (),
) -> None:
    """Query/path text parameters into ``msg`` (undeclared ones ignored, required checked)."""
    problems: list[Problem] = []
    for name, given in values.items():
        field = msg.DESCRIPTOR.fields_by_name.get(name)
        if field is None or name in skip:
            continue  # undeclared query parameters are ignored, as RememberStack does
        try:
            decode_text_field(msg, field, given, (*loc, name))
        except DecodeError as exc:
            problems.extend(exc.problems)
    for name in _required(msg.DESCRIPTOR):
        if name not in values and name not in skip:
            problems.append(Problem("missing", (*loc, name), "Field required", None))
    if problems:
        raise DecodeError(problems)


def build_request(
    match: Match, query: Mapping[str, Sequence[str]], body: Any, *, has_body: bool
) -> Message:
    """The request message for a matched route; raises DecodeError with every problem."""
    route = match.route
    msg = route.request_class()()
    descriptor = msg.DESCRIPTOR
    problems: list[Problem] = []
    if route.body == "*":
        raw = body if has_body else {}
        try:
            decode_into(msg, raw, ("body",))
        except DecodeError as exc:
            problems.extend(exc.problems)
        if isinstance(raw, dict):
            problems.extend(
                Problem("missing", ("body", name), "Field required", None)
                for name in _required(descriptor)
                if name not in raw and name not in match.path_params
            )
    elif route.body:
        field = descriptor.fields_by_name[route.body]
        raw = body if has_body else {}
        try:
            if field.message_type is not None and field.message_type.full_name == "google.protobuf.Struct" \
                    and not isinstance(raw, dict):
                raise DecodeError([Problem("dict_type", ("body",), "Input should be a valid dictionary", raw)])
            _fill_field(msg, field, raw, ("body",))
        except DecodeError as exc:
            problems.extend(exc.problems)
    for name, value in match.path_params.items():
        try:
            decode_text_field(msg, descriptor.fields_by_name[name], [value], ("path", name))
        except DecodeError as exc:
            problems.extend(exc.problems)
    if route.body != "*":
        skip = (*match.path_params, route.body) if route.body else tuple(match.path_params)
        try:
            decode_text_message(msg, query, ("query",), skip=skip)
        except DecodeError as exc:
            problems.extend(exc.problems)
    if problems:
        raise DecodeError(problems)
    return msg


def encode_response(route: Route, response: Message) -> Any:
    if route.response_body:
        field = response.DESCRIPTOR.fields_by_name[route.response_body]
        value = getattr(response, route.response_body)
        if _is_repeated(field):
            return [_scalar_encoder(field)(v) for v in value]
        if field.has_presence and not response.HasField(route.response_body):
            return None
        return _scalar_encoder(field)(value)
    return encode_message(response)
