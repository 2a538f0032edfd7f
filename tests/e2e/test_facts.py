"""The seed's worked examples as acceptance tests for facts, entities, time and reconciliation.

Documents go through the real ingest and pipeline processes (rules and hash providers);
the outcome is checked through the tables (the read services come later).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.support import run_service

UTC = dt.UTC


@contextmanager
def fresh_stack(pg, tmp: Path) -> Iterator[Pipeline]:
    dsn = clone_database(pg)
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5"}
    with run_service("ingest", dsn, tmp, **env) as ingest, run_service("pipeline", dsn, tmp, **env) as pipeline:
        yield Pipeline(dsn, ingest.address, pipeline.address, tmp)


def ingest(stack: Pipeline, ref: str, text: str, said_on: str, *, living: bool = False) -> ingest_pb2.UploadResponse:
    options = {"source_kind": "file", "source_ref": ref, "source_modified_at": said_on}
    if living:
        options["versioning_mode"] = ingest_pb2.VERSIONING_MODE_LIVING
    version = stack.upload(text.encode(), f"{ref}.md", **options)
    report = stack.wait(version.version_id)
    assert report.ready, report
    return version


def facts(stack: Pipeline) -> dict[str, dict]:
    rows = stack.sql(
        """SELECT f.fact_id, f.kind, f.label, f.valid_from, f.valid_until, f.valid_precision, f.invalidated_at,
                  f.superseded_by, f.contradiction_group, f.evidence_count, f.contradict_count
             FROM facts f""")
    return {r["label"]: dict(r) for r in rows}


def day(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_time_page_example_windows(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "kickoff", "# Kickoff notes\n\nRavi has been on the billing migration since yesterday.\n",
               "2026-01-15T10:00:00Z")
        ingest(stack, "retro", "# Retro notes\n\nRavi moved from the billing migration to the search team on 1 June.\n",
               "2026-06-12T14:00:00Z")
        ingest(stack, "oncall", "# On-call\n\nRavi is the on-call engineer for billing incidents.\n",
               "2026-09-01T08:00:00Z")
        held = facts(stack)
        billing = held["Ravi works on billing migration"]
        assert (billing["valid_from"], billing["valid_until"]) == (day("2026-01-14"), day("2026-06-01"))
        assert billing["invalidated_at"] is None  # ended in the world, still believed
        search = held["Ravi works on search team"]
        assert (search["valid_from"], search["valid_until"], search["valid_precision"]) == (
            day("2026-06-01"), None, "open")
        assert billing["superseded_by"] == search["fact_id"]
        oncall = next(f for label, f in held.items() if "on-call" in label)
        assert (oncall["valid_from"], oncall["valid_until"], oncall["valid_precision"]) == (None, None, "unknown")
        transcript = stack.sql("""SELECT outcome, related_id, features FROM fact_decisions WHERE fact_id = $1
                                  ORDER BY decided_at""", billing["fact_id"])
        assert [t["outcome"] for t in transcript] == ["add", "supersede"]
        assert transcript[1]["related_id"] == search["fact_id"]


def test_the_billing_migration_timeline(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "kickoff", "# Kickoff\n\nRavi leads the billing migration since January.\n"
               "The billing migration launch is planned for June.\n", "2026-01-20T10:00:00Z")
        ingest(stack, "planning", "# Planning\n\nThe billing migration launch moves to October.\n"
               "The invoice system needs a rewrite.\n", "2026-04-10T10:00:00Z")
        ingest(stack, "retro", "# Retro\n\nRavi moved to the search team on 1 June.\n"
               "Dana leads the billing migration since 1 June.\n", "2026-06-12T10:00:00Z")
        ingest(stack, "slides", "# Slides\n\nRavi leads billing.\n", "2026-02-10T10:00:00Z")
        held = facts(stack)
        ravi = held["Ravi leads billing migration"]
        dana = held["Dana leads billing migration"]
        assert ravi["valid_from"] == day("2026-01-01") and ravi["valid_until"] == day("2026-06-01")
        assert (dana["valid_from"], dana["valid_until"]) == (day("2026-06-01"), None)
        assert ravi["superseded_by"] == dana["fact_id"]
        # the February slide supports Ravi's period; it does not change who leads now
        assert ravi["evidence_count"] == 2 and dana["evidence_count"] == 1
        # labels are canonical statements built from the structured fact, not the sentence
        june = held["billing migration launch: June 2026"]
        october = held["billing migration launch: October 2026"]
        assert june["superseded_by"] == october["fact_id"] and october["superseded_by"] is None
        assert june["invalidated_at"] is None  # kept as history, with the kickoff notes as its source
        entities = stack.sql("SELECT canonical_name FROM entities WHERE normalized_name LIKE '%billing%'")
        assert [e[0] for e in entities] == ["billing migration"]  # "billing" resolved to the migration


def test_contradicting_dates_form_a_group_and_a_correction_moves_the_window(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "spec", "# Spec\n\nThe billing migration cutover is scheduled for 8 June 2026.\n",
               "2026-04-01T10:00:00Z")
        ingest(stack, "standup", "# Standup\n\nThe billing migration cutover is scheduled for 15 June 2026.\n",
               "2026-04-28T10:00:00Z")
        held = facts(stack)
        eight = held["billing migration cutover: 8 June 2026"]
        fifteen = held["billing migration cutover: 15 June 2026"]
        assert eight["contradiction_group"] is not None
        assert eight["contradiction_group"] == fifteen["contradiction_group"]
        ingest(stack, "correction", "# Correction\n\nThe billing migration cutover moved from 8 June 2026 to "
               "9 June 2026.\n", "2026-05-02T10:00:00Z")
        after = stack.sql("SELECT label, valid_from, valid_until FROM facts WHERE fact_id = $1", eight["fact_id"])[0]
        assert (after["valid_from"], after["valid_until"]) == (day("2026-06-09"), day("2026-06-10"))
        assert len(facts(stack)) == 2  # the correction kept the fact; it made no new one
        outcomes = [r[0] for r in stack.sql("SELECT outcome FROM fact_decisions WHERE fact_id = $1 "
                                             "ORDER BY decided_at", eight["fact_id"])]
        assert outcomes[-1] == "update"


def test_evidence_counts_distinct_documents(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        repeated = "# Transcript\n\n" + "\n\n".join(["Ravi owns the invoice exporter."] * 5) + "\n"
        ingest(stack, "transcript", repeated, "2026-03-01T10:00:00Z")
        for n in range(10):
            ingest(stack, "spec", f"# Spec v{n}\n\nRavi owns the invoice exporter.\n\nRevision {n}.\n",
                   f"2026-03-{n + 2:02d}T10:00:00Z")
        assert facts(stack)["Ravi owns invoice exporter"]["evidence_count"] == 2
        ingest(stack, "memo", "# Memo\n\nRavi owns the invoice exporter.\n", "2026-04-01T10:00:00Z")
        assert facts(stack)["Ravi owns invoice exporter"]["evidence_count"] == 3


def test_deletion_and_living_removal_retract_exactly_the_unsupported_facts(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        shared = ingest(stack, "a", "# A\n\nRavi owns the invoice exporter.\n\nDana leads finance.\n",
                        "2026-03-01T10:00:00Z")
        ingest(stack, "b", "# B\n\nRavi owns the invoice exporter.\n", "2026-03-02T10:00:00Z")
        with grpc.insecure_channel(stack.ingest) as channel:
            deletion = ingest_pb2_grpc.IngestServiceStub(channel).DeleteDocument(
                ingest_pb2.DeleteDocumentRequest(doc_id=shared.doc_id), timeout=10)
        assert (deletion.relations_closed, deletion.observations_closed) == (1, 0)
        held = facts(stack)
        assert held["Dana leads finance"]["invalidated_at"] is not None  # only document A said it
        assert held["Ravi owns invoice exporter"]["invalidated_at"] is None  # B still says it
        assert held["Ravi owns invoice exporter"]["evidence_count"] == 1

        living = "# Owners\n\nMira owns the payroll service.\n\nOmar owns the ledger.\n"
        ingest(stack, "owners", living, "2026-03-03T10:00:00Z", living=True)
        ingest(stack, "owners", "# Owners\n\nMira owns the payroll service.\n", "2026-03-04T10:00:00Z", living=True)
        held = facts(stack)
        assert held["Omar owns ledger"]["invalidated_at"] is not None
        assert held["Mira owns payroll service"]["invalidated_at"] is None
        retraction = stack.sql("SELECT outcome FROM fact_decisions WHERE fact_id = $1 ORDER BY decided_at",
                               held["Omar owns ledger"]["fact_id"])
        assert retraction[-1][0] == "retracted_source_removal"

        snapshot = "# Log\n\nLena owns the exporter cron.\n"
        ingest(stack, "log", snapshot, "2026-03-05T10:00:00Z")
        ingest(stack, "log", "# Log\n\nNothing else happened.\n", "2026-03-06T10:00:00Z")
        assert facts(stack)["Lena owns exporter cron"]["invalidated_at"] is None  # snapshots retract nothing


def test_names_resolve_to_one_entity_and_two_danas_stay_two(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "one", "# One\n\nRavi Shankar owns the invoice exporter.\n", "2026-03-01T10:00:00Z")
        ingest(stack, "two", "# Two\n\nRavi S. reports to Dana Kim.\n", "2026-03-02T10:00:00Z")
        ingest(stack, "three", "# Three\n\nRavi Shanker uses the billing dashboard.\n", "2026-03-03T10:00:00Z")
        ingest(stack, "four", "# Four\n\nRavi knows Omar.\n", "2026-03-04T10:00:00Z")
        ingest(stack, "five", "# Five\n\nDana Lee leads the design team.\n", "2026-03-05T10:00:00Z")
        ravis = stack.sql("SELECT DISTINCT resolved_entity_id FROM mentions WHERE normalized_lemma LIKE 'ravi%'")
        assert len(ravis) == 1
        danas = stack.sql("SELECT entity_id, canonical_name FROM entities WHERE normalized_name LIKE 'dana%'")
        assert sorted(d["canonical_name"] for d in danas) == ["Dana Kim", "Dana Lee"]
        verdicts = stack.sql("SELECT resolution_method, scores, resolver_version FROM mentions "
                             "WHERE normalized_lemma = 'ravi shanker'")
        assert verdicts[0]["resolution_method"] in ("T1", "T2") and verdicts[0]["resolver_version"]


@pytest.mark.parametrize("text", ["# Q\n\nWhat should we do next?\n", "# G\n\nMeetings are useful.\n"])
def test_claims_naming_no_entity_make_no_fact_and_say_why(pg, tmp_path: Path, text: str) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        version = ingest(stack, f"n-{uuid.uuid4().hex[:6]}", text + "\nThe exporter is fast.\n",
                         "2026-03-01T10:00:00Z")
        outcomes = stack.sql("SELECT assertions, reason FROM normalization_outcomes WHERE version_id = $1",
                             uuid.UUID(version.version_id))
        assert all(o["assertions"] > 0 or o["reason"] for o in outcomes)


def test_the_time_page_newest_first_gives_the_same_windows(pg, tmp_path: Path) -> None:
    """A closing that arrives before the fact it closes is kept and applied (order independence)."""
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "oncall", "# On-call\n\nRavi is the on-call engineer for billing incidents.\n",
               "2026-09-01T08:00:00Z")
        ingest(stack, "retro", "# Retro notes\n\nRavi moved from the billing migration to the search team on 1 June.\n",
               "2026-06-12T14:00:00Z")
        ingest(stack, "kickoff", "# Kickoff notes\n\nRavi has been on the billing migration since yesterday.\n",
               "2026-01-15T10:00:00Z")
        held = facts(stack)
        billing = held["Ravi works on billing migration"]
        search = held["Ravi works on search team"]
        assert (billing["valid_from"], billing["valid_until"]) == (day("2026-01-14"), day("2026-06-01"))
        assert (search["valid_from"], search["valid_until"], search["valid_precision"]) == (
            day("2026-06-01"), None, "open")
        assert billing["superseded_by"] == search["fact_id"]


def test_transitions_close_the_previous_holder_value_and_place(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "sync-1", "# Orion sync\n\nLena Park leads the on-call rotation for Orion.\n\n"
               "The Orion database is hosted in Frankfurt.\n\nThe Q3 marketing budget is 120,000 EUR.\n",
               "2025-12-01T09:00:00Z")
        ingest(stack, "sync-2", "# Orion sync\n\nAs of 1 January 2026, Kofi Mensah took over the on-call rotation "
               "for Orion from Lena Park.\n\nWe migrated the Orion database from Frankfurt to Dublin on "
               "20 February 2026.\n\nFinance cut the Q3 marketing budget to 90,000 EUR on 15 July 2026.\n",
               "2026-07-20T09:00:00Z")
        ingest(stack, "chat", "# Chat\n\n[t1 | 2026-03-02T10:00:00Z] Sam: I started at Nimbus Labs last week as a "
               "data engineer.\n\n[t2 | 2026-03-02T10:01:00Z] Melanie: My kids.\n", "2026-03-02T10:00:00Z")
        held = facts(stack)
        lena = held["Lena Park leads on-call rotation for Orion"]
        kofi = held["Kofi Mensah leads on-call rotation for Orion"]
        assert (lena["valid_until"], lena["superseded_by"]) == (day("2026-01-01"), kofi["fact_id"])
        assert (kofi["valid_from"], kofi["valid_until"]) == (day("2026-01-01"), None)
        frankfurt = held["Orion database is located in Frankfurt"]
        dublin = held["Orion database is located in Dublin"]
        assert frankfurt["valid_until"] == day("2026-02-20") and dublin["valid_until"] is None
        old, new = held["Q3 marketing budget: 120,000 EUR"], held["Q3 marketing budget: 90,000 EUR"]
        assert old["superseded_by"] == new["fact_id"] and new["superseded_by"] is None
        assert held["Sam works for Nimbus Labs"]["valid_from"] == day("2026-02-23")
        claims = [r[0] for r in stack.sql("SELECT claim_text FROM claims")]
        assert not any("said that" in c for c in claims)  # the speaker is in the attribution fields
        assert not any("kids" in c for c in claims)  # a fragment without a predicate is no claim


def test_references_between_documents_become_crossrefs_in_either_order(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        note = ingest(stack, "notes/standup", "# Stand-up\n\nSee the Q3 hiring plan for the numbers.\n",
                      "2026-07-01T09:00:00Z")
        plan = ingest(stack, "notes/q3-hiring-plan", "# Q3 hiring plan\n\nWe hire two engineers.\n",
                      "2026-06-01T09:00:00Z")
        memo = ingest(stack, "notes/memo", "# Memo\n\nNumbers are in [the plan](notes/q3-hiring-plan.md).\n",
                      "2026-07-02T09:00:00Z")
        rows = stack.sql("SELECT from_doc_id, to_doc_id, kind FROM document_crossrefs")
        assert {(str(r["from_doc_id"]), str(r["to_doc_id"]), r["kind"]) for r in rows} == {
            (note.doc_id, plan.doc_id, "cites"), (memo.doc_id, plan.doc_id, "links_to")}


def test_labels_follow_the_entitys_current_name_and_are_embedded_again(pg, tmp_path: Path) -> None:
    with fresh_stack(pg, tmp_path) as stack:
        ingest(stack, "first", "# Notes\n\nRavi works on the billing migration.\nRavi finished the export API.\n",
               "2026-03-01T10:00:00Z")
        assert {"Ravi works on billing migration", "Ravi finished export API"} <= set(facts(stack))
        ingest(stack, "second", "# Team\n\nRavi Shankar leads the search team.\n", "2026-03-02T10:00:00Z")
        labels = set(facts(stack))
        # written when only "Ravi" was known; rendered from the canonical name now
        assert {"Ravi Shankar works on billing migration", "Ravi Shankar finished export API",
                "Ravi Shankar leads search team"} <= labels
        assert not any(label.startswith("Ravi ") and not label.startswith("Ravi Shankar") for label in labels)
        assert stack.sql("SELECT count(*) AS n FROM facts WHERE embedding IS NULL")[0]["n"] == 0


def test_bad_input_ends_ready_with_a_named_outcome_per_statement(pg, tmp_path: Path) -> None:
    run_on = ("alpha beta gamma delta owns the exporter and Ravi moved the cluster to Dublin " * 400)[:20_000]
    text = (f"# Bad input\n\n{run_on}\n\n| Service | Owner |\n|---|---|\n| Ledger | Carmen Ruiz |\n\n"
            "```\nRavi owns the exporter\n```\n\nRavi 拥有 the exporter 🚀 and Zoë runs Ünïcode ops ✨.\n\n"
            "Who owns the exporter? Is Dublin the host? Why?\n")
    with fresh_stack(pg, tmp_path) as stack:
        version = uuid.UUID(ingest(stack, "bad", text, "2026-03-01T10:00:00Z").version_id)
        decisions = stack.sql("SELECT reason, char_start FROM extraction_decisions WHERE version_id = $1", version)
        claims = stack.sql("""SELECT c.char_start, o.assertions, o.reason FROM claims c
                                JOIN normalization_outcomes o ON o.claim_id = c.claim_id
                               WHERE o.version_id = $1""", version)
        assert all(c["assertions"] > 0 or c["reason"] for c in claims)
        reasons = {d["reason"] for d in decisions}
        assert {"not_prose", "question"} <= reasons
        questions = text.index("Who owns")
        assert sum(1 for d in decisions if d["reason"] == "question" and d["char_start"] >= questions) == 3
        assert any(c["char_start"] < len(run_on) + 20 for c in claims)  # the run-on line was read, in pieces
