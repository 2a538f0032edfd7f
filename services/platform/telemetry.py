"""OpenTelemetry: one tracer provider per process, W3C trace context across every hop.

Spans are always recorded so trace ids exist end to end; exporting is optional
(``console`` prints spans as JSON). Each RPC also writes one JSON access line to
stderr with its trace id, which is how operators (and tests) follow a request
from the gateway through the services.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

_configured = False


def setup(service_name: str, *, console_export: bool = False) -> None:
    """Install the process's tracer provider (idempotent)."""
    global _configured
    if _configured:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if console_export:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)
    _configured = True


def tracer() -> trace.Tracer:
    return trace.get_tracer("testament")


def extract(metadata: Iterable[tuple[str, Any]] | Mapping[str, str] | None) -> Any:
    carrier: dict[str, str] = {}
    if metadata:
        items = metadata.items() if isinstance(metadata, Mapping) else metadata
        for key, value in items:
            if isinstance(value, str):
                carrier[key.lower()] = value
    return propagate.extract(carrier)


def inject() -> list[tuple[str, str]]:
    """Trace context of the current span as gRPC metadata pairs."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())


def current_trace_id() -> str | None:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def access_log(event: str, **fields: Any) -> None:
    line = {"ts": round(time.time(), 3), "event": event, "trace_id": current_trace_id(), **fields}
    sys.stderr.write(json.dumps(line, default=str) + "\n")
    sys.stderr.flush()
