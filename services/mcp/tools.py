"""Testament's MCP tools: what each one is for, its arguments, and the gateway call it makes.

Pure: no transport. The server (services/mcp/server.py) lists these, checks arguments
against their schemas, and sends each call through :class:`Gateway` calls it builds.
The RememberStack tool set keeps RememberStack's names and arguments, so an agent
configured for RememberStack behaves the same; Testament adds graph, search and change
tools of its own.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

UUID = {"type": "string", "format": "uuid", "pattern": "^[0-9a-fA-F-]{36}$"}
INSTANT = {"type": "string", "format": "date-time",
           "description": "A full date-time with a zone, e.g. 2026-06-01T00:00:00Z."}
QUERY = {"type": "string", "minLength": 1, "maxLength": 8192}
TIME = {
    "description": "Which world time the facts must hold in. Default {\"mode\": \"current\"}.",
    "oneOf": [
        {"type": "object", "properties": {"mode": {"const": "current"}}, "required": ["mode"],
         "additionalProperties": False},
        {"type": "object", "properties": {"mode": {"const": "history"}}, "required": ["mode"],
         "additionalProperties": False},
        {"type": "object", "properties": {"mode": {"const": "at"}, "at": INSTANT}, "required": ["mode", "at"],
         "additionalProperties": False},
        {"type": "object", "properties": {"mode": {"const": "overlap"}, "from": INSTANT, "to": INSTANT},
         "required": ["mode", "from", "to"], "additionalProperties": False},
    ],
}
SQL_PARAMETERS = {"type": "array", "maxItems": 64, "description": "Bound to $1..$n, in order."}
IDENT = {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"}


def _obj(properties: Mapping[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required),
            "additionalProperties": False}


def _ids(most: int) -> dict[str, Any]:
    return {"type": "array", "items": UUID, "minItems": 1, "maxItems": most, "uniqueItems": True}


@dataclass(frozen=True)
class Call:
    """One gateway request: method, path, JSON body or raw bytes, query parameters."""

    method: str
    path: str
    json: Any = None
    content: bytes | None = None
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    writes: bool = False
    destructive: bool = False
    # Listed only when GET /deployment names the tool (RememberStack's rule); Testament's
    # own tools are always there.
    needs_deployment: bool = True


class ArgumentError(ValueError):
    """An argument the schema admits but the tool cannot use (e.g. bad base64)."""


def call_for(tool: str, args: Mapping[str, Any]) -> Call:
    """The gateway request a tool call makes (arguments already schema-checked)."""
    a = dict(args)
    if tool == "ingest":
        return _ingest(a)
    if tool == "pipeline_readiness":
        return Call("POST", "/readiness", json=a)
    if tool == "delete_document":
        return Call("DELETE", f"/documents/{a['doc_id']}")
    if tool in ("resolve_entity", "claims_and_sources_context", "facts_context", "combined_context"):
        return Call("POST", f"/operations/{tool}", json=a)
    if tool == "query_sql":
        return Call("POST", "/query/sql", json=a)
    if tool == "explain_sql":
        return Call("POST", "/query/sql/explain", json=a)
    if tool == "describe_query_space":
        return Call("GET", "/query/space", params={k: str(v).lower() if isinstance(v, bool) else str(v)
                                                   for k, v in a.items()})
    if tool == "search_query_space":
        return Call("GET", "/query/space/search", params={k: str(v) for k, v in a.items()})
    if tool == "list_saved_queries":
        return Call("GET", "/query/saved", params={k: str(v) for k, v in a.items()})
    if tool == "describe_saved_query":
        version = {"version": str(a["version"])} if "version" in a else {}
        return Call("GET", f"/query/saved/{a['namespace']}/{a['name']}", params=version)
    if tool == "run_saved_query":
        body = {k: v for k, v in a.items() if k not in ("namespace", "name")}
        return Call("POST", f"/query/saved/{a['namespace']}/{a['name']}/run", json=body)
    if tool == "graph_neighborhood":
        return Call("POST", "/graph/neighborhood", json=a)
    if tool == "graph_path":
        return Call("POST", "/graph/path", json=a)
    if tool == "search_claims":
        return Call("POST", "/search/claims", json=a)
    raise KeyError(tool)


def _ingest(a: dict[str, Any]) -> Call:
    bodies = [k for k in ("text", "content_base64") if k in a]
    if len(bodies) != 1:
        raise ArgumentError("give exactly one of text or content_base64")
    filename = a.pop("filename")
    if "text" in a:
        content = a.pop("text").encode("utf-8")
        guessed = mimetypes.guess_type(filename)[0]
        mime = a.pop("mime", None) or (guessed if guessed and guessed.startswith("text/") else "text/plain")
    else:
        raw = a.pop("content_base64")
        if raw.startswith("data:"):
            raise ArgumentError("content_base64 is plain base64, without a data: prefix")
        try:
            content = base64.b64decode(raw, validate=True)
        except ValueError:
            raise ArgumentError("content_base64 is not valid base64") from None
        mime = a.pop("mime", None) or mimetypes.guess_type(filename)[0] or "application/octet-stream"
    if ("source_kind" in a) != ("source_ref" in a):
        raise ArgumentError("source_kind and source_ref must be given together")
    params = {"filename": filename, "mime": mime, **{k: str(v) for k, v in a.items()}}
    return Call("POST", "/ingest", content=content, params=params)


_READINESS_GUIDE = (
    "Ask whether versions are processed. Wait about 30 s after ingest, then poll every 30-60 s. "
    "A stage `failed` is being retried; stop at `dead_letter` and tell the user the version and stage; "
    "give up after 20-30 minutes. Poll versions that came back created=false too.")

TOOLS: tuple[Tool, ...] = (
    Tool("ingest", "Put a document into memory (Markdown, text, or any file as base64). Use it for notes, "
         "decisions and corrections the user wants remembered; to correct a fact, ingest the correction, never "
         "delete. Give source_kind and source_ref to make later versions of the same source replace it. "
         "Then poll pipeline_readiness with the returned version_id.",
         _obj({"text": {"type": "string", "minLength": 1}, "content_base64": {"type": "string", "minLength": 1},
               "filename": {"type": "string", "minLength": 1, "maxLength": 512},
               "mime": {"type": "string", "minLength": 1, "maxLength": 255},
               "title": {"type": "string", "maxLength": 512},
               "source_kind": {"type": "string", "minLength": 1, "maxLength": 128},
               "source_ref": {"type": "string", "minLength": 1, "maxLength": 512},
               "versioning_mode": {"enum": ["snapshot", "living"]},
               "source_modified_at": INSTANT,
               "source_version_ref": {"type": "string", "minLength": 1, "maxLength": 512}}, ("filename",)),
         writes=True),
    Tool("pipeline_readiness", _READINESS_GUIDE,
         _obj({"version_ids": {"type": "array", "items": UUID, "minItems": 1, "maxItems": 1000},
               "require": _obj({k: {"type": "boolean"} for k in ("pipeline", "p1", "live_graph", "p3")},
                               ("pipeline", "p1", "live_graph", "p3"))}, ("version_ids", "require"))),
    Tool("delete_document", "Delete a document, only when the user asks or the document is plainly wrong. "
         "Never delete to correct a fact: ingest a correction instead. Facts that other documents support stay.",
         _obj({"doc_id": UUID}, ("doc_id",)), writes=True, destructive=True),
    Tool("resolve_entity", "Find the entities a name may mean (people, projects, systems), best first, with "
         "the tier that found each. Use it first for every named thing, then pass entity_ids to the context "
         "tools.", _obj({"name": {"type": "string", "minLength": 1}}, ("name",))),
    Tool("claims_and_sources_context", "What the sources said: claims with exact quotes, speakers and "
         "passages, ranked by search. Use it when facts_context falls short, or for verbatim quotes and who "
         "said what.", _obj({"query": QUERY, "entity_ids": _ids(20),
                              "k": {"type": "integer", "minimum": 1, "maximum": 100},
                              "candidate_k": {"type": "integer", "minimum": 1, "maximum": 400}}, ("query",))),
    Tool("facts_context", "The memory's held view, the authority: facts with the period each held "
         "(valid_from/valid_until with precision), contradictions and their evidence. Anchor with entity_ids "
         "from resolve_entity. time: current or at for an instant, overlap for an interval, history for "
         "'ever' or biography. Never present ingested_at as an event date.",
         _obj({"query": QUERY, "entity_ids": _ids(19), "k": {"type": "integer", "minimum": 1, "maximum": 30},
               "evidence_per_fact": {"type": "integer", "minimum": 1, "maximum": 5},
               "hops": {"type": "integer", "minimum": 1, "maximum": 2},
               "predicate": {"type": "string", "minLength": 1, "maxLength": 200}, "time": TIME}, ("query",))),
    Tool("combined_context", "Both at once: facts_context and claims_and_sources_context at the same instant, "
         "never blended.", _obj({"query": QUERY, "entity_ids": _ids(19),
                                  "hops": {"type": "integer", "minimum": 1, "maximum": 2},
                                  "predicate": {"type": "string", "minLength": 1, "maxLength": 200},
                                  "time": TIME}, ("query",))),
    Tool("query_sql", "Read-only SQL over the memory_v1 views (analytics, said-on time filters, belief-time "
         "reads, explanations). Start from facts_current and graph_edges_current; call describe_query_space "
         "first. Statement problems come back inside the result (error_code), not as errors.",
         _obj({"sql": {"type": "string", "minLength": 1}, "parameters": SQL_PARAMETERS,
               "max_rows": {"type": "integer", "minimum": 0}}, ("sql",))),
    Tool("explain_sql", "The plan of a query_sql statement, without running its searches.",
         _obj({"sql": {"type": "string", "minLength": 1}, "parameters": SQL_PARAMETERS}, ("sql",))),
    Tool("describe_query_space", "The memory_v1 views, functions, limits and worked examples.",
         _obj({"pattern": {"type": "string", "minLength": 1}, "include_examples": {"type": "boolean"}})),
    Tool("search_query_space", "Find the views, functions and examples of the query space that fit a task.",
         _obj({"query": {"type": "string", "minLength": 1}, "k": {"type": "integer", "minimum": 1, "maximum": 25}},
              ("query",))),
    Tool("list_saved_queries", "The saved queries that can run.",
         _obj({"namespace": IDENT, "status": {"enum": ["draft", "pending_revalidation", "active", "deprecated",
                                                        "disabled", "broken"]}})),
    Tool("describe_saved_query", "One saved query: its SQL, parameters and what its rows mean.",
         _obj({"namespace": IDENT, "name": IDENT, "version": {"type": "integer", "minimum": 1}},
              ("namespace", "name"))),
    Tool("run_saved_query", "Run a saved query (the active version unless one is pinned).",
         _obj({"namespace": IDENT, "name": IDENT, "version": {"type": "integer", "minimum": 1},
               "parameters": SQL_PARAMETERS, "max_rows": {"type": "integer", "minimum": 0}}, ("namespace", "name"))),
    Tool("graph_neighborhood", "Entities and relations around one entity, within hops, as the world and the "
         "memory stood at valid_at / believed_at (both or neither; default now). Use for 'who works with', "
         "'what depends on'.",
         _obj({"entity_id": UUID, "hops": {"type": "integer", "minimum": 1, "maximum": 4},
               "predicates": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
                              "maxItems": 100},
               "valid_at": INSTANT, "believed_at": INSTANT,
               "limit": {"type": "integer", "minimum": 1, "maximum": 500}}, ("entity_id",)),
         needs_deployment=False),
    Tool("graph_path", "The shortest chains of relations between two entities (how are they connected?).",
         _obj({"from_entity_id": UUID, "to_entity_id": UUID,
               "max_hops": {"type": "integer", "minimum": 1, "maximum": 6},
               "predicates": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
                              "maxItems": 100},
               "valid_at": INSTANT, "believed_at": INSTANT}, ("from_entity_id", "to_entity_id")),
         needs_deployment=False),
    Tool("search_claims", "Plain search over claims by one channel (semantic or bm25), for exact words, "
         "codenames or identifiers the context tools rank low.",
         _obj({"query": {"type": "string", "minLength": 1, "maxLength": 4096},
               "k": {"type": "integer", "minimum": 1, "maximum": 100},
               "channel": {"enum": ["semantic", "bm25"]}}, ("query",)), needs_deployment=False),
    Tool("recent_changes", "What the memory learned or stopped believing since a cursor: new, invalidated and "
         "superseded facts and new claims, in commit order. Pass the returned cursor next time to continue.",
         _obj({"cursor": {"type": "string", "minLength": 1, "maxLength": 200},
               "limit": {"type": "integer", "minimum": 1, "maximum": 200},
               "wait_s": {"type": "number", "minimum": 0, "maximum": 10}}),
         needs_deployment=False),
)

BY_NAME = {t.name: t for t in TOOLS}


@dataclass(frozen=True)
class ToolError:
    """What an agent needs to decide what to do next."""

    code: str
    status_code: int | None
    detail: Any
    retryable: bool
    agent_action: str
    retry_after: float | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "status_code": self.status_code, "detail": self.detail,
                                "retryable": self.retryable, "agent_action": self.agent_action}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return {"error": body}


def refusal(code: str, detail: str) -> ToolError:
    """Refused here, before the engine was asked: fix the call, do not retry it as is."""
    return ToolError(code, None, detail, False, "fix the arguments; do not retry the same call")


def from_http(status: int, detail: Any, retry_after: str | None) -> ToolError:
    """An engine answer that is not a success, classified for an agent."""
    wait = float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None
    if status == 0:
        return ToolError("transport_error", 0, detail, True, "the memory did not answer; retry in a few seconds")
    if status == 429:
        return ToolError("rate_limited", 429, detail, True, "wait retry_after seconds, then retry", wait or 1.0)
    if status == 409 and isinstance(detail, str) and "send it again" in detail:
        return ToolError("transaction_conflict", 409, detail, True, "retry once", wait or 1.0)
    if status >= 500:
        return ToolError("engine_unavailable", status, detail, True,
                         "retry 3-5 times with 2-30 s back-off, then report an outage", wait)
    named = {401: "unauthorized", 403: "insufficient_permission", 404: _not_found(detail), 413: "body_too_large"}
    action = ("check the id; it may have been deleted" if status == 404 else
              "the credential cannot do this; tell the user" if status in (401, 403) else
              "fix the arguments; do not retry the same call")
    return ToolError(named.get(status, "engine_client_error"), status, detail, False, action)


def _not_found(detail: Any) -> str:
    if isinstance(detail, str) and detail.replace("_", "").isalpha():
        return detail
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        return detail["code"]
    return "not_found"
