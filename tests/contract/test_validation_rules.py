"""Every buf.validate rule of the contract is enforced: one case per declared rule, generated
from the descriptors.

The cases walk each RPC's request message (and the messages it nests), build a request that
satisfies every rule, check that it passes, then break one rule at a time and check that the
validation the server interceptor runs (services/platform/validation.py) refuses it naming
that field, in the 422 shape the gateway answers with. A rule kind this file cannot build a
value for fails here, so a new kind of rule cannot go untested.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from buf.validate import validate_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from services.platform import contract
from services.platform.errors import ValidationFailed
from services.platform.validation import check

Setter = Callable[[Message], None]
KNOWN_STRING = {"uuid", "min_len", "max_len", "pattern", "example"}
KNOWN_INT = {"gte", "lte", "gt", "lt"}


def _rules(field: FieldDescriptor) -> validate_pb2.FieldRules:
    return field.GetOptions().Extensions[validate_pb2.field]


def _set_fields(rules: Message) -> set[str]:
    return {f.name for f, _ in rules.ListFields()}


def _valid_scalar(field: FieldDescriptor, rules: validate_pb2.FieldRules) -> Any:
    kind = rules.WhichOneof("type")
    if field.type == FieldDescriptor.TYPE_STRING:
        string = rules.string
        unknown = _set_fields(string) - KNOWN_STRING if kind == "string" else set()
        assert not unknown, f"{field.full_name}: no value generator for string rules {unknown}"
        if string.uuid:
            return str(uuid.uuid4())
        if string.pattern:
            assert string.example, f"{field.full_name}: a pattern rule must carry an example value"
            return string.example[0]
        return "a" * max(string.min_len, 1)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return next(v.number for v in field.enum_type.values if v.number != 0)
    if field.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64):
        typed = getattr(rules, kind) if kind else None
        if typed is not None:
            unknown = _set_fields(typed) - KNOWN_INT
            assert not unknown, f"{field.full_name}: no value generator for integer rules {unknown}"
            if typed.HasField("gte"):
                return typed.gte
            if typed.HasField("gt"):
                return typed.gt + 1
        return 1
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    raise AssertionError(f"{field.full_name}: no value generator for a {field.type} field with rules")


def _has_rules(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    for field in descriptor.fields:
        if _set_fields(_rules(field)):
            return True
        if field.message_type is not None and field.message_type.full_name not in seen:
            if _has_rules(field.message_type, seen | {descriptor.full_name}):
                return True
    return False


def _fill(message: Message) -> None:
    """Give every field that carries rules (or nests some) a value satisfying them."""
    for field in message.DESCRIPTOR.fields:
        rules = _rules(field)
        if field.message_type is not None and not field.is_repeated:
            if _has_rules(field.message_type) and (field.containing_oneof is None
                                                    or message.WhichOneof(field.containing_oneof.name) is None):
                _fill(getattr(message, field.name))
            continue
        if not _set_fields(rules):
            continue
        if field.is_repeated:
            items = rules.repeated.items
            getattr(message, field.name).extend(
                [_valid_scalar(field, items)] * max(rules.repeated.min_items, 1))
        elif field.containing_oneof is None or message.WhichOneof(field.containing_oneof.name) is None:
            setattr(message, field.name, _valid_scalar(field, rules))


@dataclass(frozen=True)
class Case:
    rpc: str
    rule: str
    field: str  # the violation's field path
    request: type[Message]
    path: tuple[str, ...]  # how to reach the message holding the field
    breaker: Callable[[Message], None]
    bound: int | None  # the rule's number, which the refusal's message must state

    def build(self) -> Message:
        request = self.request()
        _fill(request)
        target = request
        for name in self.path:
            target = getattr(target, name)
        self.breaker(target)
        return request


def _breakers(field: FieldDescriptor) -> Iterator[tuple[str, str, Callable[[Message], None], int | None]]:
    """(rule, violation field suffix, a function breaking that rule, the rule's number if it
    has one) for each rule of ``field``."""
    rules = _rules(field)
    name = field.name
    if rules.required:
        yield "required", name, lambda m: m.ClearField(name), None
    if field.is_repeated:
        rep = rules.repeated
        if rep.HasField("max_items"):
            yield "repeated.max_items", name, lambda m: getattr(m, name).extend(
                [getattr(m, name)[0]] * (rep.max_items + 1 - len(getattr(m, name)))), rep.max_items
        if rep.HasField("min_items") and rep.min_items > 0:
            yield "repeated.min_items", name, lambda m: m.ClearField(name), rep.min_items
        items = rep.items
        if items.string.uuid:
            def bad_item(m: Message) -> None:
                getattr(m, name)[0] = "not-a-uuid"
            yield "items.string.uuid", f"{name}.0", bad_item, None
        if items.string.HasField("max_len"):
            def long_item(m: Message) -> None:
                getattr(m, name)[0] = "a" * (items.string.max_len + 1)
            yield "items.string.max_len", f"{name}.0", long_item, items.string.max_len
        if items.string.HasField("min_len") and items.string.min_len > 0:
            def short_item(m: Message) -> None:
                getattr(m, name)[0] = "a" * (items.string.min_len - 1)
            yield "items.string.min_len", f"{name}.0", short_item, items.string.min_len
        return
    kind = rules.WhichOneof("type")
    if kind == "string":
        string = rules.string
        if string.uuid:
            yield "string.uuid", name, lambda m: setattr(m, name, "not-a-uuid"), None
        if string.HasField("max_len"):
            yield "string.max_len", name, lambda m: setattr(m, name, "a" * (string.max_len + 1)), string.max_len
        if string.HasField("min_len") and string.min_len > 0:
            yield "string.min_len", name, lambda m: setattr(m, name, "a" * (string.min_len - 1)), string.min_len
        if string.pattern:
            yield "string.pattern", name, lambda m: setattr(m, name, "\u00e9 not it"), None
    elif kind in ("int32", "int64"):
        typed = getattr(rules, kind)
        if typed.HasField("gte"):
            yield f"{kind}.gte", name, lambda m: setattr(m, name, typed.gte - 1), typed.gte
        if typed.HasField("lte"):
            yield f"{kind}.lte", name, lambda m: setattr(m, name, typed.lte + 1), typed.lte
    elif kind == "enum":
        if rules.enum.defined_only:
            yield "enum.defined_only", name, lambda m: setattr(m, name, 9999), None
        if 0 in rules.enum.not_in:
            yield "enum.not_in", name, lambda m: setattr(m, name, 0), None


def _walk(rpc: str, request: type[Message], descriptor: Descriptor, path: tuple[str, ...],
          prefix: str) -> Iterator[Case]:
    for field in descriptor.fields:
        for rule, suffix, breaker, bound in _breakers(field):
            yield Case(rpc, rule, prefix + suffix, request, path, breaker, bound)
        if field.message_type is not None and not field.is_repeated and _has_rules(field.message_type):
            yield from _walk(rpc, request, field.message_type, (*path, field.name), f"{prefix}{field.name}.")


def _cases() -> list[Case]:
    return [case for full_name in contract.SERVICE_FULL_NAMES.values()
            for method in contract.service(full_name).methods
            for case in _walk(method.full_name, GetMessageClass(method.input_type), method.input_type, (), "")]


CASES = _cases()


def test_the_contract_declares_rules() -> None:
    rpcs = {case.rpc for case in CASES}
    assert len(CASES) >= 10 and len(rpcs) >= 5, sorted(rpcs)


@pytest.mark.parametrize("request_type", sorted({c.request for c in CASES}, key=lambda t: t.DESCRIPTOR.full_name),
                         ids=lambda t: t.DESCRIPTOR.name)
def test_a_request_within_every_rule_passes(request_type: type[Message]) -> None:
    request = request_type()
    _fill(request)
    check(request)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rpc.split('.')[-1]}:{c.field}:{c.rule}")
def test_each_rule_refuses_naming_the_field(case: Case) -> None:
    request = case.build()
    with pytest.raises(ValidationFailed) as refused:
        check(request)
    fields = [v.field for v in refused.value.violations]
    assert case.field in fields, (case.rule, fields)
    violation = next(v for v in refused.value.violations if v.field == case.field)
    assert violation.type != "value_error", f"{case.rule}: no pydantic type for it ({violation.message})"
    assert violation.message
    if case.bound is not None:
        assert str(case.bound) in violation.message, (case.rule, violation.message)


def test_a_refusal_stays_small_enough_for_the_status_trailer() -> None:
    from testament.ingest.v1 import ingest_pb2

    from services.platform.interceptors import validation_status
    from services.platform.validation import MAX_VIOLATIONS

    request = ingest_pb2.GetReadinessRequest(version_ids=["x" * 5000] * 1000)
    with pytest.raises(ValidationFailed) as refused:
        check(request)
    assert len(refused.value.violations) == MAX_VIOLATIONS
    assert refused.value.violations[0].field == "version_ids.0"
    status = validation_status(refused.value.violations)
    assert len(status.SerializeToString()) + len(status.message) < 8192  # the trailer and grpc-message
