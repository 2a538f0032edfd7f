"""Graceful drain: a SIGTERM lets in-flight calls finish, refuses new ones, exits 0."""

from __future__ import annotations

import queue
import signal
import threading
import time
from pathlib import Path

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from testament.common.v1 import deployment_pb2, deployment_pb2_grpc

from tests.support import run_service


def test_sigterm_drains_in_flight_calls_and_refuses_new_ones(dsn: str, tmp: Path) -> None:
    with run_service("graph", dsn, tmp, TESTAMENT_SHUTDOWN_GRACE_S="8") as svc:
        channel = grpc.insecure_channel(svc.address)
        requests: queue.Queue[reflection_pb2.ServerReflectionRequest | None] = queue.Queue()

        def feed():  # the client side of a long-lived bidirectional call
            while (item := requests.get()) is not None:
                yield item

        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            feed(), timeout=30)
        requests.put(reflection_pb2.ServerReflectionRequest(list_services=""))
        assert next(stream).list_services_response.service

        svc.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)

        # A new call after the signal is refused…
        other = grpc.insecure_channel(svc.address)
        refused = None
        try:
            deployment_pb2_grpc.DeploymentServiceStub(other).CheckHealth(
                deployment_pb2.CheckHealthRequest(), timeout=3)
        except grpc.RpcError as error:
            refused = error.code()
        assert refused in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)

        # …while the call in flight still gets its answers, then ends cleanly.
        requests.put(reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="testament.graph.v1.GraphService"))
        assert next(stream).file_descriptor_response.file_descriptor_proto
        requests.put(None)
        assert list(stream) == []

        started = time.monotonic()
        result: list[int] = []
        waiter = threading.Thread(target=lambda: result.append(svc.proc.wait(15)))
        waiter.start()
        waiter.join(16)
        assert result == [0]
        assert time.monotonic() - started < 10
        channel.close()
        other.close()
        events = [line.get("event") for line in svc.log_lines()]
        assert "stopped" in events
