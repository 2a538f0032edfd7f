"""One front door: every RPC of every service through the gateway's two addresses.

Real processes: ingest, pipeline, graph and retrieval, and the gateway in front of them.
Native gRPC on the gateway's gRPC port (the Python SDK with one target); the Connect
protocol (unary and streaming, JSON and binary) and gRPC-Web (binary and text) on its
HTTP port.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from testament import Client, RPCError
from testament.ingest.v1 import ingest_pb2
from testament.pipeline.v1 import pipeline_pb2
from testament.retrieval.v1 import retrieval_pb2

from tests.conftest import clone_database
from tests.support import gateway_stack

NOTE = b"# Kickoff\n\nRavi Shanker owns the billing exporter.\n"
INGEST = "/testament.ingest.v1.IngestService"
RETRIEVAL = "/testament.retrieval.v1.RetrievalService"


@dataclass
class Door:
    http: str
    grpc: str


@pytest.fixture(scope="module")
def door(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    with gateway_stack(clone_database(pg), tmp_path_factory.mktemp("front-door"),
                       ("ingest", "pipeline", "retrieval", "queryspace")) as (url, gateway, _):
        yield Door(url, gateway.address)


def frame(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def unframe(body: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at < len(body):
        flags, size = struct.unpack_from(">BI", body, at)
        out.append((flags, body[at + 5:at + 5 + size]))
        at += 5 + size
    return out


def test_the_python_sdk_reaches_every_service_through_one_grpc_address(door: Door) -> None:
    with Client(door.grpc) as client:
        version = client.upload(NOTE, filename="kickoff.md", source_kind="file", source_ref="front/kickoff")
        reports = list(client.watch_readiness([version.version_id]))  # server streaming, proxied
        assert reports[-1].ready
        resolved = client.retrieval.Resolve(retrieval_pb2.ResolveRequest(name="Ravi Shanker"))
        assert resolved.envelope.entities[0].canonical_name == "Ravi Shanker"
        queue = client.pipeline.InspectQueue(pipeline_pb2.InspectQueueRequest())
        assert queue is not None
        listed = client.ingest.ListDocuments(ingest_pb2.ListDocumentsRequest(limit=10))
        assert version.doc_id in {d.doc_id for d in listed.documents}
        # errors come through whole: code, message and ErrorInfo
        with pytest.raises(RPCError) as raised:
            client.retrieval.HydrateRelation(retrieval_pb2.HydrateRelationRequest(relation_id="not-a-uuid"))
        assert raised.value.code.name == "INVALID_ARGUMENT"


def test_connect_unary_in_json_and_binary_with_errors_as_connect_errors(door: Door) -> None:
    with httpx.Client(base_url=door.http, timeout=30) as http:
        ok = http.post(f"{RETRIEVAL}/Resolve", json={"name": "Ravi Shanker"},
                       headers={"connect-protocol-version": "1"})
        assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"
        assert ok.json()["envelope"]["entities"][0]["canonicalName"] == "Ravi Shanker"

        binary = http.post(f"{RETRIEVAL}/Resolve", content=retrieval_pb2.ResolveRequest(
            name="Ravi Shanker").SerializeToString(), headers={"content-type": "application/proto"})
        assert binary.status_code == 200
        assert retrieval_pb2.ResolveResponse.FromString(binary.content).envelope.entities[0].canonical_name == \
            "Ravi Shanker"

        missing = http.post(f"{RETRIEVAL}/HydrateRelation", json={"relationId": "not-a-uuid"})
        assert missing.status_code == 400
        error = missing.json()
        assert error["code"] == "invalid_argument"
        info = error_details_pb2.ErrorInfo.FromString(base64.b64decode(error["details"][0]["value"] + "=="))
        assert error["details"][0]["type"] == "google.rpc.ErrorInfo" and info.domain == "testament"

        bad = http.post(f"{RETRIEVAL}/Resolve", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
        unknown_field = http.post(f"{RETRIEVAL}/Resolve", json={"name": "x", "no_such_field": 1})
        assert unknown_field.status_code == 400
        # the RememberStack routes are untouched beside it
        assert http.get("/resolve", params={"name": "Ravi Shanker"}).status_code == 200


def test_connect_streams_server_and_client(door: Door) -> None:
    with httpx.Client(base_url=door.http, timeout=60) as http:
        # client streaming: Upload as enveloped messages
        first = ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(
            filename="standup.md", mime="text/markdown", source_kind="file", source_ref="front/standup"))
        body = frame(first.SerializeToString()) + frame(ingest_pb2.UploadRequest(
            chunk=b"# Stand-up\n\nDana Kim owns the ledger service.\n").SerializeToString())
        uploaded = http.post(f"{INGEST}/Upload", content=body, headers={"content-type": "application/connect+proto"})
        assert uploaded.status_code == 200
        (data, end) = unframe(uploaded.content)
        version = ingest_pb2.UploadResponse.FromString(data[1])
        assert version.created and end[0] == 0x02 and json.loads(end[1]) == {}

        # server streaming in JSON: readiness reports until ready, then the end of the stream
        request = {"versionIds": [version.version_id],
                   "require": {"pipeline": True, "p1": True, "liveGraph": True, "p3": False}}
        with http.stream("POST", f"{INGEST}/WatchReadiness", content=frame(json.dumps(request).encode()),
                         headers={"content-type": "application/connect+json"}) as streamed:
            assert streamed.status_code == 200
            raw = b"".join(streamed.iter_bytes())
        frames = unframe(raw)
        reports = [json.loads(p)["report"] for flags, p in frames if flags == 0]
        assert reports and reports[-1]["ready"] is True, frames
        assert frames[-1][0] == 0x02 and json.loads(frames[-1][1]) == {}

        # a stream that fails ends with the error in the end-stream message (HTTP 200)
        bad = {"versionIds": ["not-a-uuid"], "require": {"pipeline": True}}
        failed = http.post(f"{INGEST}/WatchReadiness", content=frame(json.dumps(bad).encode()),
                           headers={"content-type": "application/connect+json"})
        assert failed.status_code == 200
        end = json.loads(unframe(failed.content)[-1][1])
        assert end["error"]["code"] == "invalid_argument"


def test_grpc_web_binary_and_text(door: Door) -> None:
    with httpx.Client(base_url=door.http, timeout=30) as http:
        request = frame(retrieval_pb2.ResolveRequest(name="Ravi Shanker").SerializeToString())
        reply = http.post(f"{RETRIEVAL}/Resolve", content=request,
                          headers={"content-type": "application/grpc-web+proto", "x-grpc-web": "1"})
        assert reply.status_code == 200
        (data, trailer) = unframe(reply.content)
        assert retrieval_pb2.ResolveResponse.FromString(data[1]).envelope.entities[0].canonical_name == "Ravi Shanker"
        assert trailer[0] == 0x80 and b"grpc-status: 0" in trailer[1]

        text = http.post(f"{RETRIEVAL}/Resolve", content=base64.b64encode(request),
                         headers={"content-type": "application/grpc-web-text"})
        frames = _decode_text(text.content)
        assert retrieval_pb2.ResolveResponse.FromString(frames[0][1]).envelope.entities[0].canonical_name == \
            "Ravi Shanker"

        missing = http.post(f"{RETRIEVAL}/HydrateRelation", content=frame(retrieval_pb2.HydrateRelationRequest(
            relation_id="not-a-uuid").SerializeToString()), headers={"content-type": "application/grpc-web+proto"})
        (trailer,) = unframe(missing.content)
        assert trailer[0] == 0x80 and b"grpc-status: 3" in trailer[1] and b"grpc-status-details-bin" in trailer[1]

        # JSON over gRPC-Web too
        as_json = http.post(f"{RETRIEVAL}/Resolve", content=frame(json_format.MessageToJson(
            retrieval_pb2.ResolveRequest(name="Ravi Shanker")).encode()),
            headers={"content-type": "application/grpc-web+json"})
        assert json.loads(unframe(as_json.content)[0][1])["envelope"]["entities"][0]["canonicalName"] == "Ravi Shanker"


def _decode_text(body: bytes) -> list[tuple[int, bytes]]:
    import re

    return unframe(b"".join(base64.b64decode(seg) for seg in re.findall(rb"[^=]+=*", body)))


def test_what_is_not_a_contract_method_is_left_to_the_routes(door: Door) -> None:
    with httpx.Client(base_url=door.http, timeout=30) as http:
        assert http.post("/testament.retrieval.v1.RetrievalService/NoSuchMethod", json={}).status_code == 404
        # a contract path with a content type that is no protocol of ours: not found either
        assert http.post(f"{RETRIEVAL}/Resolve", content=b"x",
                         headers={"content-type": "text/plain"}).status_code == 404


def test_a_refused_upload_is_its_refusal_even_while_bytes_are_still_being_sent(door: Door) -> None:
    """grpc reports INTERNAL when a service refuses a stream the caller is still writing,
    unless the writer stops at the first failed write and reads the status: 200 racing
    refusals through the RememberStack route all come back as the service's 422."""
    import asyncio
    from collections import Counter

    params = {"filename": "", "mime": "", "versioning_mode": "living", "acl": "AAA"}

    async def go() -> Counter[int]:
        async with httpx.AsyncClient(base_url=door.http, timeout=60) as http:
            replies = await asyncio.gather(*(http.post("/ingest", params=params, content=b"\x89PNG\r\n\x1a\n" * 64)
                                             for _ in range(200)))
        return Counter(r.status_code for r in replies)

    assert asyncio.run(go()) == Counter({422: 200})


def test_the_async_sdk_reaches_every_service_through_one_address(door: Door) -> None:
    import asyncio

    from testament import AsyncClient
    from testament.common.v1 import deployment_pb2
    from testament.graph.v1 import graph_pb2
    from testament.queryspace.v1 import queryspace_pb2

    async def go() -> dict[str, object]:
        async with AsyncClient(door.grpc) as client:
            version = await client.upload(NOTE, filename="kickoff.md", source_kind="file",
                                          source_ref="front/kickoff-async")
            async for report in client.watch_readiness([version.version_id]):
                ready = report.ready
            assert ready
            ravi = (await client.retrieval.Resolve(retrieval_pb2.ResolveRequest(name="Ravi Shanker"))).envelope
            around = await client.graph.Neighborhood(graph_pb2.NeighborhoodRequest(
                entity_id=ravi.entities[0].entity_id, hops=1))
            space = await client.queryspace.DescribeQuerySpace(queryspace_pb2.DescribeQuerySpaceRequest())
            return {
                "deployment": (await client.deployment.CheckHealth(deployment_pb2.CheckHealthRequest())).status,
                "ingest": len((await client.ingest.ListDocuments(ingest_pb2.ListDocumentsRequest(limit=5))).documents),
                "pipeline": (await client.pipeline.InspectQueue(pipeline_pb2.InspectQueueRequest())) is not None,
                "retrieval": ravi.entities[0].canonical_name,
                "graph": any(n.name == "Ravi Shanker" for n in around.envelope.nodes),
                "queryspace": space.schema,
            }

    seen = asyncio.run(go())
    assert seen["deployment"] == "ok" and seen["ingest"] >= 1 and seen["pipeline"] is True
    assert (seen["retrieval"], seen["graph"], seen["queryspace"]) == ("Ravi Shanker", True, "memory_v1")


@pytest.mark.parametrize("method, path, body, headers", [
    ("POST", "/operations/facts_context", b"{not json", {"content-type": "application/json"}),
    ("POST", "/operations/facts_context", b'{"query": 7}', {"content-type": "application/json"}),
    ("POST", "/operations/facts_context", b'{"query": "x", "surprise": 1}', {"content-type": "application/json"}),
    ("POST", "/operations/facts_context", b'{"query": "\xff\xfe"}', {"content-type": "application/json"}),
    ("GET", "/hydrate/relation/..%2F..%2Fetc%2Fpasswd", None, {}),
    ("GET", "/hydrate/relation/not-a-uuid", None, {}),
    ("DELETE", "/documents/..%2Fdocuments", None, {}),
    ("GET", "/resolve?name=x", None, {"x-big": "y" * 40_000}),
    ("POST", f"{RETRIEVAL}/Resolve", b"\xff\xfe\x00", {"content-type": "application/json"}),
    ("POST", f"{RETRIEVAL}/Resolve", b"\x00\x00\x00\x00\x09garbage!!", {"content-type": "application/grpc-web+proto"}),
])
def test_bad_input_is_a_clear_4xx_at_the_door(door: Door, method: str, path: str, body: bytes | None,
                                              headers: dict[str, str]) -> None:
    reply = httpx.request(method, f"{door.http}{path}", content=body, headers=headers, timeout=30)
    if headers.get("content-type", "").startswith("application/grpc-web"):
        (trailer,) = unframe(reply.content)[-1:]
        assert trailer[0] == 0x80 and b"grpc-status: 3" in trailer[1], reply.content  # INVALID_ARGUMENT
        return
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    assert "detail" in reply.json() or "code" in reply.json()
