"""Every RPC of every service has an implementation, or the contract says it is not built."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from testament.common.v1 import options_pb2
from testament.pipeline.v1 import pipeline_pb2_grpc

from services.graph.api import GraphServicer
from services.ingest.api import IngestServicer
from services.pipeline.api import PipelineServicer
from services.platform import contract
from services.platform.deployment import DeploymentServicer
from services.platform.errors import Unimplemented
from services.platform.server import StartupError, _unimplemented, binding_problems, generic_handler
from services.queryspace.api import QuerySpaceServicer
from services.retrieval.api import RetrievalServicer

# The servicer each composition root binds (services/<svc>/main.py, platform/bootstrap.py).
SERVICERS: dict[str, type] = {
    "deployment": DeploymentServicer,
    "ingest": IngestServicer,
    "pipeline": PipelineServicer,
    "retrieval": RetrievalServicer,
    "graph": GraphServicer,
    "queryspace": QuerySpaceServicer,
}


def test_every_contract_service_has_a_servicer() -> None:
    assert set(SERVICERS) == set(contract.SERVICE_FULL_NAMES)


@pytest.mark.parametrize("name", sorted(SERVICERS))
def test_every_rpc_is_implemented_or_declared_not_built(name: str) -> None:
    descriptor = contract.service(contract.SERVICE_FULL_NAMES[name])
    assert binding_problems(descriptor, SERVICERS[name]) == []


def _pipeline() -> object:
    return contract.service(contract.SERVICE_FULL_NAMES["pipeline"])


def test_a_misspelt_or_missing_rpc_refuses_to_start() -> None:
    class Misspelt(PipelineServicer):
        async def ListDeadLeters(self, request: object, context: object) -> None: ...

    problems = binding_problems(_pipeline(), Misspelt)
    assert problems == ["Misspelt.ListDeadLeters names no RPC of PipelineService"]

    class Partial(pipeline_pb2_grpc.PipelineServiceServicer):
        async def ListDeadLetters(self, request: object, context: object) -> None: ...

    problems = binding_problems(_pipeline(), Partial)
    assert "PipelineService.ReplayDeadLetter has no implementation in Partial" in problems[0]
    with pytest.raises(StartupError):
        generic_handler(_pipeline(), Partial())


def test_a_servicer_not_derived_from_the_generated_base_is_refused() -> None:
    class Loose:
        async def ListDeadLetters(self, request: object, context: object) -> None: ...

    assert binding_problems(_pipeline(), Loose) == [
        "Loose does not derive from the generated PipelineServiceServicer"]


def _declared_not_built() -> object:
    """A one-RPC service whose RPC carries the contract's not_built option."""
    pool = descriptor_pool.DescriptorPool()
    for module in (descriptor_pb2, options_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    file = descriptor_pb2.FileDescriptorProto(
        name="testament/later/v1/later.proto", package="testament.later.v1", syntax="proto3",
        dependency=["testament/common/v1/options.proto", "google/protobuf/descriptor.proto"])
    file.message_type.add(name="Req")
    method = file.service.add(name="LaterService").method.add(
        name="Soon", input_type=".testament.later.v1.Req", output_type=".testament.later.v1.Req")
    method.options.Extensions[options_pb2.not_built] = "arrives with the next contract"
    pool.Add(file)
    return pool.FindServiceByName("testament.later.v1.LaterService")


def test_an_rpc_declared_not_built_answers_unimplemented() -> None:
    service = _declared_not_built()
    method = service.methods_by_name["Soon"]
    assert contract.not_built(method) == "arrives with the next contract"
    assert contract.not_built(_pipeline().methods_by_name["ListDeadLetters"]) is None
    with pytest.raises(Unimplemented) as missing:
        asyncio.run(_unimplemented(method, contract.not_built(method) or "")(None, None))
    assert missing.value.reason == "NOT_BUILT"
    assert "LaterService.Soon is not implemented: arrives with the next contract" in str(missing.value)
