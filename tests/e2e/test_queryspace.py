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
