"""The SDK retries only where the contract says a repeat is safe, honouring RetryInfo,
against a real gRPC server whose first answers are refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from google.protobuf import any_pb2, descriptor_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from testament import AsyncClient, Client, RPCError
from testament.common.v1 import deployment_pb2, deployment_pb2_grpc

from services.platform import contract

_SAFE = (descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS, descriptor_pb2.MethodOptions.IDEMPOTENT)


def test_every_rpc_declares_its_idempotency_level() -> None:
    for full_name in contract.SERVICE_FULL_NAMES.values():
        for method in contract.service(full_name).methods:
            assert method.GetOptions().HasField("idempotency_level"), method.full_name
            if method.GetOptions().Extensions[contract.options_pb2.scope] == contract.options_pb2.SCOPE_READ:
                assert method.GetOptions().idempotency_level in _SAFE, method.full_name


def _refusal(code: int, reason: str, delay_s: int | None) -> grpc.Status:
    details = []
    for item in [error_details_pb2.ErrorInfo(reason=reason, domain="testament"),
                 *([error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=delay_s))]
                   if delay_s is not None else [])]:
        holder = any_pb2.Any()
        holder.Pack(item)
        details.append(holder)
    return rpc_status.to_status(status_pb2.Status(code=code, message=reason, details=details))


class _Flaky(deployment_pb2_grpc.DeploymentServiceServicer):
    """Refuses the first ``failures`` calls of each RPC with ``refusal``, then answers."""

    def __init__(self, failures: int, refusal: grpc.Status) -> None:
        self.failures, self.refusal = failures, refusal
        self.calls: dict[str, int] = {}

    def _count(self, name: str, context: grpc.ServicerContext) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] <= self.failures:
            context.abort_with_status(self.refusal)

    def CheckHealth(self, request, context):  # type: ignore[no-untyped-def] # noqa: N802
        self._count("CheckHealth", context)
        return deployment_pb2.CheckHealthResponse(status="ok")

    def CreateKey(self, request, context):  # type: ignore[no-untyped-def] # noqa: N802
        self._count("CreateKey", context)
        return deployment_pb2.CreateKeyResponse()


@pytest.fixture()
def flaky(request: pytest.FixtureRequest) -> Iterator[tuple[str, _Flaky]]:
    failures, code, reason, delay = request.param
    servicer = _Flaky(failures, _refusal(code, reason, delay))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    deployment_pb2_grpc.add_DeploymentServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(None)


@pytest.mark.parametrize("flaky", [(2, code_pb2.UNAVAILABLE, "DB_UNAVAILABLE", None)], indirect=True)
def test_a_read_is_retried_after_unavailable_a_create_is_not(flaky: tuple[str, _Flaky]) -> None:
    address, servicer = flaky
    with Client(address, timeout=10) as client:
        assert client.deployment.CheckHealth(deployment_pb2.CheckHealthRequest()).status == "ok"
        with pytest.raises(RPCError) as refused:
            client.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="read"))
    assert servicer.calls == {"CheckHealth": 3, "CreateKey": 1}
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE and refused.value.reason == "DB_UNAVAILABLE"


@pytest.mark.parametrize("flaky", [(1, code_pb2.ABORTED, "TRANSACTION_CONFLICT", 1)], indirect=True)
def test_a_transaction_conflict_is_sent_again_after_the_servers_delay(flaky: tuple[str, _Flaky]) -> None:
    address, servicer = flaky

    async def run() -> None:
        async with AsyncClient(address, timeout=10) as client:
            await client.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="read"))

    asyncio.run(run())
    assert servicer.calls == {"CreateKey": 2}


@pytest.mark.parametrize("flaky", [(1, code_pb2.UNAVAILABLE, "DB_UNAVAILABLE", 30)], indirect=True)
def test_no_retry_outlives_the_deadline(flaky: tuple[str, _Flaky]) -> None:
    address, servicer = flaky
    with Client(address, timeout=2) as client, pytest.raises(RPCError) as refused:
        client.deployment.CheckHealth(deployment_pb2.CheckHealthRequest())
    assert servicer.calls == {"CheckHealth": 1} and refused.value.retry_after_s == 30
