"""One error root; RPC failures carry the gRPC code and the server's ErrorInfo."""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2


class TestamentError(Exception):
    """Root of every error this SDK raises."""


class RPCError(TestamentError):
    """A call failed. ``reason`` and ``detail`` come from the server's ``ErrorInfo``."""

    def __init__(self, code: grpc.StatusCode, message: str, *, reason: str | None = None,
                 detail: Any = None, http_status: int | None = None,
                 violations: list[dict[str, Any]] | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.detail = detail
        self.http_status = http_status
        self.violations = violations or []
        # The server's google.rpc.RetryInfo delay, when it says when to try again.
        self.retry_after_s = retry_after_s

    @classmethod
    def from_grpc(cls, error: grpc.RpcError) -> RPCError:
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        message = error.details() if hasattr(error, "details") else str(error)
        reason = detail = http_status = retry_after_s = None
        violations: list[dict[str, Any]] = []
        trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
        for key, value in trailing or ():
            if key != "grpc-status-details-bin":
                continue
            status = status_pb2.Status.FromString(value)
            for item in status.details:
                if item.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    item.Unpack(info)
                    reason = info.reason
                    if "detail" in info.metadata:
                        detail = json.loads(info.metadata["detail"])
                    if "http_status" in info.metadata:
                        http_status = int(info.metadata["http_status"])
                elif item.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    retry = error_details_pb2.RetryInfo()
                    item.Unpack(retry)
                    retry_after_s = retry.retry_delay.ToTimedelta().total_seconds()
                elif item.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    item.Unpack(bad)
                    violations = [{"field": v.field, "type": v.reason, "message": v.description}
                                  for v in bad.field_violations]
        return cls(code, message or "", reason=reason, detail=detail, http_status=http_status,
                   violations=violations, retry_after_s=retry_after_s)
