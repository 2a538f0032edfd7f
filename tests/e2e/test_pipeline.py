"""The pipeline as real processes: documents go in through ingest and come out as
sections, chunks, vectors and grounded claims, checked through the tables."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc
from testament.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc

from tests.conftest import clone_database
from tests.support import REPO, run_service, service_env

STANDUP = """# Stand-up, 17 September 2026

Ravi said the billing migration moves from June to October, because the
invoice exporter needs a rewrite. Dana agreed and will tell finance.
Ravi owns the invoice exporter.
"""

CONVERSATION = """# Billing migration stand-up — 2026-09-17

Participants: Dana, Ravi

[t1 | 2026-09-17T09:30:00Z] Dana: Ravi, where are we on the invoice exporter?

[t2 | 2026-09-17T09:31:10Z] Ravi: I finished the rewrite yesterday. The cutover moves to next Tuesday.

[t3 | 2026-09-17T09:32:05Z] Dana: Agreed. I will tell finance today.
"""

REQUIRE = ingest_pb2.ReadinessRequirements(pipeline=True, p1=True, live_graph=False, p3=False)


@dataclass
class Pipeline:
    dsn: str
    ingest: str
    pipeline: str
    data: Path

    def upload(self, body: bytes, filename: str = "doc.md", mime: str = "text/markdown",
               **options: object) -> ingest_pb2.UploadResponse:
        with grpc.insecure_channel(self.ingest) as channel:
            def stream() -> Iterator[ingest_pb2.UploadRequest]:
                yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(filename=filename, mime=mime,
                                                                                **options))
                yield ingest_pb2.UploadRequest(chunk=body)
            return ingest_pb2_grpc.IngestServiceStub(channel).Upload(stream(), timeout=30)

    def wait(self, version_id: str, timeout_s: float = 60) -> ingest_pb2.PipelineReadinessReport:
        deadline = time.monotonic() + timeout_s
        with grpc.insecure_channel(self.ingest) as channel:
            stub = ingest_pb2_grpc.IngestServiceStub(channel)
            while True:
                report = stub.GetReadiness(ingest_pb2.GetReadinessRequest(version_ids=[version_id], require=REQUIRE),
                                           timeout=10).report
                statuses = {s.status for s in report.versions[0].stages}
                if report.ready or 6 in statuses or time.monotonic() > deadline:  # 6 = dead_letter
                    return report
                time.sleep(0.1)

    def sql(self, query: str, *args: object) -> list[asyncpg.Record]:
        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.dsn)
            try:
                return await conn.fetch(query, *args)
            finally:
                await conn.close()

        return asyncio.run(run())

    def markdown(self, version_id: str) -> str:
        key = self.sql("SELECT object_key FROM representations WHERE version_id = $1", uuid.UUID(version_id))[0][0]
        return (self.data / "objects" / key).read_text()


@pytest.fixture(scope="module")
def stack(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    dsn = clone_database(pg)
    data = tmp_path_factory.mktemp("pipeline")
    env = {"TESTAMENT_DATA_DIR": str(data), "TESTAMENT_WORK_RETRY_BACKOFF_BASE_S": "0.1",
           "TESTAMENT_WORKER_POLL_S": "0.5"}
    with run_service("ingest", dsn, data, **env) as ingest, run_service("pipeline", dsn, data, **env) as pipeline:
        yield Pipeline(dsn, ingest.address, pipeline.address, data)


def test_the_quickstart_yields_grounded_claims_with_exact_spans(stack: Pipeline) -> None:
    version = stack.upload(STANDUP.encode(), "standup.md", source_kind="file", source_ref="notes/standup.md",
                           source_modified_at="2026-09-17T09:30:00Z")
    report = stack.wait(version.version_id)
    assert report.ready, report
    markdown = stack.markdown(version.version_id)
    assert markdown == STANDUP
    claims = stack.sql("""SELECT claim_text, source_span, char_start, char_end, is_attributed, attributed_to,
                                 asserted_at, claim_valid_from, claim_valid_precision, evidence_spans
                            FROM claims WHERE version_id = $1 ORDER BY char_start""", uuid.UUID(version.version_id))
    for claim in claims:
        assert markdown[claim["char_start"]:claim["char_end"]] == claim["source_span"]
        assert claim["asserted_at"].isoformat() == "2026-09-17T09:30:00+00:00"
        first = json.loads(claim["evidence_spans"])[0]
        assert (first["char_start"], first["char_end"]) == (claim["char_start"], claim["char_end"])
    texts = [c["claim_text"] for c in claims]
    assert "Ravi owns the invoice exporter." in texts
    assert any(t.startswith("Dana will tell finance") for t in texts)
    moved = next(c for c in claims if c["is_attributed"])
    assert moved["attributed_to"] == "Ravi" and "October" in moved["claim_text"]
    assert moved["claim_valid_from"].isoformat().startswith("2026-10-01")
    assert moved["claim_valid_precision"] == "month"
    # every claim and chunk got a vector from the configured model, and BM25 postings
    assert stack.sql("SELECT count(*) FROM claims WHERE version_id = $1 AND embedding_model IS NULL",
                     uuid.UUID(version.version_id))[0][0] == 0
    postings = stack.sql("""SELECT count(*) FROM bm25_postings p JOIN claims c ON c.claim_id = p.target_id
                            WHERE c.version_id = $1 AND p.term = 'exporter'""", uuid.UUID(version.version_id))
    assert postings[0][0] >= 1
    decisions = stack.sql("SELECT kind, reason FROM extraction_decisions WHERE version_id = $1",
                          uuid.UUID(version.version_id))
    assert decisions, "the audit ledger records what was dropped or edited"
    status = stack.sql("SELECT status FROM document_versions WHERE version_id = $1", uuid.UUID(version.version_id))
    assert status[0][0] == "ready"


def test_a_conversation_resolves_speakers_and_relative_dates_per_turn(stack: Pipeline) -> None:
    version = stack.upload(CONVERSATION.encode(), "standup-chat.md", source_kind="meeting", source_ref="m-17",
                           source_modified_at="2026-09-17T09:30:00Z")
    assert stack.wait(version.version_id).ready
    claims = stack.sql("SELECT claim_text, attributed_to, claim_valid_from FROM claims WHERE version_id = $1",
                       uuid.UUID(version.version_id))
    by_text = {c["claim_text"]: c for c in claims}
    rewrite = next(c for t, c in by_text.items() if "rewrite" in t)
    assert rewrite["attributed_to"] == "Ravi" and "16 September 2026" in rewrite["claim_text"]
    finance = next(c for t, c in by_text.items() if "finance" in t)
    assert finance["attributed_to"] == "Dana" and "17 September 2026" in finance["claim_text"]
    assert not any(" I " in f" {t} " for t in by_text)  # "I" is resolved to the speaker


def test_editing_one_paragraph_of_a_living_document_reextracts_only_it(stack: Pipeline) -> None:
    paragraphs = [f"Owner {i}: Ravi owns the exporter module number {i} for the finance team." for i in range(50)]
    pair = {"source_kind": "wiki", "source_ref": "owners", "versioning_mode": ingest_pb2.VERSIONING_MODE_LIVING}
    v1 = stack.upload(("\n\n".join(paragraphs) + "\n").encode(), "owners.md", **pair)
    assert stack.wait(v1.version_id).ready
    paragraphs[23] = "Owner 23: Dana owns the exporter module number 23 for the finance team."
    v2 = stack.upload(("\n\n".join(paragraphs) + "\n").encode(), "owners.md", **pair)
    assert v2.created and stack.wait(v2.version_id).ready
    drafts = stack.sql("SELECT provider, drafts FROM claim_drafts WHERE version_id = $1", uuid.UUID(v2.version_id))
    calls = sum(json.loads(d["drafts"]).get("provider_calls", 0) for d in drafts)
    assert calls == 1  # exactly one provider call: the edited paragraph; every other one keeps its claims
    v2_claims = stack.sql("""SELECT c.claim_text, o.derivation_kind FROM claim_occurrences o
                             JOIN claims c USING (claim_id) WHERE o.version_id = $1""", uuid.UUID(v2.version_id))
    assert any("Dana owns the exporter module number 23" in r[0] for r in v2_claims)
    assert sum(1 for r in v2_claims if r[1] == "reused") == 49
    assert sum(1 for r in v2_claims if r[1] == "extracted") == 1
    # Every chunk of v2 has its unit vectors; a reused chunk keeps its predecessor's.
    chunks = stack.sql("""SELECT c.reused_from IS NOT NULL AS reused,
                                 (SELECT count(*) FROM chunk_units u WHERE u.chunk_id = c.chunk_id) AS n,
                                 (SELECT count(*) FROM chunk_units u WHERE u.chunk_id = c.reused_from) AS old
                            FROM chunks c WHERE c.version_id = $1""", uuid.UUID(v2.version_id))
    assert chunks and all(r["n"] > 0 for r in chunks) and any(r["reused"] for r in chunks)
    assert all(r["n"] == r["old"] for r in chunks if r["reused"])


def _docx(path: Path) -> bytes:
    from docx import Document

    document = Document()
    document.add_heading("Cutover plan", level=1)
    document.add_paragraph("Ravi owns the invoice exporter.")
    document.add_paragraph("The cutover happens on 9 June 2026.")
    document.save(path)
    return path.read_bytes()


def _html() -> bytes:
    return (b"<html><body><h1>Team</h1><p>Dana leads the finance team.</p>"
            b"<ul><li>Ravi owns billing.</li></ul></body></html>")


def _pdf(path: Path) -> bytes:
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path))
    pdf.drawString(72, 720, "Ravi owns the invoice exporter.")
    pdf.save()
    return path.read_bytes()


@pytest.mark.parametrize(("name", "mime", "make", "sentence"), [
    ("plan.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", _docx,
     "Ravi owns the invoice exporter."),
    ("team.html", "text/html", lambda p: _html(), "Dana leads the finance team."),
    ("note.pdf", "application/pdf", _pdf, "Ravi owns the invoice exporter."),
])
def test_office_html_and_pdf_convert_with_offsets_that_point_at_the_text(
        stack: Pipeline, tmp_path: Path, name: str, mime: str, make, sentence: str) -> None:
    version = stack.upload(make(tmp_path / name), name, mime)
    assert stack.wait(version.version_id).ready
    markdown = stack.markdown(version.version_id)
    at = markdown.index(sentence)
    chunks = stack.sql("SELECT chunk_text, char_start, char_end FROM chunks WHERE version_id = $1",
                       uuid.UUID(version.version_id))
    assert any(c["char_start"] <= at and at + len(sentence) <= c["char_end"] for c in chunks)
    for c in chunks:
        assert markdown[c["char_start"]:c["char_end"]] == c["chunk_text"]
    claims = stack.sql("SELECT source_span, char_start, char_end FROM claims WHERE version_id = $1",
                       uuid.UUID(version.version_id))
    assert any(c["source_span"] == sentence and c["char_start"] == at for c in claims), claims


@pytest.mark.parametrize(("body", "name"), [(b"", "empty.md"), (b"\xff\xfe\xfa not utf-8", "bad.md"),
                                            (b"PK\x03\x04 not really a docx", "broken.docx")])
def test_bad_input_ends_in_a_named_failure_on_the_version(stack: Pipeline, body: bytes, name: str) -> None:
    mime = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document" if name.endswith(".docx")
            else "text/markdown")
    version = stack.upload(body + uuid.uuid4().hex.encode() * 0, name, mime)
    report = stack.wait(version.version_id)
    assert not report.ready
    convert = report.versions[0].stages[0]
    assert convert.stage == "convert" and convert.status == 6  # dead_letter: permanent failures do not retry
    assert {s.status for s in report.versions[0].stages[1:]} == {1}  # missing: later stages are blocked
    row = stack.sql("SELECT status, failure_reason, error FROM document_versions WHERE version_id = $1",
                    uuid.UUID(version.version_id))[0]
    assert (row["status"], row["failure_reason"]) == ("failed", "extraction_failed")
    assert row["error"] == "The document could not be read or converted."
    unit = stack.sql("SELECT attempts, last_error FROM work_units WHERE version_id = $1 AND stage = 'convert'",
                     uuid.UUID(version.version_id))[0]
    assert unit["attempts"] == 1 and unit["last_error"]


def test_dead_letters_are_listed_and_replayed_through_the_rpc_and_the_cli(stack: Pipeline) -> None:
    version = stack.upload(b"\xff not utf-8 " + uuid.uuid4().hex.encode(), "bad2.md")
    stack.wait(version.version_id)
    with grpc.insecure_channel(stack.pipeline) as channel:
        stub = pipeline_pb2_grpc.PipelineServiceStub(channel)
        listed = stub.ListDeadLetters(pipeline_pb2.ListDeadLettersRequest(version_id=version.version_id), timeout=10)
        (dead,) = listed.dead_letters
        assert dead.stage == "convert" and dead.attempts == 1
        replayed = stub.ReplayDeadLetter(pipeline_pb2.ReplayDeadLetterRequest(work_unit_id=dead.work_unit_id),
                                         timeout=10)
        assert replayed.status == 2  # pending
    # the bytes are still not UTF-8: it dead-letters again, and the CLI sees it
    report = stack.wait(version.version_id)
    assert report.versions[0].stages[0].status == 6
    env = service_env(stack.dsn)
    ops = [sys.executable, "-m", "services.cli", "ops"]
    result = subprocess.run([*ops, "dead-letters", "--grpc-addr", stack.pipeline], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["dead_letters"]
    work_id = next(i["work_unit_id"] for i in items if i["version_id"] == version.version_id)
    replay = subprocess.run([*ops, "replay", work_id, "--grpc-addr", stack.pipeline], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0 and json.loads(replay.stdout)["work_unit_id"] == work_id


def _refusal(call) -> tuple[grpc.StatusCode, str]:  # type: ignore[no-untyped-def]
    from google.rpc import error_details_pb2, status_pb2

    with pytest.raises(grpc.RpcError) as raised:
        call()
    error = raised.value
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            info = error_details_pb2.ErrorInfo()
            status_pb2.Status.FromString(value).details[0].Unpack(info)
            return error.code(), info.reason
    return error.code(), ""


def test_replay_answers_the_documented_refusals(stack: Pipeline) -> None:
    version = stack.upload(b"\xff still not utf-8 " + uuid.uuid4().hex.encode(), "bad3.md", source_kind="file",
                           source_ref="bad3")
    stack.wait(version.version_id)
    with grpc.insecure_channel(stack.pipeline) as channel:
        stub = pipeline_pb2_grpc.PipelineServiceStub(channel)
        (dead,) = stub.ListDeadLetters(pipeline_pb2.ListDeadLettersRequest(version_id=version.version_id),
                                       timeout=10).dead_letters

        def replay(**extra: object):  # type: ignore[no-untyped-def]
            return lambda: stub.ReplayDeadLetter(pipeline_pb2.ReplayDeadLetterRequest(
                work_unit_id=dead.work_unit_id, **extra), timeout=10)

        assert _refusal(replay(attempts=11))[0] == grpc.StatusCode.INVALID_ARGUMENT
        for limit in (0, 201):  # the contract's 1-200
            request = pipeline_pb2.ListDeadLettersRequest(limit=limit)
            refused = _refusal(lambda r=request: stub.ListDeadLetters(r, timeout=10))
            assert refused[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.ListDeadLetters(pipeline_pb2.ListDeadLettersRequest(limit=200), timeout=10).dead_letters
        assert _refusal(replay(attempts=0))[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert _refusal(lambda: stub.ReplayDeadLetter(pipeline_pb2.ReplayDeadLetterRequest(
            work_unit_id=str(uuid.uuid4())), timeout=10)) == (grpc.StatusCode.NOT_FOUND, "WORK_UNIT_NOT_FOUND")
        # deletion wins: a dead letter of a deleted document is not replayed
        with grpc.insecure_channel(stack.ingest) as ingest:
            ingest_pb2_grpc.IngestServiceStub(ingest).DeleteDocument(
                ingest_pb2.DeleteDocumentRequest(doc_id=version.doc_id), timeout=10)
        assert _refusal(replay()) == (grpc.StatusCode.FAILED_PRECONDITION, "VERSION_DELETED")


def test_deleting_a_document_retires_its_claims_as_testimony(stack: Pipeline) -> None:
    version = stack.upload(b"# Notes\n\nRavi owns the payroll exporter.\n", "payroll.md", source_kind="file",
                           source_ref="payroll")
    assert stack.wait(version.version_id).ready
    with grpc.insecure_channel(stack.ingest) as channel:
        deletion = ingest_pb2_grpc.IngestServiceStub(channel).DeleteDocument(
            ingest_pb2.DeleteDocumentRequest(doc_id=version.doc_id), timeout=10)
    assert deletion.claims_retired >= 1
    current = stack.sql("SELECT count(*) FROM claims WHERE doc_id = $1 AND is_current_testimony",
                        uuid.UUID(version.doc_id))
    assert current[0][0] == 0
    events = stack.sql("SELECT reason FROM testimony_currency_events WHERE doc_id = $1", uuid.UUID(version.doc_id))
    assert {e[0] for e in events} == {"version_deleted"}
    assert stack.sql("SELECT count(*) FROM claims WHERE doc_id = $1", uuid.UUID(version.doc_id))[0][0] >= 1


def test_a_different_embedding_model_is_refused_for_a_space(stack: Pipeline, tmp_path: Path) -> None:
    first = stack.upload(f"# Seed\n\nRavi owns module {uuid.uuid4().hex[:6]}.\n".encode(), "seed.md")
    assert stack.wait(first.version_id).ready
    env = {"TESTAMENT_DATA_DIR": str(stack.data), "TESTAMENT_EMBEDDING_DIMENSION": "256"}
    with run_service("pipeline", stack.dsn, tmp_path, **env):
        version = stack.upload(b"# Other\n\nDana owns the ledger.\n" + os.urandom(4).hex().encode(), "other.md")
        report = stack.wait(version.version_id)
    embed = next(s for s in report.versions[0].stages if s.stage == "embed_chunk")
    if embed.status == 6:  # the 256-d worker took it: refused, never mixed into the index
        reason = stack.sql("SELECT failure_reason FROM document_versions WHERE version_id = $1",
                           uuid.UUID(version.version_id))[0][0]
        assert reason == "provider_rejected"
    dims = stack.sql("SELECT DISTINCT embedding_dim FROM chunks WHERE embedding_dim IS NOT NULL")
    assert [d[0] for d in dims] == [384]
