"""The openai claim and relation providers inside the real pipeline process, against a
scripted OpenAI-compatible server: claims grounded, facts formed, every call in the cost
ledger with its unit, and a broken reply ends in a named failure, never a half-write."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.integration.pipeline.fake_openai import FakeOpenAI
from tests.support import run_service

TEXT = "Ravi owns the invoice exporter."
DOC = f"# Notes\n\n{TEXT}\n"


def claims_reply() -> dict:
    return {"dropped": [], "omitted": [], "claims": [{
        "source_span": TEXT, "start": 0, "end": len(TEXT), "claim_text": TEXT, "evidence": [],
        "is_attributed": False, "attributed_to": None, "edits": [], "flags": [], "temporal_class": "static",
        "valid_from": None, "valid_until": None, "valid_precision": "unknown", "valid_kind": None}]}


def relations_reply() -> dict:
    return {"results": [{"claim_id": "c1", "assertions": [{
        "kind": "relation", "subject": "Ravi", "predicate": "other:owns", "object": "invoice exporter",
        "change_kind": "none", "previous_object": None, "previous_value": None, "previous_holder": None,
        "attribute": None, "value": None, "value_is_state": False, "mood": "fact", "hedged": False}]}]}


@pytest.fixture()
def stack(pg, tmp_path) -> Iterator[tuple[Pipeline, FakeOpenAI]]:
    dsn = clone_database(pg)
    with FakeOpenAI() as fake:
        env = {"TESTAMENT_DATA_DIR": str(tmp_path), "TESTAMENT_WORKER_POLL_S": "0.5",
               "TESTAMENT_CLAIMS_PROVIDER": "openai", "TESTAMENT_RELATIONS_PROVIDER": "openai",
               "TESTAMENT_OPENAI_BASE_URL": fake.base_url, "TESTAMENT_OPENAI_API_KEY": "sk-test",
               "TESTAMENT_OPENAI_TIMEOUT_S": "5", "TESTAMENT_WORK_RETRY_BACKOFF_BASE_S": "0.1"}
        with run_service("ingest", dsn, tmp_path, **env) as ingest, \
                run_service("pipeline", dsn, tmp_path, **env) as pipeline:
            yield Pipeline(dsn, ingest.address, pipeline.address, tmp_path), fake


def test_model_providers_make_grounded_claims_and_facts_and_are_billed(stack) -> None:
    pipeline, fake = stack
    fake.reply_with(claims_reply(), relations_reply())
    version = pipeline.upload(DOC.encode(), "notes.md")
    assert pipeline.wait(version.version_id).ready
    claims = pipeline.sql("SELECT claim_text, source_span, extractor_version FROM claims")
    assert [(c["claim_text"], c["source_span"]) for c in claims] == [(TEXT, TEXT)]
    assert claims[0]["extractor_version"].startswith("openai/")
    facts = pipeline.sql("SELECT label FROM facts")
    assert [f["label"] for f in facts] == ["Ravi owns invoice exporter"]
    ledger = pipeline.sql("SELECT stage, provider, tokens_in, outcome, work_id FROM provider_calls ORDER BY stage")
    assert {(r["stage"], r["outcome"]) for r in ledger} >= {("extract_claims", "ok"), ("normalize_relations", "ok")}
    assert all(r["work_id"] is not None and r["tokens_in"] > 0 for r in ledger)


def test_an_extractor_upgrade_that_loses_a_claim_withdraws_the_fact(pg, tmp_path) -> None:
    import subprocess
    import sys

    from tests.support import REPO, service_env

    second = "Dana leads finance."
    doc = f"# Notes\n\n{TEXT} {second}\n"
    both = {"dropped": [], "omitted": [], "claims": [
        {**claims_reply()["claims"][0]},
        {**claims_reply()["claims"][0], "source_span": second, "start": len(TEXT) + 1,
         "end": len(TEXT) + 1 + len(second), "claim_text": second}]}
    relations = {"results": [
        relations_reply()["results"][0],
        {"claim_id": "c2", "assertions": [{"kind": "relation", "subject": "Dana", "predicate": "other:leads",
                                           "object": "finance", "change_kind": "none", "previous_object": None,
                                           "previous_value": None, "previous_holder": None, "attribute": None,
                                           "value": None, "value_is_state": False, "mood": "fact", "hedged": False}]}]}
    dsn = clone_database(pg)
    with FakeOpenAI() as fake:
        env = {"TESTAMENT_DATA_DIR": str(tmp_path), "TESTAMENT_WORKER_POLL_S": "0.5",
               "TESTAMENT_CLAIMS_PROVIDER": "openai", "TESTAMENT_RELATIONS_PROVIDER": "openai",
               "TESTAMENT_OPENAI_BASE_URL": fake.base_url, "TESTAMENT_OPENAI_API_KEY": "sk-test",
               "TESTAMENT_OPENAI_TIMEOUT_S": "5"}
        with run_service("ingest", dsn, tmp_path, **env) as ingest:
            with run_service("pipeline", dsn, tmp_path, **env) as pipeline:
                stack = Pipeline(dsn, ingest.address, pipeline.address, tmp_path)
                fake.reply_with(both, relations)
                version = stack.upload(doc.encode(), "notes.md")
                assert stack.wait(version.version_id).ready
            # The extractor is upgraded (another model); its reading no longer derives Dana's claim.
            fake.reply_with({**both, "claims": both["claims"][:1]}, relations_reply())
            with run_service("pipeline", dsn, tmp_path, **env, TESTAMENT_OPENAI_CHAT_MODEL="better-model") as upgraded:
                # `testament ops` calls PipelineService; here straight at the upgraded process
                result = subprocess.run([sys.executable, "-m", "services.cli", "ops", "reextract",
                                         version.version_id, "--grpc-addr", upgraded.address], cwd=REPO,
                                        env=service_env(dsn), capture_output=True, text=True, timeout=60)
                assert result.returncode == 0, result.stderr
                import time

                for _ in range(200):
                    left = stack.sql("SELECT count(*) FROM work_units WHERE status NOT IN ('succeeded', 'skipped')")
                    if left[0][0] == 0:
                        break
                    time.sleep(0.1)
        facts = {r["label"]: r for r in stack.sql(
            "SELECT label, support_state, invalidated_at, evidence_count FROM facts")}
        assert facts["Ravi owns invoice exporter"]["support_state"] == "current"
        assert facts["Ravi owns invoice exporter"]["evidence_count"] == 1
        dana = facts["Dana leads finance"]
        assert (dana["support_state"], dana["invalidated_at"]) == ("withdrawn", None)  # flagged, not retracted
        events = stack.sql("SELECT reason FROM testimony_currency_events")
        assert {e[0] for e in events} == {"reextracted"}


def test_a_reply_that_breaks_the_schema_ends_in_a_named_failure(stack) -> None:
    pipeline, fake = stack
    fake.reply_with("not json at all", "{also broken", '{"claims": 3}')
    version = pipeline.upload(DOC.encode(), "broken.md")
    report = pipeline.wait(version.version_id, timeout_s=60)
    extract = next(s for s in report.versions[0].stages if s.stage == "extract_claims")
    assert extract.status == 6  # dead letter after the retries
    row = pipeline.sql("SELECT failure_reason FROM document_versions WHERE version_id = $1::uuid",
                       version.version_id)[0]
    assert row["failure_reason"] == "extraction_failed"
    assert pipeline.sql("SELECT count(*) FROM claims")[0][0] == 0
