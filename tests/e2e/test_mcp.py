"""`testament mcp` with the official MCP client, over stdio and Streamable HTTP, against a
running stack (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from services.platform.server import free_ports
from tests.conftest import clone_database
from tests.support import REPO, gateway_stack, service_env

RS_TOOLS = ["ingest", "pipeline_readiness", "delete_document", "resolve_entity", "claims_and_sources_context",
            "facts_context", "combined_context"]
SQL_TOOLS = ["query_sql", "explain_sql", "describe_query_space", "search_query_space", "list_saved_queries",
             "describe_saved_query", "run_saved_query"]
OWN_TOOLS = ["graph_neighborhood", "graph_path", "search_claims", "recent_changes"]
NOTE = "# Kickoff\n\nRavi Shanker owns the billing exporter.\n\nDana Kim reports to Ravi Shanker.\n"


DSN: dict[str, str] = {}


@pytest.fixture(scope="module")
def base(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn = DSN["dsn"] = clone_database(pg)
    services = ("ingest", "pipeline", "retrieval", "queryspace")
    with gateway_stack(dsn, tmp_path_factory.mktemp("mcp"), services) as (url, _, _):
        reply = httpx.post(f"{url}/ingest", params={"filename": "kickoff.md", "mime": "text/markdown",
                                                    "source_kind": "file", "source_ref": "mcp/kickoff"},
                           content=NOTE.encode(), timeout=30).json()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            report = httpx.post(f"{url}/readiness", json={"version_ids": [reply["version_id"]], "require": {
                "pipeline": True, "p1": True, "live_graph": True, "p3": False}}, timeout=30).json()
            if report["ready"]:
                break
            time.sleep(0.3)
        yield url


def payload(result) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(result.content[0].text)


async def _stdio_session(base: str, *extra: str):  # type: ignore[no-untyped-def]
    params = StdioServerParameters(command=sys.executable, args=["-m", "services.cli", "mcp", "--api-url", base,
                                                                 *extra],
                                   cwd=str(REPO), env=service_env("postgresql://unused"))
    return stdio_client(params)


async def call_every_tool(session: ClientSession, listed: list[str]) -> dict:
    """Each tool but delete_document once, as an agent would call it; returns the ingested version."""
    resolved = payload(await session.call_tool("resolve_entity", {"name": "Ravi Shanker"}))
    ravi = resolved["entities"][0]["entity_id"]
    facts = await session.call_tool("facts_context", {"query": "who owns the billing exporter",
                                                      "entity_ids": [ravi], "time": {"mode": "current"}})
    assert not facts.isError
    assert any("billing exporter" in f["label"] for f in payload(facts)["facts"])
    around = payload(await session.call_tool("graph_neighborhood", {"entity_id": ravi, "hops": 1}))
    assert {n["name"] for n in around["nodes"]} >= {"Ravi Shanker", "Dana Kim"}
    found = payload(await session.call_tool("search_claims", {"query": "exporter", "channel": "bm25"}))
    assert found["evidence"]

    ingested = payload(await session.call_tool("ingest", {"text": "# Later\n\nDana Kim owns the ledger.\n",
                                                          "filename": "later.md"}))
    assert ingested["pipeline"]["next_tool"] == "pipeline_readiness"
    ready = await session.call_tool("pipeline_readiness", ingested["pipeline"]["poll_with"])
    assert not ready.isError and "ready" in payload(ready)
    changes = payload(await session.call_tool("recent_changes", {"wait_s": 1}))
    assert "changes" in changes and "cursor" in changes

    # every other tool once, as an agent would call it
    dana = payload(await session.call_tool("resolve_entity", {"name": "Dana Kim"}))["entities"][0]["entity_id"]
    calls = {
        "claims_and_sources_context": {"query": "who owns the billing exporter", "k": 5},
        "combined_context": {"query": "billing exporter", "entity_ids": [ravi]},
        "graph_path": {"from_entity_id": dana, "to_entity_id": ravi},
        "describe_query_space": {"pattern": "facts*"},
        "search_query_space": {"query": "current facts"},
        "query_sql": {"sql": "SELECT fact_label FROM facts_current ORDER BY fact_label", "max_rows": 10},
        "explain_sql": {"sql": "SELECT count(*) FROM facts_current"},
        "list_saved_queries": {"namespace": "examples"},
        "describe_saved_query": {"namespace": "examples", "name": "relation_current"},
        "run_saved_query": {"namespace": "examples", "name": "relation_current", "parameters": [ravi]},
    }
    assert set(calls) | {"resolve_entity", "facts_context", "graph_neighborhood", "search_claims", "ingest",
                         "pipeline_readiness", "recent_changes", "delete_document"} == set(listed)
    for name, args in calls.items():
        result = await session.call_tool(name, args)
        assert not result.isError, (name, payload(result))
    rows = payload(await session.call_tool("query_sql", calls["query_sql"]))
    assert rows["termination_reason"] == "completed" and rows["rows"], rows
    path = payload(await session.call_tool("graph_path", calls["graph_path"]))
    assert path["paths"], path

    return ingested


async def test_stdio_lists_the_tools_and_calls_each_kind(base: str) -> None:
    async with await _stdio_session(base) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = [t.name for t in (await session.list_tools()).tools]
        assert listed == RS_TOOLS + SQL_TOOLS + OWN_TOOLS  # the SQL tools as /deployment lists them
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["delete_document"].annotations.destructiveHint is True
        assert tools["facts_context"].annotations.readOnlyHint is True

        ingested = await call_every_tool(session, listed)
        deleted = payload(await session.call_tool("delete_document", {"doc_id": ingested["doc_id"]}))
        assert deleted["doc_id"] == ingested["doc_id"]
        again = await session.call_tool("delete_document", {"doc_id": ingested["doc_id"]})
        assert again.isError
        error = payload(again)["error"]
        assert (error["status_code"], error["code"], error["retryable"]) == (404, "document_not_found", False)

        # refused here, never sent: the agent is told to fix the call, not to retry it
        for name, args, code in [("facts_context", {"query": ""}, "invalid_arguments"),
                                 ("facts_context", {"query": "x", "k": 3.5}, "invalid_arguments"),
                                 ("resolve_entity", {"name": "x", "project": "p"}, "invalid_arguments"),
                                 ("ingest", {"filename": "a.md"}, "invalid_arguments"),
                                 ("ingest", {"content_base64": "!!", "filename": "a.bin"}, "invalid_arguments"),
                                 ("no_such_tool", {}, "unknown_tool")]:
            refused = await session.call_tool(name, args)
            assert refused.isError, name
            body = payload(refused)["error"]
            assert (body["code"], body["status_code"], body["retryable"]) == (code, None, False), (name, body)


async def test_read_only_hides_and_refuses_the_writing_tools(base: str) -> None:
    async with await _stdio_session(base, "--read-only") as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = [t.name for t in (await session.list_tools()).tools]
        assert "ingest" not in listed and "delete_document" not in listed and "facts_context" in listed
        refused = payload(await session.call_tool("ingest", {"text": "x", "filename": "x.md"}))
        assert refused["error"]["code"] == "read_only"


def test_an_unreachable_memory_is_a_retryable_transport_error(tmp_path: Path) -> None:
    import asyncio

    (dead_port,) = free_ports(1)

    async def go() -> dict:
        async with await _stdio_session(f"http://127.0.0.1:{dead_port}") as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return payload(await session.call_tool("resolve_entity", {"name": "Ravi"}))

    error = asyncio.run(go())["error"]
    assert (error["code"], error["status_code"], error["retryable"]) == ("transport_error", 0, True)


def test_streamable_http_serves_the_same_tools_and_passes_the_callers_key_through(base: str,
                                                                                  tmp_path: Path) -> None:
    import asyncio

    (port,) = free_ports(1)
    log = (tmp_path / "mcp-http.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "mcp", "--transport", "http", "--bind",
                             f"127.0.0.1:{port}", "--api-url", base], cwd=REPO,
                            env=service_env("postgresql://unused"), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)

        async def go(key: str | None = None, *, listing: bool = True) -> tuple[list[str], dict]:
            headers = {"Authorization": f"Bearer {key}"} if key else None
            async with httpx.AsyncClient(headers=headers, timeout=30) as client, \
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (read, write, _), \
                    ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools] if listing else []
                if listing and key is None:
                    ingested = await call_every_tool(session, names)
                    deleted = payload(await session.call_tool("delete_document", {"doc_id": ingested["doc_id"]}))
                    assert deleted["doc_id"] == ingested["doc_id"]
                return names, payload(await session.call_tool("resolve_entity", {"name": "Dana Kim"}))

        names, resolved = asyncio.run(go())
        assert names == RS_TOOLS + SQL_TOOLS + OWN_TOOLS
        assert resolved["entities"][0]["canonical_name"] == "Dana Kim"

        # Once a key exists the stack is closed: the caller's own key passes through.
        created = subprocess.run([sys.executable, "-m", "services.cli", "keys", "create", "--scope", "read",
                                  "--trusted"], cwd=REPO, env=service_env(DSN["dsn"]), capture_output=True,
                                 text=True, timeout=60)
        key = json.loads(created.stdout)["key"]
        time.sleep(2.5)  # the services cache "does any key exist" briefly
        _, with_key = asyncio.run(go(key))
        assert with_key["entities"][0]["canonical_name"] == "Dana Kim"
        _, wrong = asyncio.run(go("not-a-key", listing=False))
        assert (wrong["error"]["code"], wrong["error"]["status_code"]) == ("unauthorized", 401)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    # the HTTP server holds no key of its own
    refused = subprocess.run([sys.executable, "-m", "services.cli", "mcp", "--transport", "http",
                              "--api-key", "k"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "holds no key" in refused.stderr
    remote = subprocess.run([sys.executable, "-m", "services.cli", "mcp", "--transport", "http",
                             "--bind", "0.0.0.0:8765"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert remote.returncode == 2 and "loopback" in remote.stderr
