"""Overhead of one gRPC hop and one gateway hop on an empty call.

Baselines in the same run: the servicer called in-process (for the gRPC hop) and the
same RPC called directly over gRPC (for the gateway hop).
"""

from __future__ import annotations

import grpc
import httpx
from testament.common.v1 import deployment_pb2, deployment_pb2_grpc

from bench._common import Row, percentiles, running_stack, timed
from services.platform.deployment import DeploymentServicer

N = 2000


async def run() -> list[Row]:
    rows: list[Row] = []
    servicer = DeploymentServicer(None, build_revision="")
    request = deployment_pb2.GetDeploymentRequest()
    local = percentiles(await timed(N, lambda: servicer.GetDeployment(request, None)))  # type: ignore[arg-type]
    rows.append(Row("hops", "in-process servicer (baseline)", N, *local))
    async with running_stack() as (stack, port):
        ingest = next(c for c in stack.children if c.name == "ingest")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
            stub = deployment_pb2_grpc.DeploymentServiceStub(channel)
            direct = percentiles(await timed(N, lambda: stub.GetDeployment(request, timeout=5)))
        rows.append(Row("hops", "gRPC hop: GetDeployment", N, *direct, baseline_p50_ms=local[0],
                        extra=f"+{direct[0] - local[0]:.3f} ms per hop"))
        rows.append(Row("hops", "gRPC direct (baseline)", N, *direct))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            via = percentiles(await timed(N // 2, lambda: client.get("/deployment")))
        rows.append(Row("hops", "gateway hop: GET /deployment", N // 2, *via, baseline_p50_ms=direct[0],
                        extra=f"+{via[0] - direct[0]:.3f} ms for HTTP+transcoding"))
    return rows
