"""A refusal's gRPC code is the one its ErrorReason declares (common/v1/errors.proto)."""

from __future__ import annotations

import asyncpg
from google.rpc import code_pb2, error_details_pb2

from services.ingest.domain import body_too_large
from services.platform.interceptors import map_exception


def _code_and_info(exc: BaseException) -> tuple[int, error_details_pb2.ErrorInfo]:
    status = map_exception(exc)
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return status.code, info


def test_a_body_over_the_cap_is_resource_exhausted_413_not_internal() -> None:
    code, info = _code_and_info(body_too_large())
    assert (code, info.reason, info.metadata["http_status"]) == (code_pb2.RESOURCE_EXHAUSTED, "BODY_TOO_LARGE", "413")


def test_a_uniqueness_refusal_is_already_exists_409_not_internal() -> None:
    code, info = _code_and_info(asyncpg.UniqueViolationError("duplicate key"))
    assert (code, info.reason, info.metadata["http_status"]) == (code_pb2.ALREADY_EXISTS, "ALREADY_EXISTS", "409")
