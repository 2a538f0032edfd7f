"""What the protobuf contract declares, read once from the descriptors.

Importing this module imports every generated Testament package, so the default
descriptor pool holds the whole contract (services, methods, options).
"""

from __future__ import annotations

import functools
import importlib

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from testament.common.v1 import options_pb2

from services.platform.auth import Scope

# proto package -> generated modules holding its services (import side effect: registration).
_SERVICE_MODULES: dict[str, tuple[str, ...]] = {
    "common": ("testament.common.v1.deployment_pb2", "testament.common.v1.errors_pb2"),
    "ingest": ("testament.ingest.v1.ingest_pb2",),
    "pipeline": ("testament.pipeline.v1.pipeline_pb2",),
    "retrieval": ("testament.retrieval.v1.retrieval_pb2",),
    "graph": ("testament.graph.v1.graph_pb2",),
    "queryspace": ("testament.queryspace.v1.queryspace_pb2",),
}

SERVICE_FULL_NAMES: dict[str, str] = {
    "deployment": "testament.common.v1.DeploymentService",
    "ingest": "testament.ingest.v1.IngestService",
    "pipeline": "testament.pipeline.v1.PipelineService",
    "retrieval": "testament.retrieval.v1.RetrievalService",
    "graph": "testament.graph.v1.GraphService",
    "queryspace": "testament.queryspace.v1.QuerySpaceService",
}

_SCOPES = {
    options_pb2.SCOPE_NONE: Scope.NONE,
    options_pb2.SCOPE_READ: Scope.READ,
    options_pb2.SCOPE_INGEST: Scope.INGEST,
    options_pb2.SCOPE_WRITE: Scope.WRITE,
}

# Infrastructure services every process serves without a credential.
_OPEN_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                  "grpc.reflection.v1.ServerReflection")


@functools.cache
def load_all() -> None:
    for modules in _SERVICE_MODULES.values():
        for name in modules:
            importlib.import_module(name)


def service(full_name: str) -> ServiceDescriptor:
    load_all()
    return descriptor_pool.Default().FindServiceByName(full_name)


@functools.cache
def error_reasons() -> frozenset[str]:
    """Every ErrorInfo reason the contract declares (common/v1/errors.proto), as sent."""
    from testament.common.v1 import errors_pb2

    prefix = "ERROR_REASON_"
    return frozenset(v.name.removeprefix(prefix) for v in errors_pb2.ErrorReason.DESCRIPTOR.values
                     if v.number != 0)


def not_built(method: MethodDescriptor) -> str | None:
    """The contract's note for an RPC declared but not built yet, or None."""
    options = method.GetOptions()
    return options.Extensions[options_pb2.not_built] if options.HasExtension(options_pb2.not_built) else None


@functools.cache
def method_scope(full_method: str) -> Scope:
    """Scope declared for ``/pkg.Service/Method``; undeclared or unknown → ``write``."""
    service_name, _, method_name = full_method.lstrip("/").partition("/")
    if service_name in _OPEN_SERVICES:
        return Scope.NONE
    try:
        method: MethodDescriptor = service(service_name).methods_by_name[method_name]
    except KeyError:
        return Scope.WRITE
    declared = method.GetOptions().Extensions[options_pb2.scope]
    return _SCOPES.get(declared, Scope.WRITE)
