"""`testament mcp`: Testament's MCP server (the official MCP Python SDK), over stdio or
Streamable HTTP, in front of the gateway's HTTP API.

The server holds no memory and no model: every tool call is one gateway request made
with the user's key (stdio: the key it was started with; HTTP: the caller's own
``Authorization`` header, passed through; the HTTP server holds no key). Arguments are
checked against each tool's schema here, so a malformed call never reaches the engine,
and every failure comes back as ``isError`` with a JSON object that tells an agent
whether retrying can help.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import mcp.types as types
from mcp.server.lowlevel import Server

from services.mcp.tools import BY_NAME, TOOLS, ArgumentError, ToolError, call_for, from_http, refusal
from services.platform.envelopes import END_STREAM, aread_frames, end_stream_error, envelope

SERVER_NAME = "testament"
_VALIDATORS = {t.name: jsonschema.Draft202012Validator(t.schema) for t in TOOLS}
_WATCH = "/testament.retrieval.v1.RetrievalService/WatchChanges"


@dataclass(frozen=True)
class Options:
    api_url: str
    api_key: str | None = None  # stdio only
    read_only: bool = False
    timeout_s: float = 60.0


def build_server(options: Options, http: httpx.AsyncClient) -> Server[Any, Any]:
    server: Server[Any, Any] = Server(SERVER_NAME, instructions=(
        "Testament is this team's memory. For a named thing call resolve_entity, then facts_context anchored "
        "by its entity_ids (the authority, with validity windows); claims_and_sources_context for quotes and "
        "speakers; combined_context for both. Keep world time (valid_from/valid_until), said-on time "
        "(asserted_at) and belief time (ingested_at) apart."))

    def credential() -> dict[str, str]:
        if options.api_key:
            return {"authorization": f"Bearer {options.api_key}"}
        with contextlib.suppress(LookupError, AttributeError):
            request = server.request_context.request
            header = request.headers.get("authorization") if request is not None else None
            if header:
                return {"authorization": header}
        return {}

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        # Every time, as RememberStack does: a tool is offered only while its routes answer.
        reply = await http.get("/deployment", headers=credential(), timeout=5.0)
        reply.raise_for_status()
        served = reply.json().get("tools", {})
        tools = []
        for tool in TOOLS:
            if tool.needs_deployment and tool.name not in served:
                continue
            if options.read_only and tool.writes:
                continue
            tools.append(types.Tool(
                name=tool.name, description=tool.description, inputSchema=tool.schema,
                annotations=types.ToolAnnotations(readOnlyHint=not tool.writes, destructiveHint=tool.destructive,
                                                  idempotentHint=not tool.writes or tool.destructive,
                                                  openWorldHint=False)))
        return tools

    async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
        # Registered directly, not through the SDK's decorator: that one lists the tools
        # (a /deployment call) before each first call and turns our checks into plain text.
        arguments = request.params.arguments
        outcome = await run_tool(http, options, request.params.name, arguments if arguments is not None else {},
                                 credential())
        failed = isinstance(outcome, ToolError)
        text = json.dumps(outcome.as_json() if isinstance(outcome, ToolError) else outcome)
        return types.ServerResult(types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                                       isError=failed))

    server.request_handlers[types.CallToolRequest] = call_tool
    return server


async def run_tool(http: httpx.AsyncClient, options: Options, name: str, arguments: Mapping[str, Any],
                   headers: Mapping[str, str]) -> Any:
    """The tool's result as JSON, or a ToolError."""
    tool = BY_NAME.get(name)
    if tool is None:
        return refusal("unknown_tool", f"no tool named {name!r}")
    if options.read_only and tool.writes:
        return refusal("read_only", f"{name} writes, and this server is read-only")
    if not isinstance(arguments, Mapping):
        return refusal("invalid_arguments", "arguments must be an object")
    problems = sorted(_VALIDATORS[name].iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if problems:
        where = ".".join(str(p) for p in problems[0].absolute_path) or "arguments"
        return refusal("invalid_arguments", f"{where}: {problems[0].message}")
    if name == "recent_changes":
        return await _recent_changes(http, arguments, headers)
    try:
        call = call_for(name, arguments)
    except ArgumentError as exc:
        return refusal("invalid_arguments", str(exc))
    try:
        reply = await http.request(call.method, call.path, json=call.json, content=call.content,
                                   params=dict(call.params), headers=dict(headers), timeout=options.timeout_s)
    except httpx.HTTPError as exc:
        return from_http(0, f"the memory at {options.api_url} did not answer: {type(exc).__name__}", None)
    try:
        body = reply.json()
    except ValueError:
        body = reply.text
    if reply.status_code >= 400:
        detail = body.get("detail", body) if isinstance(body, dict) else body
        return from_http(reply.status_code, detail, reply.headers.get("retry-after"))
    if name == "ingest" and isinstance(body, dict):
        body = _next_step(body)
    return body


def _next_step(version: dict[str, Any]) -> dict[str, Any]:
    """What an agent does after an ingest (RememberStack's guidance shape)."""
    if version.get("parked"):
        version["pipeline"] = {"status": "parked_no_route",
                               "guidance": "No converter handles this file type yet; tell the user."}
        return version
    version["pipeline"] = {
        "status": "accepted_not_ready", "next_tool": "pipeline_readiness",
        "poll_with": {"version_ids": [version.get("version_id")],
                      "require": {"pipeline": True, "p1": True, "live_graph": True, "p3": False}},
        "guidance": "Processing takes a while: wait about 30 s, then poll every 30-60 s."}
    return version


async def _recent_changes(http: httpx.AsyncClient, arguments: Mapping[str, Any],
                          headers: Mapping[str, str]) -> Any:
    """Read the change feed (a server stream, through the gateway's Connect face) for at
    most ``wait_s`` seconds or ``limit`` changes."""
    limit = int(arguments.get("limit", 50))
    wait_s = float(arguments.get("wait_s", 2.0))
    request = {"cursor": arguments["cursor"]} if "cursor" in arguments else {}
    payload = json.dumps(request).encode()
    changes: list[Any] = []
    cursor = arguments.get("cursor")
    error: dict[str, Any] | None = None
    started = time.monotonic()
    try:
        async with http.stream("POST", _WATCH, content=envelope(payload),
                               headers={**headers, "content-type": "application/connect+json",
                                        "connect-timeout-ms": str(max(1, int(wait_s * 1000)))},
                               timeout=wait_s + 10) as reply:
            async for flags, message in aread_frames(reply.aiter_bytes()):
                if flags & END_STREAM:
                    error = end_stream_error(message)
                    break
                event = json.loads(message)
                if "overrun" in event:
                    return {"changes": changes, "cursor": cursor, "overrun": event["overrun"]}
                change = event.get("change", {})
                changes.append(change)
                cursor = change.get("cursor", cursor)
                if len(changes) >= limit or time.monotonic() - started > wait_s:
                    break
    except httpx.HTTPError as exc:
        return from_http(0, f"the change feed did not answer: {type(exc).__name__}", None)
    if error is not None:
        status = {"invalid_argument": 422, "unauthenticated": 401, "permission_denied": 403,
                  "unavailable": 503}.get(error.get("code", ""), 500)
        return from_http(status, error.get("message"), None)
    return {"changes": changes, "cursor": cursor}


# --- transports -------------------------------------------------------------------------


async def serve_stdio(options: Options) -> None:
    from mcp.server.stdio import stdio_server

    async with httpx.AsyncClient(base_url=options.api_url) as http, stdio_server() as (read, write):
        server = build_server(options, http)
        await server.run(read, write, server.create_initialization_options())


def http_app(options: Options) -> Any:
    """The Streamable HTTP app at /mcp (loopback only; the caller's Authorization passes through)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Mount

    http = httpx.AsyncClient(base_url=options.api_url)
    server = build_server(options, http)
    manager = StreamableHTTPSessionManager(
        app=server, json_response=True,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]),
        session_idle_timeout=3600, max_request_body_size=32 << 20)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            try:
                yield
            finally:
                await http.aclose()

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        await manager.handle_request(scope, receive, send)

    return Starlette(routes=[Mount("/mcp", app=endpoint)], lifespan=lifespan)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def serve_http(options: Options, host: str, port: int) -> None:
    import uvicorn

    if host not in LOOPBACK:
        raise ValueError(f"--bind must be a loopback address, not {host}")
    config = uvicorn.Config(http_app(options), host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    await server.serve()


def run(options: Options, *, transport: str, bind: str) -> None:
    if transport == "stdio":
        asyncio.run(serve_stdio(options))
        return
    host, _, port = bind.rpartition(":")
    asyncio.run(serve_http(options, host.strip("[]") or "127.0.0.1", int(port)))
