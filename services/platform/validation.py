"""Request validation against the contract's ``buf.validate`` rules, for every RPC at once.

The field limits and formats live in the protos (``(buf.validate.field)`` options);
:class:`ValidationInterceptor` checks each request message with protovalidate before the
servicer runs, and a refusal is the same 422 list the hand checks used to raise
(:class:`~services.platform.errors.ValidationFailed`, reason ``VALIDATION_FAILED``, one
``google.rpc.BadRequest`` field violation per rule broken), in the pydantic wording
RememberStack's routes answer with. Checks that are not field rules (pairs of fields,
lookups, the route's own wording) stay in the domain code.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import protovalidate
from buf.validate import validate_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from services.platform.errors import FieldViolation, ValidationFailed

_validator = protovalidate.Validator()
# pydantic's words for a malformed UUID, as RememberStack's routes answer them.
UUID_MESSAGE = ("Input should be a valid UUID, invalid character: expected an optional prefix of `urn:uuid:` "
                "followed by [0-9a-fA-F-], found `x` at 1")
_INTEGERS = ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
             "sfixed64")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _rules(message: Message, path: list[str]) -> tuple[FieldDescriptor | None, validate_pb2.FieldRules]:
    """The descriptor and rules of the field at ``path`` (names; list indexes skipped)."""
    descriptor: Any = message.DESCRIPTOR
    field: Any = None
    for name in path:
        if descriptor is None or name not in descriptor.fields_by_name:
            continue  # a list index or map key
        field = descriptor.fields_by_name[name]
        descriptor = field.message_type
    if field is None:
        return None, validate_pb2.FieldRules()
    return field, field.GetOptions().Extensions[validate_pb2.field]


def _value(message: Message, path: list[str]) -> Any:
    """The value at ``path`` in ``message`` (names only, as for a repeated field itself)."""
    value: Any = message
    for name in path:
        value = getattr(value, name)
    return value


def _bounds(rules: validate_pb2.FieldRules) -> tuple[int | None, int | None]:
    kind = rules.WhichOneof("type")
    if kind not in _INTEGERS:
        return None, None
    typed = getattr(rules, kind)
    low = typed.gte if typed.HasField("gte") else (typed.gt + 1 if typed.HasField("gt") else None)
    high = typed.lte if typed.HasField("lte") else (typed.lt - 1 if typed.HasField("lt") else None)
    return low, high


def violation(message: Message, found: protovalidate.Violation) -> FieldViolation:
    """One protovalidate violation as the pydantic-shaped item the gateway answers with."""
    proto = validate_pb2.Violation.FromString(found.proto.to_binary())  # the engine's runtime → ours
    elements = proto.field.elements
    names = [e.field_name for e in elements]
    dotted = ".".join(f"{e.field_name}.{e.index}" if e.HasField("index") else e.field_name for e in elements)
    field, rules = _rules(message, names)
    if elements and elements[-1].HasField("index"):  # one item of a list: the items' rules
        rules = rules.repeated.items
    value = found.field_value
    rule = proto.rule_id
    if rule == "required":
        return FieldViolation(dotted, "Field required", "missing", None)
    if rule.endswith(".uuid") or rule.endswith(".uuid_empty"):
        return FieldViolation(dotted, UUID_MESSAGE, "uuid_parsing", value)
    if rule == "string.min_len":
        n = rules.string.min_len
        return FieldViolation(dotted, f"String should have at least {_plural(n, 'character')}", "string_too_short",
                              value, {"min_length": n})
    if rule == "string.max_len":
        n = rules.string.max_len
        return FieldViolation(dotted, f"String should have at most {_plural(n, 'character')}", "string_too_long",
                              len(value), {"max_length": n})  # its length: the text itself can be long
    if rule == "string.pattern":
        pattern = rules.string.pattern
        return FieldViolation(dotted, f"String should match pattern '{pattern}'", "string_pattern_mismatch", value,
                              {"pattern": pattern})
    if rule in ("repeated.min_items", "repeated.max_items"):
        count = len(_value(message, names))  # the input echoed is its length: a list can be long
        if rule == "repeated.min_items":
            n = rules.repeated.min_items
            return FieldViolation(dotted, f"List should have at least {_plural(n, 'item')} after validation, "
                                  f"not {count}", "too_short", count,
                                  {"field_type": "List", "min_length": n, "actual_length": count})
        n = rules.repeated.max_items
        return FieldViolation(dotted, f"List should have at most {_plural(n, 'item')} after validation, "
                              f"not {count}", "too_long", count,
                              {"field_type": "List", "max_length": n, "actual_length": count})
    if rule.startswith("enum.") and field is not None and field.enum_type is not None:
        allowed = ", ".join(v.name for v in field.enum_type.values if v.number != 0)
        return FieldViolation(dotted, f"Input should be one of {allowed}", "enum", value)
    low, high = _bounds(rules)
    if isinstance(value, int) and low is not None and value < low:
        return FieldViolation(dotted, f"Input should be greater than or equal to {low}", "greater_than_equal",
                              value, {"ge": low})
    if isinstance(value, int) and high is not None and value > high:
        return FieldViolation(dotted, f"Input should be less than or equal to {high}", "less_than_equal",
                              value, {"le": high})
    return FieldViolation(dotted, proto.message or rule, "value_error", value)


# What a service checks beyond the rules for one request type (a pair of fields, a parsed
# text), consulted only when a rule is broken so that one 422 still lists every bad field.
ProblemsOf = Callable[[Any], list[FieldViolation]]
_ALSO: dict[str, ProblemsOf] = {}


def also_check(request_type: type[Message], problems_of: ProblemsOf) -> None:
    """Register the domain's own checks of ``request_type`` to report beside broken rules."""
    _ALSO[request_type.DESCRIPTOR.full_name] = problems_of


def _merged(message: Message, rules: list[FieldViolation], more: list[FieldViolation]) -> list[FieldViolation]:
    """``more`` placed among ``rules`` by field number, kept together in its own order."""
    if not more:
        return rules
    fields = message.DESCRIPTOR.fields_by_name

    def number(v: FieldViolation) -> int:
        top = fields.get(v.field.split(".")[0])
        return top.number if top is not None else 0

    at = min(number(v) for v in more)
    cut = next((i for i, v in enumerate(rules) if number(v) > at), len(rules))
    return [*rules[:cut], *more, *rules[cut:]]


# A refusal travels in the status trailer, which gRPC caps at 8 KiB: a refused text (a
# malformed id of any size) is echoed by its head, and at most MAX_VIOLATIONS are listed
# (1,000 malformed ids are named by their first few, not by a 429 for an oversized trailer).
ECHO_MAX_CHARS = 100
MAX_VIOLATIONS = 10


def _echoed(problem: FieldViolation) -> FieldViolation:
    if isinstance(problem.input, str) and len(problem.input) > ECHO_MAX_CHARS:
        return FieldViolation(problem.field, problem.message, problem.type, problem.input[:ECHO_MAX_CHARS] + "…",
                              problem.ctx)
    return problem


def check(message: Message) -> None:
    """Raise :class:`ValidationFailed` naming every field of ``message`` that breaks its rules."""
    found = _validator.collect_violations(message)
    if found:
        problems = [_echoed(violation(message, v)) for v in found[:MAX_VIOLATIONS]]
        also = _ALSO.get(message.DESCRIPTOR.full_name)
        raise ValidationFailed(_merged(message, problems, also(message)) if also else problems)


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        check(request)
        yield request


async def _results(result: Any) -> AsyncIterator[Any]:
    if inspect.isasyncgen(result):
        async for item in result:
            yield item
    else:  # a behaviour that writes with context.write()
        await result


def _validating(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """The same handler with every request message checked first (grpc.aio tells async
    behaviours by their function kind, so each kind gets its own)."""
    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        duplex = handler.stream_stream

        async def both(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for item in _results(duplex(_checked(requests), context)):
                yield item

        return grpc.stream_stream_rpc_method_handler(both, **kwargs)
    if handler.request_streaming:
        upload = handler.stream_unary

        async def uploaded(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            return await upload(_checked(requests), context)

        return grpc.stream_unary_rpc_method_handler(uploaded, **kwargs)
    if handler.response_streaming:
        stream = handler.unary_stream

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            check(request)
            async for item in _results(stream(request, context)):
                yield item

        return grpc.unary_stream_rpc_method_handler(streaming, **kwargs)
    unary = handler.unary_unary

    async def single(request: Any, context: grpc.aio.ServicerContext) -> Any:
        check(request)
        return await unary(request, context)

    return grpc.unary_unary_rpc_method_handler(single, **kwargs)


class ValidationInterceptor(grpc.aio.ServerInterceptor):
    """Checks every request message against its ``buf.validate`` rules before the servicer.
    Innermost of the chain (after auth: an unauthenticated caller learns nothing of the
    rules), inside the error interceptor that turns the refusal into a status."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith("/grpc."):
            return handler
        known = self._wrapped.get(method)
        if known is None or known[0] is not handler:  # wrap each method's handler once
            known = self._wrapped[method] = (handler, _validating(handler))
        return known[1]
