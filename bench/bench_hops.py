"""Overhead of one gRPC hop and one gateway hop on an empty call, of the buf.validate
interceptor on a request with rules, and requests per second at saturation for a small
operation (resolve_entity) through the gateway.

Baselines in the same run: the servicer called in-process (for the gRPC hop), the same
RPC called directly over gRPC (for the gateway hop), and resolve_entity called straight
on the retrieval service over gRPC with the same concurrency (for saturation).
"""

from __future__ import annotations

import grpc
import httpx
from testament.common.v1 import deployment_pb2, deployment_pb2_grpc

from bench._common import Row, percentiles, running_stack, timed
from services.platform.deployment import DeploymentServicer

N = 2000


async def run() -> list[Row]:
    rows: list[Row] = await _validation()
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
        rows.extend(await _saturation(stack, port))
    return rows


CLIENTS = 200
SATURATION_S = 10.0


async def _validation() -> list[Row]:
    """The validation interceptor's cost: check() alone, then the same unary RPC (a
    NeighborhoodRequest with six rules) on two in-process servers, one without the
    interceptor (the baseline), called in alternating blocks so load drifts hit both."""
    import time
    import uuid

    from testament.graph.v1 import graph_pb2

    from services.platform.server import free_ports
    from services.platform.validation import ValidationInterceptor, check

    request = graph_pb2.NeighborhoodRequest(entity_id=str(uuid.uuid4()), hops=2, limit=100,
                                            predicates=["owns", "uses", "leads"])
    started = time.perf_counter()
    for _ in range(N * 10):
        check(request)
    per_check_us = (time.perf_counter() - started) / (N * 10) * 1e6

    async def neighborhood(request: graph_pb2.NeighborhoodRequest, context: object) -> graph_pb2.NeighborhoodResponse:
        return graph_pb2.NeighborhoodResponse()

    handler = grpc.method_handlers_generic_handler("testament.graph.v1.GraphService", {
        "Neighborhood": grpc.unary_unary_rpc_method_handler(
            neighborhood, request_deserializer=graph_pb2.NeighborhoodRequest.FromString,
            response_serializer=graph_pb2.NeighborhoodResponse.SerializeToString)})
    samples: dict[bool, list[float]] = {False: [], True: []}
    servers = {}
    for validating, port in zip((False, True), free_ports(2), strict=True):
        server = grpc.aio.server(interceptors=[ValidationInterceptor()] if validating else [])
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        servers[validating] = (server, port)
    try:
        for _ in range(10):
            for validating, (_, port) in servers.items():
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    call = channel.unary_unary("/testament.graph.v1.GraphService/Neighborhood",
                                               request_serializer=graph_pb2.NeighborhoodRequest.SerializeToString,
                                               response_deserializer=graph_pb2.NeighborhoodResponse.FromString)
                    samples[validating] += await timed(N // 10, lambda c=call: c(request, timeout=5))
    finally:
        for server, _ in servers.values():
            await server.stop(0)
    plain, checked = percentiles(samples[False]), percentiles(samples[True])
    return [
        Row("validation", "unary RPC, no validation interceptor (baseline)", N, *plain),
        Row("validation", "unary RPC with the buf.validate interceptor", N, *checked, baseline_p50_ms=plain[0],
            extra=f"+{checked[0] - plain[0]:.3f} ms p50; check() alone {per_check_us:.1f} us"),
    ]


async def _saturation(stack, port: int) -> list[Row]:  # type: ignore[no-untyped-def]
    """CLIENTS concurrent callers of resolve_entity for SATURATION_S seconds."""
    import asyncio
    import time

    from testament.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                 limits=httpx.Limits(max_connections=CLIENTS)) as http:
        await http.post("/ingest", params={"filename": "sat.md", "mime": "text/markdown"},
                        content=b"# Notes\n\nRavi Shanker owns the exporter.\n")

        async def drive(call) -> tuple[int, list[float]]:  # type: ignore[no-untyped-def]
            deadline = time.perf_counter() + SATURATION_S
            samples: list[float] = []

            async def one() -> None:
                while time.perf_counter() < deadline:
                    started = time.perf_counter()
                    await call()
                    samples.append(time.perf_counter() - started)

            await asyncio.gather(*(one() for _ in range(CLIENTS)))
            return len(samples), samples

        retrieval = next(c for c in stack.children if c.name == "retrieval")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{retrieval.port}") as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            request = retrieval_pb2.ResolveRequest(name="Ravi Shanker")
            direct_n, direct = await drive(lambda: stub.Resolve(request, timeout=60))
        via_n, via = await drive(lambda: http.post("/operations/resolve_entity", json={"name": "Ravi Shanker"}))
    direct_rate, via_rate = direct_n / SATURATION_S, via_n / SATURATION_S
    rows = [
        Row("saturation", f"resolve over gRPC, {CLIENTS} clients (baseline)", direct_n, *percentiles(direct),
            extra=f"{direct_rate:,.0f} req/s"),
        Row("saturation", f"resolve_entity via gateway, {CLIENTS} httpx clients", via_n, *percentiles(via),
            baseline_p50_ms=percentiles(direct)[0],
            extra=f"{via_rate:,.0f} req/s (the Python client is the bottleneck here)"),
    ]
    rows.extend(_wrk(port))
    return rows


def _wrk(port: int) -> list[Row]:
    """The gateway at saturation from a load generator that is not itself the bottleneck
    (Debian's wrk, in its own process); skipped with a note where wrk is missing."""
    import re
    import shutil
    import subprocess
    import tempfile

    if shutil.which("wrk") is None:
        return [Row("saturation", "resolve_entity via gateway, wrk", 0, 0, 0, extra="wrk is not installed")]
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write('wrk.method = "POST"\nwrk.body = \'{"name": "Ravi Shanker"}\'\n'
                     'wrk.headers["Content-Type"] = "application/json"\n')
        script.flush()
        out = subprocess.run(["wrk", "-t2", f"-c{CLIENTS}", f"-d{int(SATURATION_S)}s", "--latency", "-s",
                              script.name, f"http://127.0.0.1:{port}/operations/resolve_entity"],
                             capture_output=True, text=True, timeout=SATURATION_S + 60).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)

    def ms(found: re.Match[str] | None) -> float:
        if found is None:
            return 0.0
        return float(found.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[found.group(2)]

    return [Row("saturation", f"resolve_entity via gateway, wrk {CLIENTS} connections", int(rate * SATURATION_S),
                ms(p50), ms(p99), extra=f"{rate:,.0f} req/s ({rate / 40:.0f}x the ~40/s the issue measured); "
                                        "p95 column is p99")]
