"""The generic JSON rules of the gateway, on the real contract's messages."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from testament.common.v1 import types_pb2
from testament.ingest.v1 import ingest_pb2
from testament.retrieval.v1 import retrieval_pb2

from services.gateway.transcoder import (
    DecodeError,
    Router,
    build_request,
    encode_message,
    encode_response,
    routes_for,
)
from services.platform import contract


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(routes_for([contract.service(n) for n in contract.SERVICE_FULL_NAMES.values()]))


def _ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def _envelope() -> types_pb2.Envelope:
    scope = types_pb2.TemporalScope(
        current=types_pb2.CurrentTemporalScope(mode="current", evaluated_at=_ts(1_790_000_000),
                                               believed_at=_ts(1_790_000_000, 5000),
                                               identity_regime=types_pb2.IDENTITY_REGIME_CURRENT))
    env = types_pb2.Envelope(grain=types_pb2.GRAIN_FACT, temporal_scope=scope)
    env.freshness.pg_live_ts.CopyFrom(_ts(1_790_000_000))
    env.freshness.p1_written_inline = True
    env.entities.add(entity_id="6f1c3c52-8a47-4a7e-9e4e-1c6a2f0f1b01", canonical_name="Ravi",
                     tier=types_pb2.RESOLUTION_TIER_T0)
    env.negative.kind = types_pb2.NEGATIVE_KIND_KNOWN_EMPTY
    env.negative.explanation = "nothing matched"
    return env


def test_envelope_prints_every_declared_key_and_nothing_else() -> None:
    out = encode_message(_envelope())
    # arrays always present, nullable parts null, union printed as its member
    assert out["facts"] == [] and out["chunks"] == [] and out["pages"] == []
    assert out["truncation"] is None and out["aggregate"] is None
    assert out["temporal_scope"] == {
        "mode": "current", "evaluated_at": "2026-09-21T14:13:20Z",
        "believed_at": "2026-09-21T14:13:20.000005Z", "identity_regime": "current",
    }
    assert out["grain"] == "fact"
    assert out["entities"][0]["tier"] == "T0"  # explicit wire name
    assert out["negative"] == {"kind": "known_empty", "explanation": "nothing matched", "workaround": None}
    assert out["dropped_by_hydration"] == 0


@pytest.mark.skipif(not os.environ.get("REMEMBER_PYTHON"), reason="REMEMBER_PYTHON not set")
def test_the_real_client_models_accept_the_printed_envelope() -> None:
    bundle = types_pb2.ContextBundle(contract="ContextBundle/v2")
    bundle.facts.CopyFrom(_envelope())
    bundle.claims_and_sources.CopyFrom(_envelope())
    bundle.claims_and_sources.grain = types_pb2.GRAIN_EVIDENCE
    payload = json.dumps({"envelope": encode_message(_envelope()), "bundle": encode_message(bundle)})
    script = (
        "import json, sys\nfrom remember.models import Envelope, ContextBundleV2\n"
        "data = json.loads(sys.stdin.read())\n"
        "Envelope.model_validate(data['envelope'], strict=False)\n"
        "ContextBundleV2.model_validate(data['bundle'], strict=False)\nprint('ok')\n"
    )
    result = subprocess.run([os.environ["REMEMBER_PYTHON"], "-c", script], input=payload,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


def test_struct_numbers_print_as_integers_when_whole() -> None:
    value = struct_pb2.Struct()
    value.update({"k": 3, "ratio": 0.5, "nested": [1, 2.0, None]})
    assert encode_message(value) == {"k": 3, "ratio": 0.5, "nested": [1, 2, None]}


def test_literal_routes_win_and_methods_are_checked(router: Router) -> None:
    match = router.match("POST", "/chunks/adjacent")
    assert not isinstance(match, str) and match is not None
    assert match.route.method.name == "AdjacentChunks" and match.path_params == {}
    match = router.match("GET", "/chunks/5b0b8c1e-0000-0000-0000-000000000000/adjacent")
    assert match.path_params == {"chunk_id": "5b0b8c1e-0000-0000-0000-000000000000"}  # type: ignore[union-attr]
    assert router.match("PUT", "/documents") == "method_not_allowed"
    assert router.match("GET", "/nowhere") is None


def test_query_parameters_are_typed_and_repeated(router: Router) -> None:
    match = router.match("GET", "/resolve")
    request = build_request(match, {"name": ["Ravi"], "context_entity_ids": ["a", "b"]},  # type: ignore[arg-type]
                            None, has_body=False)
    assert isinstance(request, retrieval_pb2.ResolveRequest)
    assert request.name == "Ravi" and list(request.context_entity_ids) == ["a", "b"]


def test_bad_input_is_reported_item_by_item(router: Router) -> None:
    match = router.match("POST", "/search/claims")
    with pytest.raises(DecodeError) as info:
        build_request(match, {}, {"query": 5, "k": "ten", "channel": "fuzzy", "extra": 1},  # type: ignore[arg-type]
                      has_body=True)
    problems = {p.loc: p.type for p in info.value.problems}
    assert problems == {
        ("body", "query"): "string_type",
        ("body", "k"): "int_parsing",
        ("body", "channel"): "enum",
        ("body", "extra"): "extra_forbidden",
    }


def test_missing_required_fields_are_named(router: Router) -> None:
    match = router.match("GET", "/resolve")
    with pytest.raises(DecodeError) as info:
        build_request(match, {}, None, has_body=False)  # type: ignore[arg-type]
    assert [(p.type, p.loc) for p in info.value.problems] == [("missing", ("query", "name"))]


def test_integers_follow_json_rules(router: Router) -> None:
    match = router.match("POST", "/graph/neighborhood")
    request = build_request(match, {}, {"entity_id": "x", "hops": 3.0}, has_body=True)  # type: ignore[arg-type]
    assert request.hops == 3  # type: ignore[attr-defined]
    with pytest.raises(DecodeError) as info:
        build_request(match, {}, {"entity_id": "x", "hops": True}, has_body=True)  # type: ignore[arg-type]
    assert info.value.problems[0].type == "int_type"


def test_bare_array_responses(router: Router) -> None:
    match = router.match("GET", "/operations")
    response = retrieval_pb2.ListOperationsResponse()
    op = response.operations.add(name="resolve_entity", description="d", answer_intent="identity",
                                 result_contract=retrieval_pb2.RESULT_CONTRACT_ENVELOPE)
    op.input_schema.update({"type": "object"})
    (item,) = encode_response(match.route, response)  # type: ignore[union-attr]
    assert item["name"] == "resolve_entity" and item["result_contract"] == "envelope"
    assert item["input_schema"] == {"type": "object"}
    assert item["result_schema"] is None and item["mutates"] is None  # unset message → null


def test_the_upload_response_prints_ingested_version() -> None:
    reply = ingest_pb2.UploadResponse(deployment_id="d", doc_id="x", version_id="v",
                                      content_hash="0" * 64, created=True, mime="text/markdown")
    out = encode_message(reply)
    assert out["parked"] is None and out["title"] is None and out["created"] is True


def test_integers_beyond_the_field_type_are_a_422_not_a_crash() -> None:
    from google.protobuf import descriptor_pool

    from services.gateway.transcoder import DecodeError, decode_into
    from services.platform import contract

    contract.load_all()
    cls = descriptor_pool.Default().FindMessageTypeByName("testament.retrieval.v1.SearchClaimsRequest")
    from google.protobuf import message_factory

    message = message_factory.GetMessageClass(cls)()
    with pytest.raises(DecodeError) as raised:
        decode_into(message, {"query": "x", "k": 2**31}, ("body",))
    (problem,) = raised.value.problems
    assert (problem.type, problem.loc, problem.ctx) == ("less_than_equal", ("body", "k"), {"le": 2**31 - 1})
    with pytest.raises(DecodeError):
        decode_into(message_factory.GetMessageClass(cls)(), {"query": "x", "k": -(2**31) - 1}, ("body",))
