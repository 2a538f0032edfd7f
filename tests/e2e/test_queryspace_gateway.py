"""The query space as a process behind the gateway: the seven routes over HTTP, and the real
`remember` client's SQL methods, CLI commands and MCP tools against them."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.support import run_gateway, run_service

DOCS = [
    ("kickoff", "# Kickoff notes\n\nRavi has been on the billing migration since yesterday.\n",
     "2026-01-15T10:00:00Z"),
    ("standup", "# Stand-up, 17 September 2026\n\nRavi owns the invoice exporter. Dana agreed and will tell "
                "finance.\n", "2026-09-17T09:30:00Z"),
]


@pytest.fixture(scope="module")
def base(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("qsgw")
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5"}
    with ExitStack() as stack:
        procs = {name: stack.enter_context(run_service(name, dsn, tmp, **env))
                 for name in ("ingest", "pipeline", "queryspace")}
        gateway = stack.enter_context(run_gateway(dsn, tmp, ingest=procs["ingest"].address,
                                                  queryspace=procs["queryspace"].address))
        pipeline = Pipeline(dsn, procs["ingest"].address, procs["pipeline"].address, tmp)
        for ref, text, said in DOCS:
            version = pipeline.upload(text.encode(), f"{ref}.md", source_kind="file", source_ref=ref,
                                      source_modified_at=said)
            assert pipeline.wait(version.version_id).ready
        yield f"http://127.0.0.1:{gateway.extra['http']}"


def test_sql_route_answers_200_in_every_outcome(base: str) -> None:
    ok = httpx.post(f"{base}/query/sql", json={"sql": "SELECT fact_label, evidence_count FROM facts_current "
                                                      "ORDER BY fact_label", "max_rows": 5000}, timeout=30)
    assert ok.status_code == 200, ok.text
    body = ok.json()
    assert body["contract"] == "QueryResult/v1" and body["termination_reason"] == "completed"
    assert body["limits"]["row_cap"] == 1000 and body["error_code"] is None and body["saved_query"] is None
    assert any(r[0] == "Ravi owns invoice exporter" for r in body["rows"]), body["rows"]
    assert body["execution_started_at"].endswith("Z") and body["evaluated_at"] is not None
    refused = httpx.post(f"{base}/query/sql", json={"sql": "SELECT * FROM pg_class"}, timeout=30)
    assert refused.status_code == 200
    assert refused.json()["error_code"] == "relation_not_allowed"
    assert refused.json()["termination_reason"] == "rejected" and refused.json()["empty_result"] is True
    long = httpx.post(f"{base}/query/sql", json={"sql": "SELECT '" + "x" * 70000 + "'"}, timeout=30)
    assert long.status_code == 200 and long.json()["error_code"] == "invalid_parameter"
    unknown = httpx.post(f"{base}/query/sql", json={"sql": "SELECT 1", "colour": 1}, timeout=30)
    assert unknown.status_code == 422 and isinstance(unknown.json()["detail"], list)
    explain = httpx.post(f"{base}/query/sql/explain", json={"sql": "SELECT 1", "max_rows": 5}, timeout=30)
    assert explain.status_code == 422


def test_discovery_routes(base: str) -> None:
    space = httpx.get(f"{base}/query/space", params={"pattern": "facts_*"}, timeout=30).json()
    assert space["schema"] == "memory_v1" and {v["name"] for v in space["views"]} == {
        "facts_current", "facts_visible_history"}
    assert space["examples"] == [] and len(space["functions"]) == 12
    hits = httpx.get(f"{base}/query/space/search", params={"query": "evidence lineage"}, timeout=30).json()
    assert hits[0]["name"] == "evidence_lineage" and hits[0]["kind"] == "view"
    blank = httpx.get(f"{base}/query/space/search", params={"query": "   "}, timeout=30)
    assert blank.status_code == 422
    assert blank.json() == {"detail": {"code": "invalid_parameter", "message": "query must be non-empty"}}


def test_saved_routes(base: str) -> None:
    listed = httpx.get(f"{base}/query/saved", params={"namespace": "examples"}, timeout=30).json()
    assert len(listed) == 18 and listed[0]["status"] == "active" and listed[0]["origin"] == "shipped_example"
    described = httpx.get(f"{base}/query/saved/examples/changed_since", timeout=30).json()
    assert described["query_space_major"] == "memory_v1" and "changes_visible" in described["sql"]
    run = httpx.post(f"{base}/query/saved/examples/changed_since/run",
                     json={"parameters": ["2000-01-01T00:00:00Z"]}, timeout=30).json()
    assert run["saved_query"]["version"] == "1" and run["rows"]
    missing = httpx.get(f"{base}/query/saved/examples/nope", timeout=30)
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "saved_query_not_found"
    bad_status = httpx.get(f"{base}/query/saved", params={"status": "shiny"}, timeout=30)
    assert bad_status.status_code == 422


def test_deployment_lists_the_sql_tools(base: str) -> None:
    tools = httpx.get(f"{base}/deployment", timeout=30).json()["tools"]
    for name in ("query_sql", "explain_sql", "describe_query_space", "search_query_space", "list_saved_queries",
                 "describe_saved_query", "run_saved_query"):
        assert tools[name] == 1


@pytest.mark.skipif(not os.environ.get("REMEMBER_PYTHON"), reason="REMEMBER_PYTHON not set")
def test_the_real_remember_client_cli_and_mcp_tools(base: str, tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(f"""
import json, remember
from remember.mcp_engine import EngineMcpServer
c = remember.Client(base_url={base!r})
out = {{}}
r = c.query_sql(sql="SELECT fact_label FROM facts_current WHERE fact_label ~~ $1", parameters=["%exporter%"])
out["sql_rows"] = len(r["rows"])
out["open_query"] = len(c.open_query("SELECT claim_id FROM claims_live").rows)
out["explain"] = c.explain_query("SELECT * FROM claims_live").rows[0][0][0]["Plan"]["Node Type"] != ""
out["space"] = len(c.describe_query_space(include_examples=True)["examples"])
out["search"] = c.search_query_space(query="contradiction")[0]["name"]
out["saved"] = len(c.list_saved_queries())
out["describe_saved"] = c.describe_saved_query(namespace="examples", name="explain")["name"]
out["run_saved"] = c.run_saved_query(namespace="examples", name="changed_since",
                                     parameters=["2000-01-01T00:00:00Z"])["termination_reason"]
out["refused"] = c.query_sql(sql="DELETE FROM claims")["error_code"]
server = EngineMcpServer(client=c, path_ingest=False)
names = {{t["name"] for t in server.list_tools()["tools"]}}
out["mcp_tools"] = sorted(n for n in names if "query" in n or "sql" in n or "saved" in n)
call = server.call_tool(name="query_sql", arguments={{"sql": "SELECT count(*) FROM entities_current"}})
out["mcp_call"] = [call["isError"], json.loads(call["content"][0]["text"])["termination_reason"]]
bad = server.call_tool(name="run_saved_query", arguments={{"namespace": "examples", "name": "nope"}})
out["mcp_missing"] = [bad["isError"], bad["content"][0]["text"]]
print(json.dumps(out))
""")
    result = subprocess.run([os.environ["REMEMBER_PYTHON"], str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["sql_rows"] >= 1 and out["open_query"] >= 2 and out["explain"] is True
    assert out["space"] == 18 and out["saved"] == 18 and out["describe_saved"] == "explain"
    assert out["run_saved"] == "completed" and out["refused"] == "statement_not_allowed"
    assert len(out["mcp_tools"]) == 7, out["mcp_tools"]
    assert out["mcp_call"] == [False, "completed"]
    assert out["mcp_missing"][0] is True and "saved_query_not_found" in out["mcp_missing"][1]
    remember = [os.environ["REMEMBER_PYTHON"], "-m", "remember"]
    env = {**os.environ, "REMEMBER_API_URL": base}
    for args in (["query", "sql", "SELECT count(*) FROM claims_live"], ["query", "space", "--pattern", "claims_*"],
                 ["query", "search-space", "lineage"], ["query", "list-saved"],
                 ["query", "describe-saved", "examples", "claims_about"],
                 ["query", "run-saved", "examples", "changed_since", "--parameters", '["2000-01-01T00:00:00Z"]']):
        cli = subprocess.run([*remember, *args], capture_output=True, text=True, timeout=60, env=env)
        assert cli.returncode == 0, (args, cli.stdout, cli.stderr)


def test_operator_export_and_authoring_rpcs_need_write(fresh_dsn: str, tmp_path: Path) -> None:
    import asyncio

    import grpc
    from testament.queryspace.v1 import queryspace_pb2 as pb
    from testament.queryspace.v1 import queryspace_pb2_grpc

    from services.platform.auth import Scope
    from services.platform.credentials_pg import PgCredentials
    from services.platform.db import Database

    async def keys() -> tuple[str, str]:
        db = await Database.connect(fresh_dsn, min_size=1, max_size=1)
        try:
            read, _ = await PgCredentials(db).create_key(scope=Scope.READ, label="r")
            write, _ = await PgCredentials(db).create_key(scope=Scope.WRITE, label="w")
            return read, write
        finally:
            await db.close()

    read, write = asyncio.run(keys())
    with run_service("queryspace", fresh_dsn, tmp_path) as svc, grpc.insecure_channel(svc.address) as channel:
        stub = queryspace_pb2_grpc.QuerySpaceServiceStub(channel)

        def auth(key: str) -> list[tuple[str, str]]:
            return [("authorization", f"Bearer {key}")]

        with pytest.raises(grpc.RpcError) as denied:
            list(stub.ExportSql(pb.ExportSqlRequest(sql="SELECT 1"), metadata=auth(read), timeout=10))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        items = list(stub.ExportSql(pb.ExportSqlRequest(
            sql="SELECT x FROM (VALUES (1), (2), (3)) v(x) ORDER BY x", max_rows=50000),
            metadata=auth(write), timeout=10))
        assert items[0].WhichOneof("item") == "header" and items[-1].WhichOneof("item") == "trailer"
        trailer = items[-1].trailer
        assert trailer.limits.analytical_tier and trailer.limits.row_cap == 10000 and trailer.returned_row_count == 3
        rows = [r for i in items if i.WhichOneof("item") == "rows" for r in i.rows.rows]
        assert [r.values[0].number_value for r in rows] == [1, 2, 3]
        refused = list(stub.ExportSql(pb.ExportSqlRequest(sql="SELECT * FROM pg_class"), metadata=auth(write),
                                      timeout=10))
        assert len(refused) == 1 and refused[0].trailer.error_code == pb.QUERY_ERROR_CODE_RELATION_NOT_ALLOWED
        draft = stub.CreateSavedQuery(pb.CreateSavedQueryRequest(
            namespace="team", name="facts", sql="SELECT count(*) FROM facts_current", author_principal="ana"),
            metadata=auth(write), timeout=10).saved_query
        assert draft.status == pb.SAVED_QUERY_STATUS_DRAFT
        with pytest.raises(grpc.RpcError) as own:
            stub.ApproveSavedQuery(pb.ApproveSavedQueryRequest(query_id=draft.query_id, approver_principal="ana"),
                                   metadata=auth(write), timeout=10)
        assert own.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        active = stub.ApproveSavedQuery(pb.ApproveSavedQueryRequest(query_id=draft.query_id,
                                                                    approver_principal="bo"),
                                        metadata=auth(write), timeout=10).saved_query
        assert active.status == pb.SAVED_QUERY_STATUS_ACTIVE
        assert active.assurance == pb.SAVED_QUERY_ASSURANCE_CUSTOMER_REVIEWED
        ran = stub.RunSavedQuery(pb.RunSavedQueryRequest(namespace="team", name="facts"), metadata=auth(read),
                                 timeout=10).result
        assert ran.termination_reason == pb.QUERY_TERMINATION_REASON_COMPLETED and ran.saved_query.version == "1"
        off = stub.SetSavedQueryStatus(pb.SetSavedQueryStatusRequest(query_id=draft.query_id,
                                                                     status=pb.SAVED_QUERY_STATUS_DISABLED),
                                       metadata=auth(write), timeout=10).saved_query
        assert off.status == pb.SAVED_QUERY_STATUS_DISABLED
        with pytest.raises(grpc.RpcError) as create_denied:
            stub.CreateSavedQuery(pb.CreateSavedQueryRequest(namespace="team", name="x", sql="SELECT 1",
                                                             author_principal="ana"), metadata=auth(read), timeout=10)
        assert create_denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
