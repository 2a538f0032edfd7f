"""`GET /openapi.json`: an OpenAPI 3.1 document generated at start-up from the contract.

Routes come from the same ``google.api.http`` annotations the transcoder serves, and
schemas follow the transcoder's JSON rules (services/gateway/transcoder.py), so the
document describes exactly what the gateway answers:

* responses print every field: repeated as arrays, maps as objects, fields with presence
  (proto3 ``optional`` and messages) as their value or ``null``; no undeclared keys;
* requests may leave out any field the contract does not mark REQUIRED and may send
  ``null`` for fields with presence; unknown keys are refused (422);
* enums are their wire strings, Timestamp is an RFC 3339 string, Struct/Value/ListValue
  are plain JSON, a one-``oneof`` message is a union of its members.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.api import field_behavior_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from services.gateway.transcoder import Route, _is_map, _is_repeated, is_union
from services.platform.wire import enum_wire_names

_INTS = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32,
         FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32}
_LONGS = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64,
          FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64}

_DETAIL = {"type": "object", "properties": {"detail": {}}, "required": ["detail"]}
# 422: the validation list, or RememberStack's named refusals (a sentence, or {code, message}).
_VALIDATION = {"type": "object", "required": ["detail"], "properties": {"detail": {"anyOf": [
    {"type": "array", "items": {"type": "object", "required": ["type", "loc", "msg"],
                                "properties": {"type": {"type": "string"}, "loc": {"type": "array"},
                                               "msg": {"type": "string"}, "input": {}, "ctx": {}}}},
    {"type": "string"},
    {"type": "object", "required": ["code", "message"]}]}}}


def _required(field: FieldDescriptor) -> bool:
    behaviours = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
    return field_behavior_pb2.REQUIRED in behaviours



def _message(field: FieldDescriptor) -> Descriptor:
    """The message type of a message (or map) field."""
    assert field.message_type is not None, field.full_name
    return field.message_type

class _Schemas:
    """Component schemas, one per (message, direction)."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, descriptor: Descriptor, direction: str) -> dict[str, Any]:
        name = f"{descriptor.full_name}.{direction}"
        if name not in self.components:
            self.components[name] = {}  # placeholder first: messages may recurse
            self.components[name] = self._message(descriptor, direction)
        return {"$ref": f"#/components/schemas/{name}"}

    def _message(self, descriptor: Descriptor, direction: str) -> dict[str, Any]:
        full = descriptor.full_name
        if full == "google.protobuf.Timestamp":
            return {"type": "string", "format": "date-time"}
        if full == "google.protobuf.Struct":
            return {"type": "object"}
        if full == "google.protobuf.ListValue":
            return {"type": "array"}
        if full == "google.protobuf.Value":
            return {}
        if is_union(descriptor):
            members = [self.field(f, direction) for f in descriptor.oneofs[0].fields]
            return {"anyOf": [*members, {"type": "null"}]} if direction == "out" else {"anyOf": members}
        properties = {f.name: self.field(f, direction) for f in descriptor.fields}
        schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        required = ([f.name for f in descriptor.fields] if direction == "out"
                    else [f.name for f in descriptor.fields if _required(f)])
        if required:
            schema["required"] = required
        return schema

    def field(self, field: FieldDescriptor, direction: str) -> dict[str, Any]:
        if _is_map(field):
            value = self.scalar(_message(field).fields_by_name["value"], direction)
            return {"type": "object", "additionalProperties": value}
        if _is_repeated(field):
            return {"type": "array", "items": self.scalar(field, direction)}
        schema = self.scalar(field, direction)
        if field.has_presence or field.type == FieldDescriptor.TYPE_ENUM and direction == "out":
            return {"anyOf": [schema, {"type": "null"}]}
        return schema

    def scalar(self, field: FieldDescriptor, direction: str) -> dict[str, Any]:
        t = field.type
        if t == FieldDescriptor.TYPE_MESSAGE:
            return self.ref(_message(field), direction)
        if t == FieldDescriptor.TYPE_ENUM:
            return {"type": "string", "enum": sorted(enum_wire_names(field.enum_type)[1])}
        if t in _INTS:
            return {"type": "integer", "format": "int32"} if direction == "out" else {
                "type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
        if t in _LONGS:
            return {"type": "integer", "format": "int64"}
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            # NaN and infinities print as strings
            return {"anyOf": [{"type": "number"}, {"type": "string"}]} if direction == "out" else {"type": "number"}
        if t == FieldDescriptor.TYPE_BOOL:
            return {"type": "boolean"}
        if t == FieldDescriptor.TYPE_BYTES:
            return {"type": "string", "contentEncoding": "base64"}
        return {"type": "string"}


def _operation(route: Route, schemas: _Schemas) -> dict[str, Any]:
    request = route.method.input_type
    response = route.method.output_type
    op: dict[str, Any] = {
        "operationId": f"{route.method.containing_service.name}.{route.method.name}.{route.http_method.lower()}",
        "tags": [route.method.containing_service.full_name.split(".")[1]],
        "summary": route.method.name,
        "parameters": [],
        "responses": {"422": {"description": "validation failed",
                              "content": {"application/json": {"schema": _VALIDATION}}},
                      "default": {"description": "an error ({\"detail\": …})",
                                  "content": {"application/json": {"schema": _DETAIL}}}},
    }
    for name in route.path_fields:
        op["parameters"].append({"name": name, "in": "path", "required": True, "schema": {"type": "string"}})
    if route.method.client_streaming:  # POST /ingest: options in the query, bytes in the body
        options = _message(request.fields_by_name["options"])
        for field in options.fields:
            if field.name in ("principal_kind", "principal_ref", "expected_size"):
                continue
            op["parameters"].append({"name": field.name, "in": "query", "required": _required(field),
                                     "schema": _query_schema(field, schemas)})
        op["requestBody"] = {"required": True, "content": {"application/octet-stream": {
            "schema": {"type": "string", "format": "binary"}}}}
    elif route.body == "*":
        op["requestBody"] = {"required": any(_required(f) for f in request.fields),
                             "content": {"application/json": {"schema": schemas.ref(request, "in")}}}
    else:
        if route.body:
            body_field = request.fields_by_name[route.body]
            op["requestBody"] = {"required": _required(body_field), "content": {"application/json": {
                "schema": schemas.field(body_field, "in")}}}
        for field in request.fields:
            if field.name in route.path_fields or field.name == route.body:
                continue
            if field.type == FieldDescriptor.TYPE_MESSAGE and not _is_repeated(field):
                continue  # structured values cannot travel in the URL
            op["parameters"].append({"name": field.name, "in": "query", "required": _required(field),
                                     "schema": _query_schema(field, schemas),
                                     **({"explode": True} if _is_repeated(field) else {})})
    if route.response_body:
        body = schemas.field(response.fields_by_name[route.response_body], "out")
    else:
        body = schemas.ref(response, "out")
    op["responses"]["200"] = {"description": "OK", "content": {"application/json": {"schema": body}}}
    return op


def _query_schema(field: FieldDescriptor, schemas: _Schemas) -> dict[str, Any]:
    if _is_repeated(field):
        return {"type": "array", "items": schemas.scalar(field, "in")}
    return schemas.scalar(field, "in")


def document(routes: Sequence[Route], *, version: str) -> dict[str, Any]:
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.template, {})[route.http_method.lower()] = _operation(route, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Testament", "version": version,
                 "description": "RememberStack's HTTP API served by Testament's gateway, generated from the "
                                "protobuf contract. Every RPC is also reachable at POST /<package>.<Service>/"
                                "<Method> through the Connect protocol and gRPC-Web."},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(schemas.components.items()))},
    }
