"""The query space over real data: documents go through the real ingest and pipeline
processes; statements run through the queryspace use cases against the same PostgreSQL.
Views are checked against the authority tables; a restricted key sees in SQL exactly what
the assured operations show it."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.queryspace.adapters import PgQuerySpace, PgSavedQueries
from services.queryspace.app import QuerySpace, Request
from services.queryspace.functions import Evaluator
from services.retrieval.adapters import SearchLegs
from services.retrieval.app import Retrieval
from services.retrieval.domain import CURRENT
from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.support import run_service

DOCS = [
    ("kickoff", "# Kickoff notes\n\nRavi has been on the billing migration since yesterday.\n"
                "Dana owns the invoice exporter.\n", "2026-01-15T10:00:00Z", []),
    ("standup", "# Stand-up, 17 September 2026\n\nRavi said the billing migration moves from June to October, "
                "because the invoice exporter needs a rewrite. Dana agreed and will tell finance.\n"
                "Ravi owns the invoice exporter.\n", "2026-09-17T09:30:00Z", []),
    ("retro", "# Retro notes\n\nRavi moved from the billing migration to the search team on 1 June.\n",
     "2026-06-12T14:00:00Z", []),
    ("budget", "# Finance review\n\nMira approved the billing budget for the ledger rewrite.\n"
               "Mira owns the payment ledger.\n", "2026-08-03T11:00:00Z", ["finance"]),
]


@pytest.fixture(scope="module")
def loaded(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("qs")
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5"}
    with run_service("ingest", dsn, tmp, **env) as ingest, run_service("pipeline", dsn, tmp, **env) as pipeline:
        stack = Pipeline(dsn, ingest.address, pipeline.address, tmp)
        for ref, text, said_on, acl in DOCS:
            version = stack.upload(text.encode(), f"{ref}.md", source_kind="file", source_ref=ref,
                                   source_modified_at=said_on, acl=acl)
            assert stack.wait(version.version_id).ready
    yield dsn


class Harness:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.loop = asyncio.new_event_loop()
        self.db = self.loop.run_until_complete(Database.connect(dsn, min_size=1, max_size=4))
        self.service = QuerySpace(PgQuerySpace(self.db), PgSavedQueries(self.db),
                                  Evaluator(SearchLegs(), HashEmbeddings(dimension=384)))
        self.loop.run_until_complete(self.service.start())
        self.space = self.loop.run_until_complete(self.db.fetchval("SELECT space_id FROM spaces WHERE is_default"))

    def caller(self, principals: list[str] | None = None) -> Caller:
        return Caller(self.space, Scope.READ, None if principals is None else frozenset(principals),
                      credential_id=None if principals is None else uuid.uuid4())

    def sql(self, text: str, *params: Any, principals: list[str] | None = None, **kw: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self.service.run(self.caller(principals), Request(text, list(params),
                                                                                             **kw)))

    def rows(self, text: str, *params: Any, principals: list[str] | None = None) -> list[list[Any]]:
        result = self.sql(text, *params, principals=principals)
        assert result["termination_reason"] == "completed", result
        return result["rows"]

    def authority(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return self.loop.run_until_complete(self.db.fetch(query, *args))

    def close(self) -> None:
        self.loop.run_until_complete(self.db.close())
        self.loop.close()


@pytest.fixture(scope="module")
def qs(loaded: str) -> Iterator[Harness]:
    harness = Harness(loaded)
    try:
        yield harness
    finally:
        harness.close()


def test_every_view_answers_with_its_manifest_columns(qs: Harness) -> None:
    from services.queryspace.manifest import VIEWS
    assert qs.service.schema_problems == []
    for name, view in VIEWS.items():
        result = qs.sql(f"SELECT * FROM {name}")
        assert result["termination_reason"] == "completed", (name, result["error_message"])
        assert [c["name"] for c in result["columns"]] == [c.name for c in view.columns]
        assert result["source_grain_tags"] == [view.grain]


def test_facts_current_holds_exactly_the_current_facts(qs: Harness) -> None:
    rows = qs.rows("SELECT fact_id, fact_label, evidence_count FROM facts_current ORDER BY fact_id")
    got = {uuid.UUID(r[0]): r for r in rows}
    now = dt.datetime.now(dt.UTC)
    expected = {r["fact_id"] for r in qs.authority(
        """SELECT f.fact_id FROM facts f WHERE f.invalidated_at IS NULL
              AND (f.valid_from IS NULL OR f.valid_from <= $1) AND (f.valid_until IS NULL OR f.valid_until > $1)
              AND NOT (f.superseded_by IS NOT NULL AND f.valid_until IS NULL)
              AND EXISTS (SELECT 1 FROM fact_evidence e JOIN claims c ON c.claim_id = e.claim_id
                            JOIN documents d ON d.doc_id = c.doc_id
                           WHERE e.fact_id = f.fact_id AND e.stance = 'supports' AND c.is_current_testimony
                             AND d.deleted_at IS NULL)""", now)}
    assert set(got) == expected and expected
    # bigint counts travel as exact decimal strings
    assert all(isinstance(r[2], str) and int(r[2]) >= 1 for r in rows)
    labels = {r[1] for r in rows}
    assert "Ravi works on search team" in labels
    assert "Ravi works on billing migration" not in labels  # ended on 1 June (half-open window)


def test_evidence_count_is_distinct_live_lineages(qs: Harness) -> None:
    rows = qs.rows("""SELECT f.fact_id, f.evidence_count,
                             (SELECT count(*) FROM evidence_lineage l WHERE l.fact_id = f.fact_id
                                 AND l.stance = 'supports') AS lineages
                        FROM facts_current f""")
    assert rows and all(int(r[1]) == int(r[2]) for r in rows)


def test_a_restricted_key_sees_in_sql_what_the_operations_show(qs: Harness) -> None:
    everyone = {r[0] for r in qs.rows("SELECT doc_id FROM documents_live")}
    outsider = {r[0] for r in qs.rows("SELECT doc_id FROM documents_live", principals=["engineering"])}
    insider = {r[0] for r in qs.rows("SELECT doc_id FROM documents_live", principals=["finance"])}
    assert len(everyone) == 4 and len(outsider) == 3 and insider == everyone
    hidden = everyone - outsider
    for view, column in (("claims_live", "doc_id"), ("chunks_live", "doc_id"), ("mentions_live", "doc_id"),
                         ("fact_claim_evidence_live", "doc_id"), ("document_versions_visible", "doc_id")):
        seen = {r[0] for r in qs.rows(f"SELECT {column} FROM {view}", principals=["engineering"])}
        assert not seen & hidden, view
    names = {r[0] for r in qs.rows("SELECT canonical_name FROM entities_current", principals=["engineering"])}
    assert "Mira" not in names and "Ravi" in names
    labels = {r[0] for r in qs.rows("SELECT fact_label FROM facts_current", principals=["engineering"])}
    assert not any("Mira" in label for label in labels)
    # the same caller through the assured operation
    caller = qs.caller(["engineering"])
    retrieval = Retrieval(qs.db, HashEmbeddings(dimension=384), graph=None)
    env = qs.loop.run_until_complete(retrieval.facts_context(caller, "who owns the payment ledger", None, 30, 5, 1,
                                                             None, CURRENT))
    assert {f.label for f in env.facts} <= labels
    claims = {r[0] for r in qs.rows("SELECT claim_id FROM claims_live", principals=["engineering"])}
    env = qs.loop.run_until_complete(retrieval.claims_and_sources(caller, "billing ledger budget", None, 50, 200))
    assert {e.claim_id for e in env.evidence} <= claims


def test_the_role_cannot_read_base_tables_even_past_the_guard(qs: Harness) -> None:
    async def probe() -> str:
        async with qs.service.store.sandbox(qs.caller(), qs.service.tier.settings(1000)) as conn:
            from services.queryspace.adapters import StatementFailed
            try:
                await qs.service.store.run(conn, "SELECT count(*) FROM public.documents", [], [], probe=2,
                                           timeout_s=2)
            except StatementFailed as exc:
                return exc.code + ":" + exc.message
        return "read"
    assert qs.loop.run_until_complete(probe()) == "execution_error:the statement reached outside the query space"


def _space_entity(qs: Harness, name: str) -> str:
    rows = qs.rows("SELECT entity_id FROM entities_current WHERE canonical_name = $1", name)
    assert rows, name
    return rows[0][0]


def test_hostile_statements_never_reach_the_database(pg, loaded: str) -> None:
    from tests.unit.test_queryspace_guard import CORPUS
    name = loaded.rsplit("/", 1)[1]
    pg._psql("postgres", f'ALTER DATABASE "{name}" SET log_statement = \'all\'')
    harness = Harness(loaded)
    marker = uuid.uuid4().hex
    try:
        for sql, params, code in CORPUS:
            result = harness.sql(f"{sql}\n-- hostile {marker}", *params)
            assert result["termination_reason"] == "rejected", sql[:100]
            assert result["error_code"] == code, (sql[:100], result["error_message"])
            assert result["empty_result"] and result["rows"] == [] and result["pg_snapshot_at"] is None
        control = harness.sql(f"SELECT 1\n-- benign {marker}")
        assert control["termination_reason"] == "completed"
    finally:
        harness.close()
        pg._psql("postgres", f'ALTER DATABASE "{name}" RESET log_statement')
    log = (pg.data_dir / "server.log").read_text(errors="replace")
    assert f"benign {marker}" in log  # statements are logged...
    assert f"hostile {marker}" not in log  # ...and not one hostile statement got there


def test_generated_admissible_statements_run(qs: Harness) -> None:
    import random

    from tests.unit.test_queryspace_guard import generate
    rng = random.Random(11)
    for _ in range(120):
        sql = generate(rng)
        result = qs.sql(sql)
        assert result["termination_reason"] == "completed", (sql, result["error_message"])


def test_truncation_is_exact_and_caps_clamp(qs: Harness) -> None:
    total = len(qs.rows("SELECT claim_id FROM claims_live"))
    assert total > 3
    cut = qs.sql("SELECT claim_id FROM claims_live ORDER BY claim_id", max_rows=2)
    assert cut["truncated"] and cut["truncation_reason"] == "row_cap" and cut["returned_row_count"] == 2
    assert cut["ordered_result"]
    exact = qs.sql("SELECT claim_id FROM claims_live", max_rows=total)
    assert not exact["truncated"] and exact["returned_row_count"] == total  # count == limit is not truncation
    none = qs.sql("SELECT claim_id FROM claims_live", max_rows=0)
    assert none["truncated"] and none["rows"] == [] and none["empty_result"]
    clamped = qs.sql("SELECT 1", max_rows=5000)
    assert clamped["limits"]["row_cap"] == 1000 and clamped["termination_reason"] == "completed"
    first = qs.rows("SELECT claim_id, claim_text FROM claims_live ORDER BY claim_id LIMIT 3")
    s1, s2, s3 = (len(json_row(r).encode()) for r in first)
    cap = 2 + s1 + 1 + s2 + s3 // 2  # "[row1,row2" fits, ",row3]" does not, whatever the texts' lengths
    small = qs.sql("SELECT claim_id, claim_text FROM claims_live ORDER BY claim_id", max_bytes=cap)
    assert small["truncation_reason"] == "byte_cap" and small["returned_row_count"] == 2
    assert small["returned_byte_count"] == 2 + s1 + 1 + s2 <= cap


def json_row(row: list[Any]) -> str:
    import json
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def test_cells_are_encoded_by_sql_type(qs: Harness) -> None:
    result = qs.sql("""SELECT 1::int4, 9007199254740993::int8, 1.5::float8, 'NaN'::float8, '-inf'::float8,
                              12345678901234567890.5::numeric, true, NULL::text,
                              '2026-01-01T10:00:00+02:00'::timestamptz, interval '1 day 2 hours',
                              '{"a": [1, null]}'::jsonb, ARRAY[1, 2]::int8[],
                              '00000000-0000-0000-0000-000000000001'::uuid,
                              '2026-01-01'::date""")
    assert result["termination_reason"] == "completed", result["error_message"]
    assert result["rows"] == [[1, "9007199254740993", 1.5, "NaN", "-inf", "12345678901234567890.5", True, None,
                               "2026-01-01T08:00:00+00:00", "P1DT2H", {"a": [1, None]}, ["1", "2"],
                               "00000000-0000-0000-0000-000000000001", "2026-01-01"]]
    types = [c["type"] for c in result["columns"]]
    assert types[:3] == ["integer", "bigint", "double precision"] and types[8] == "timestamp with time zone"
    assert types[11] == "bigint[]" and all(c["nullable"] for c in result["columns"])


def test_failures_and_rejections_are_results(qs: Harness) -> None:
    bad_cast = qs.sql("SELECT claim_text::uuid FROM claims_live")
    assert bad_cast["termination_reason"] == "failed" and bad_cast["error_code"] == "execution_error"
    assert "Ravi" not in bad_cast["error_message"]  # never echoes row data
    wrong_count = qs.sql("SELECT $1::text", "a", "b")
    assert wrong_count["termination_reason"] == "rejected" and wrong_count["error_code"] == "invalid_parameter"
    bad_param = qs.sql("SELECT $1::timestamptz", "not a time")
    assert bad_param["termination_reason"] == "failed" and bad_param["error_code"] == "execution_error"
    bad_filter = qs.sql("SELECT * FROM lexical_claims('ravi', 5, '{\"colour\": 1}')")
    assert bad_filter["termination_reason"] == "failed" and bad_filter["error_code"] == "invalid_parameter"
    slow = qs.sql("WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r, claims_live c, "
                  "claims_live d, claims_live e WHERE depth < 6) SELECT count(*) FROM r", statement_timeout_ms=50)
    assert slow["error_code"] in ("statement_timeout", "resource_limit"), slow["error_message"]


def test_evaluated_at_only_for_single_instant_views(qs: Harness) -> None:
    single = qs.sql("SELECT count(*) FROM facts_current f JOIN graph_edges_current g ON g.relation_id = f.fact_id")
    assert single["evaluated_at"] is not None and single["evaluated_at"] == single["pg_snapshot_at"]
    mixed = qs.sql("SELECT count(*) FROM facts_current, claims_live")
    assert mixed["evaluated_at"] is None


def test_explain_returns_one_plan_row_and_calls_no_search(qs: Harness) -> None:
    result = qs.sql("SELECT * FROM lexical_claims('billing', 5) l JOIN claims_live c ON c.claim_id = l.claim_id",
                    explain=True)
    assert result["termination_reason"] == "completed", result["error_message"]
    assert result["returned_row_count"] == 1 and result["semantic_invocations"] == []
    plan = result["rows"][0][0]
    assert isinstance(plan, list) and "Plan" in plan[0]


def test_search_functions_confirm_through_the_views(qs: Harness) -> None:
    result = qs.sql("SELECT l.rank, l.claim_text, l.channel FROM lexical_claims('billing migration', 10) l "
                    "ORDER BY l.rank")
    assert result["termination_reason"] == "completed", result["error_message"]
    assert result["rows"] and all("billing" in r[1].lower() or "migration" in r[1].lower() for r in result["rows"])
    invocation = result["semantic_invocations"][0]
    assert invocation["function"] == "lexical_claims" and invocation["confirmed"] == len(result["rows"])
    hidden = qs.sql("SELECT claim_text FROM lexical_claims('ledger budget', 10)", principals=["engineering"])
    assert not any("Mira" in r[0] for r in hidden["rows"])
    semantic = qs.sql("SELECT s.claim_id FROM semantic_claims('who owns the invoice exporter', 5) s")
    assert semantic["termination_reason"] == "completed", semantic["error_message"]
    assert semantic["semantic_invocations"][0]["embedder_generation"]
    chunks = qs.rows("SELECT chunk_id FROM lexical_chunks('invoice exporter', 3)")
    assert chunks
    bodies = qs.sql("SELECT input_ordinal, source_text FROM fetch_chunk_bodies($1::uuid[])", [chunks[0][0]])
    assert bodies["termination_reason"] == "completed", bodies["error_message"]
    assert "exporter" in bodies["rows"][0][1]
    too_many = qs.sql("SELECT * FROM lexical_claims('a', 100), lexical_claims('b', 100), lexical_chunks('c', 10)")
    assert too_many["error_code"] == "quota_exceeded" and too_many["termination_reason"] == "rejected"


def test_graph_functions_need_the_callers_deployment(qs: Harness) -> None:
    ravi = _space_entity(qs, "Ravi")
    result = qs.sql("SELECT row_kind, hops, node_ids FROM graph_neighborhood($1::uuid, $2::uuid, 2)",
                    str(qs.space), ravi)
    assert result["termination_reason"] == "completed", result["error_message"]
    assert result["rows"] and all(r[2][0] == ravi for r in result["rows"])
    assert result["graph_invocations"][0]["function"] == "graph_neighborhood"
    assert result["limits"]["statement_timeout_ms"] == 5000
    other = qs.sql("SELECT * FROM graph_neighborhood($1::uuid, $2::uuid)", str(uuid.uuid4()), ravi)
    assert other["error_code"] == "invalid_parameter" and other["termination_reason"] == "rejected"


def test_the_eighteen_examples_run_with_their_semantics(qs: Harness) -> None:
    listed = qs.loop.run_until_complete(qs.service.list_saved(qs.caller(), "examples", None))
    assert len(listed) == 18 and all(r["origin"] == "shipped_example" and r["status"] == "active" for r in listed)
    ravi, dana = _space_entity(qs, "Ravi"), _space_entity(qs, "Dana")

    def run(name: str, *params: Any) -> dict[str, Any]:
        result = qs.loop.run_until_complete(qs.service.run_saved(qs.caller(), "examples", name, None, list(params),
                                                                  None))
        assert result["termination_reason"] == "completed", (name, result["error_message"])
        assert result["saved_query"]["namespace"] == "examples" and result["saved_query"]["version"] == "1"
        return result

    labels = {r[4] for r in run("relation_current", ravi)["rows"]}
    assert "Ravi works on search team" in labels and "Ravi works on billing migration" not in labels
    assert all(ravi in (r[2], r[3]) for r in run("relation_current", ravi)["rows"])
    about = run("claims_about", ravi)["rows"]
    assert about and all("Ravi" in r[1] for r in about)
    assert [r[2] for r in about] == sorted((r[2] for r in about), reverse=True)
    docs = run("documents_about", ravi)["rows"]
    assert len(docs) == 3 and [int(r[4]) for r in docs] == sorted((int(r[4]) for r in docs), reverse=True)
    # half-open canonical windows against the inclusive interval
    window = run("claims_as_of", "2026-01-14T00:00:00Z", "2026-01-14T23:59:59Z")["rows"]
    assert all(r[2] != "unknown" for r in window)
    verbatim = run("claims_verbatim", "invoice exporter")
    assert verbatim["semantic_invocations"]
    rrf = run("claims_hybrid_rrf", "billing migration")
    assert len(rrf["semantic_invocations"]) == 2 and rrf["rows"]
    assert run("chunks_hybrid_rrf", "invoice exporter")["rows"]
    chunk = qs.rows("SELECT chunk_id FROM chunks_live LIMIT 1")[0][0]
    neighbors = run("chunk_neighbors", chunk)["rows"]
    assert any(r[0] == chunk and r[2] == 0 for r in neighbors)
    assert run("pages_about", ravi)["rows"] == []
    run("observation_current", ravi)
    identity = run("identity_as_of", ravi, "2100-01-01T00:00:00Z")["rows"]
    assert identity and all(r[2] == ravi for r in identity)
    assert run("identity_as_of", ravi, "2000-01-01T00:00:00Z")["rows"] == []
    timeline = run("entity_timeline", ravi)["rows"]
    assert timeline and sum(int(r[1]) for r in timeline) >= 2
    fact = qs.rows("SELECT fact_id FROM facts_current WHERE fact_label = 'Ravi works on search team'")[0][0]
    parts = {r[0] for r in run("explain", fact)["rows"]}
    assert {"fact", "evidence:supports", "lineage:supports"} <= parts
    assert run("changed_since", "2000-01-01T00:00:00Z")["rows"]
    assert run("changed_since", "2100-01-01T00:00:00Z")["rows"] == []
    neighborhood = run("graph_neighborhood", str(qs.space), ravi)
    assert neighborhood["graph_invocations"]
    run("graph_path", str(qs.space), ravi, dana)
    docs_ids = [r[0] for r in qs.rows("SELECT doc_id FROM documents_live ORDER BY doc_id LIMIT 2")]
    run("graph_citation_path", str(qs.space), *docs_ids)
    run("multi_hop_context", str(qs.space), ravi, dana, "invoice exporter")


def test_saved_query_review_and_versions(qs: Harness) -> None:
    svc, caller, loop = qs.service, qs.caller(), qs.loop
    draft = loop.run_until_complete(svc.author(qs.space, "team", "owners", "SELECT fact_label FROM facts_current "
                                               "WHERE fact_kind = 'relation' ORDER BY 1", author="ana"))
    assert draft["status"] == "draft" and draft["version"] == 1
    with pytest.raises(Exception) as disabled:
        loop.run_until_complete(svc.run_saved(caller, "team", "owners", None, [], None))
    assert getattr(disabled.value, "reason", "") == "SAVED_QUERY_DISABLED"
    with pytest.raises(Exception) as own:
        loop.run_until_complete(svc.approve(draft["query_id"], "ana"))
    assert "author" in str(own.value)
    active = loop.run_until_complete(svc.approve(draft["query_id"], "bo"))
    assert active["status"] == "active" and active["approver_principal"] == "bo"
    first = loop.run_until_complete(svc.run_saved(caller, "team", "owners", None, [], None))
    assert first["termination_reason"] == "completed" and first["rows"]
    second = loop.run_until_complete(svc.author(qs.space, "team", "owners", "SELECT count(*) FROM facts_current",
                                                author="ana"))
    loop.run_until_complete(svc.approve(second["query_id"], "bo"))
    # unpinned runs take the new active version; a pinned deprecated version is refused
    assert loop.run_until_complete(svc.run_saved(caller, "team", "owners", None, [], None))["columns"][0][
        "name"] == "count"
    with pytest.raises(Exception) as pinned:
        loop.run_until_complete(svc.run_saved(caller, "team", "owners", 1, [], None))
    assert getattr(pinned.value, "reason", "") == "SAVED_QUERY_DISABLED"
    pinned_two = loop.run_until_complete(svc.run_saved(caller, "team", "owners", 2, [], None))
    assert pinned_two["saved_query"]["version"] == "2"
    with pytest.raises(Exception) as missing:
        loop.run_until_complete(svc.run_saved(caller, "team", "nope", None, [], None))
    assert getattr(missing.value, "reason", "") == "SAVED_QUERY_NOT_FOUND"
    with pytest.raises(Exception) as bad:
        loop.run_until_complete(svc.author(qs.space, "team", "bad", "DELETE FROM claims", author="ana"))
    assert getattr(bad.value, "reason", "") == "SAVED_QUERY_INCOMPATIBLE"
    # a manifest change moves active versions to pending_revalidation; shipped examples come back
    moved = loop.run_until_complete(svc.saved.revalidation_due("another-manifest"))
    assert moved >= 19
    with pytest.raises(Exception) as pending:
        loop.run_until_complete(svc.run_saved(caller, "team", "owners", None, [], None))
    assert getattr(pending.value, "reason", "") == "SAVED_QUERY_REVALIDATION_PENDING"
    svc._seeded.clear()
    loop.run_until_complete(svc.ensure_examples(qs.space))
    assert len(loop.run_until_complete(svc.list_saved(caller, "examples", None))) == 18
    revalidated = loop.run_until_complete(svc.approve(second["query_id"], "bo"))
    assert revalidated["status"] == "active"
    drafts = loop.run_until_complete(svc.list_saved(caller, None, "draft"))
    assert all(r["status"] == "draft" for r in drafts)


def test_testament_queries_commands_author_and_review(loaded: str) -> None:
    import json
    import subprocess
    import sys

    from tests.support import REPO, service_env

    def cli(*args: str) -> tuple[int, Any]:
        done = subprocess.run([sys.executable, "-m", "services.cli", "queries", *args], cwd=REPO,
                              env=service_env(loaded), capture_output=True, text=True, timeout=60)
        return done.returncode, json.loads(done.stdout)

    code, draft = cli("author", "ops", "latest_changes", "--sql",
                      "SELECT object_kind, occurred_at FROM changes_visible ORDER BY occurred_at DESC LIMIT 10",
                      "--author", "ana")
    assert code == 0 and draft["status"] == "draft"
    code, refused = cli("approve", draft["query_id"], "--approver", "ana")
    assert code == 1 and "author" in refused["detail"]
    code, active = cli("approve", draft["query_id"], "--approver", "bo")
    assert code == 0 and active["status"] == "active" and active["approver_principal"] == "bo"
    code, listed = cli("list", "--namespace", "ops")
    assert code == 0 and [r["name"] for r in listed] == ["latest_changes"]
    code, bad = cli("author", "examples", "mine", "--sql", "SELECT 1", "--author", "ana")
    assert code == 1
    code, disabled = cli("disable", draft["query_id"])
    assert code == 0 and disabled["status"] == "disabled"


def test_views_that_differ_from_the_manifest_refuse_every_statement(fresh_dsn: str) -> None:
    async def run() -> tuple[list[str], dict[str, Any]]:
        db = await Database.connect(fresh_dsn, min_size=1, max_size=2)
        try:
            await db.execute("CREATE OR REPLACE VIEW memory_v1.pages_live AS SELECT *, 1 AS extra "
                             "FROM memory_v1.pages_live WHERE false")
            service = QuerySpace(PgQuerySpace(db), PgSavedQueries(db), Evaluator(SearchLegs(), None))
            await service.start()
            space = await db.fetchval("SELECT space_id FROM spaces WHERE is_default")
            result = await service.run(Caller(space, Scope.READ, None), Request("SELECT 1", []))
            return service.schema_problems or [], result
        finally:
            await db.close()

    problems, result = asyncio.run(run())
    assert problems == ["pages_live"]
    assert result["error_code"] == "schema_version_mismatch" and result["termination_reason"] == "rejected"


def test_redaction_applies_to_sql_text_cells(fresh_dsn: str) -> None:
    from services.platform.redaction import RedactionPolicy, Redactor

    async def run() -> list[list[Any]]:
        db = await Database.connect(fresh_dsn, min_size=1, max_size=2)
        try:
            redactor = Redactor(RedactionPolicy.from_json('{"rules": [{"name": "mail", "detector": "email"}]}'))

            def redact(text: str, caller: Caller) -> str:
                return redactor.redact_output(text, caller.principals).text

            service = QuerySpace(PgQuerySpace(db), PgSavedQueries(db), Evaluator(SearchLegs(), None), redact=redact)
            await service.start()
            space = await db.fetchval("SELECT space_id FROM spaces WHERE is_default")
            result = await service.run(Caller(space, Scope.READ, None),
                                       Request("SELECT 'write to ana@example.com'::text, ARRAY['ana@example.com'], 7",
                                               []))
            return result["rows"]
        finally:
            await db.close()

    rows = asyncio.run(run())
    assert "ana@example.com" not in str(rows) and rows[0][2] == 7


def test_semantic_search_refuses_a_generation_it_does_not_hold(qs: Harness) -> None:
    pinned = qs.sql("SELECT * FROM semantic_claims('ravi', 5, NULL, 'v1', 'some-other-model')")
    assert pinned["error_code"] == "generation_unavailable" and pinned["termination_reason"] == "failed"
    model = qs.rows("SELECT DISTINCT embedder_generation FROM chunks_live")[0][0]
    same = qs.sql("SELECT * FROM semantic_claims('ravi', 5, NULL, 'v1', $1)", model)
    assert same["termination_reason"] == "completed", same["error_message"]


def test_canonical_bounds_are_half_open_and_claims_canonical_uses_them(qs: Harness) -> None:
    def bounds(start: str | None, end: str | None, precision: str) -> list[Any]:
        return qs.rows("SELECT canon_start, canon_end FROM canonical_bounds($1::timestamptz, $2::timestamptz, $3)",
                       start, end, precision)[0]

    assert bounds("2026-06-01T10:00:00Z", "2026-06-30T08:00:00Z", "day") == [
        "2026-06-01T00:00:00+00:00", "2026-07-01T00:00:00+00:00"]
    assert bounds("2026-06-15T00:00:00Z", None, "month") == ["2026-06-01T00:00:00+00:00", "2026-07-01T00:00:00+00:00"]
    assert bounds("2026-02-01T00:00:00Z", None, "year") == ["2026-01-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"]
    assert bounds("2026-06-01T10:00:00Z", None, "instant") == ["2026-06-01T10:00:00+00:00",
                                                               "2026-06-01T10:00:00.000001+00:00"]
    assert bounds("2026-06-01T00:00:00Z", None, "open") == ["2026-06-01T00:00:00+00:00", None]
    assert bounds("2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z", "unknown") == [None, None]
    # every claims_canonical row carries exactly the bounds of its own window
    mismatched = qs.rows("""SELECT count(*) FROM claims_canonical c
                             WHERE c.claim_valid_precision = 'day'
                               AND NOT (c.canon_start = date_trunc('day', c.claim_valid_from)
                                        AND c.canon_end = date_trunc('day', coalesce(c.claim_valid_until,
                                                                                     c.claim_valid_from))
                                                          + interval '1 day')""")
    assert mismatched == [["0"]]
    # half-open: a window ending where another starts does not overlap it
    touching = qs.rows("""SELECT a.canon_start < b.canon_end AND b.canon_start < a.canon_end
                            FROM canonical_bounds('2026-01-01'::timestamptz, '2026-01-31'::timestamptz, 'day') a,
                                 canonical_bounds('2026-02-01'::timestamptz, NULL, 'month') b""")
    assert touching == [[False]]


def test_facts_as_of_reads_world_and_belief_time(qs: Harness) -> None:
    def labels(valid_at: str, believed_at: str) -> set[str]:
        rows = qs.rows("SELECT fact_label, applied_valid_at, temporal_match FROM facts_as_of($1::timestamptz, "
                       "$2::timestamptz)", valid_at, believed_at)
        assert all(r[1] == valid_at.replace("Z", "+00:00") for r in rows)
        return {r[0] for r in rows}

    now = "2100-01-01T00:00:00Z"
    march = labels("2026-03-01T00:00:00Z", now)
    assert "Ravi works on billing migration" in march and "Ravi works on search team" not in march
    july = labels("2026-07-01T00:00:00Z", now)
    assert "Ravi works on search team" in july and "Ravi works on billing migration" not in july
    assert labels("2026-03-01T00:00:00Z", "2000-01-01T00:00:00Z") == set()  # nothing was believed yet
    result = qs.sql("SELECT count(*) FROM facts_as_of($1::timestamptz, $2::timestamptz, 1)", now, now)
    assert result["rows"] == [["1"]] and result["evaluated_at"] is not None


def test_restricted_sql_rows_equal_the_authority_rows_for_that_caller(qs: Harness) -> None:
    for principals in (["engineering"], ["finance"], []):
        sql_claims = {uuid.UUID(r[0]) for r in qs.rows("SELECT claim_id FROM claims_live", principals=principals)}
        truth = {r[0] for r in qs.authority(
            """SELECT c.claim_id FROM claims c JOIN documents d ON d.doc_id = c.doc_id
                WHERE c.is_current_testimony AND d.deleted_at IS NULL
                  AND (d.acl = '{}' OR d.acl && $1::text[])""", principals)}
        assert sql_claims == truth and truth, principals
        sql_mentions = {uuid.UUID(r[0]) for r in qs.rows("SELECT mention_id FROM mentions_live",
                                                         principals=principals)}
        mention_truth = {r[0] for r in qs.authority(
            """SELECT m.mention_id FROM mentions m JOIN claims c ON c.claim_id = m.claim_id
                 JOIN documents d ON d.doc_id = c.doc_id
                WHERE c.is_current_testimony AND d.deleted_at IS NULL AND (d.acl = '{}' OR d.acl && $1::text[])""",
            principals)}
        assert sql_mentions == mention_truth, principals


def test_one_connection_never_carries_one_callers_plan_to_another(loaded: str) -> None:
    # The caller is folded into each plan as a constant; a plan reused across callers on a
    # pooled connection would leak rows. One connection, the same texts, callers alternating.
    async def run() -> None:
        db = await Database.connect(loaded, min_size=1, max_size=1)
        try:
            service = QuerySpace(PgQuerySpace(db), PgSavedQueries(db),
                                 Evaluator(SearchLegs(), HashEmbeddings(dimension=384)))
            await service.start()
            space = await db.fetchval("SELECT space_id FROM spaces WHERE is_default")
            other = await db.fetchval("INSERT INTO spaces (slug, name) VALUES ('other', 'Other') RETURNING space_id")
            callers = {"all": Caller(space, Scope.READ, None), "eng": Caller(space, Scope.READ, frozenset({"eng"})),
                       "other": Caller(other, Scope.READ, None)}
            texts = ["SELECT count(*) FROM claims_live", "SELECT claim_text FROM claims_live WHERE claim_text ~~ $1",
                     "SELECT count(*) FROM lexical_claims('ledger budget', 10)"]
            seen: dict[tuple[str, str], Any] = {}
            for _ in range(3):
                for name, caller in callers.items():
                    for text in texts:
                        params = ["%Mira%"] if "$1" in text else []
                        result = await service.run(caller, Request(text, params))
                        assert result["termination_reason"] == "completed", result["error_message"]
                        previous = seen.setdefault((name, text), result["rows"])
                        assert result["rows"] == previous, (name, text)
            assert seen[("other", texts[0])] == [["0"]]
            assert seen[("eng", texts[1])] == [] and seen[("all", texts[1])]
            assert int(seen[("all", texts[0])][0][0]) > int(seen[("eng", texts[0])][0][0])
        finally:
            await db.close()

    asyncio.run(run())


def test_mutated_statements_always_come_back_as_a_result(qs: Harness) -> None:
    import random

    from tests.unit.test_queryspace_guard import _SOUP, ADMISSIBLE
    rng = random.Random(31)
    outcomes: dict[str, int] = {}
    for _ in range(150):
        tokens = rng.choice(ADMISSIBLE).split()
        i = rng.randrange(len(tokens))
        tokens.insert(i, rng.choice(_SOUP)) if rng.random() < 0.5 else tokens.pop(i) if len(tokens) > 1 else None
        text = " ".join(tokens)
        params = [str(uuid.uuid4())] * len({p for p in ("$1", "$2", "$3") if p in text})
        result = qs.sql(text, *params)
        assert result["termination_reason"] in ("completed", "rejected", "failed")
        assert (result["error_code"] is None) == (result["termination_reason"] == "completed"), result
        outcomes[result["termination_reason"]] = outcomes.get(result["termination_reason"], 0) + 1
    assert outcomes.get("completed", 0) > 10 and outcomes.get("rejected", 0) > 10
