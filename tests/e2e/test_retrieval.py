"""Retrieval through the gateway, against documents processed by the real pipeline."""

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
    ("kickoff", "# Kickoff notes\n\nRavi has been on the billing migration since yesterday.\n", "2026-01-15T10:00:00Z"),
    ("retro", "# Retro notes\n\nRavi moved from the billing migration to the search team on 1 June.\n",
     "2026-06-12T14:00:00Z"),
    ("oncall", "# On-call\n\nRavi is the on-call engineer for billing incidents.\n", "2026-09-01T08:00:00Z"),
    ("standup", "# Stand-up, 17 September 2026\n\nRavi said the billing migration moves from June to October, "
     "because the\ninvoice exporter needs a rewrite. Dana Kim agreed and will tell finance.\n"
     "Ravi owns the invoice exporter.\n", "2026-09-17T09:30:00Z"),
    ("spec", "# Spec\n\nThe billing migration cutover is scheduled for 8 June 2026.\n", "2026-04-01T10:00:00Z"),
    ("plan", "# Plan\n\nThe billing migration cutover is scheduled for 15 June 2026.\n", "2026-04-28T10:00:00Z"),
    ("design", "# Design review\n\nDana Lee leads the design team.\n", "2026-03-05T10:00:00Z"),
]


@pytest.fixture(scope="module")
def base(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("retrieval")
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5"}
    with ExitStack() as stack:
        procs = {name: stack.enter_context(run_service(name, dsn, tmp, **env))
                 for name in ("ingest", "pipeline", "graph")}
        retrieval = stack.enter_context(run_service("retrieval", dsn, tmp, TESTAMENT_GRAPH_ADDR=procs["graph"].address,
                                                    **env))
        gateway = stack.enter_context(run_gateway(dsn, tmp, ingest=procs["ingest"].address,
                                                  retrieval=retrieval.address, graph=procs["graph"].address))
        pipeline = Pipeline(dsn, procs["ingest"].address, procs["pipeline"].address, tmp)
        for ref, text, said in DOCS:
            version = pipeline.upload(text.encode(), f"{ref}.md", source_kind="file", source_ref=ref,
                                      source_modified_at=said)
            assert pipeline.wait(version.version_id).ready
        yield f"http://127.0.0.1:{gateway.extra['http']}"


def op(base: str, operation: str, /, **arguments: object) -> dict:
    reply = httpx.post(f"{base}/operations/{operation}", json=arguments, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_quickstart_question_returns_ravis_fact_with_evidence_and_span(base: str) -> None:
    env = op(base, "facts_context", query="Who owns the invoice exporter?")
    fact = next(f for f in env["facts"] if f["label"] == "Ravi owns invoice exporter")
    assert fact["kind"] == "relation" and fact["evidence_count"] == 1
    assert fact["validity"]["valid_precision"] == "unknown" and fact["temporal_match"] == "possible"
    link = next(link for link in env["fact_evidence"] if link["fact_id"] == fact["fact_id"])
    evidence = next(e for e in env["evidence"] if e["claim_id"] == link["claim_id"])
    assert evidence["source_span"] == "Ravi owns the invoice exporter."
    assert evidence["document_title"] == "standup"
    total = next(t for t in env["evidence_totals"] if t["fact_id"] == fact["fact_id"] and t["stance"] == "supports")
    assert total == {"fact_kind": "relation", "fact_id": fact["fact_id"], "stance": "supports", "returned": 1,
                     "total": 1}
    assert env["temporal_scope"]["mode"] == "current" and env["negative"] is None
    # each returned fact says which channels nominated it (reciprocal rank fusion, k=60)
    ranked = next(r for r in env["ranking"] if r["item_id"] == fact["fact_id"])
    assert set(ranked["signals"]) <= {"semantic", "bm25", "entity_profile"} and ranked["signals"]
    assert abs(ranked["score"] - sum(ranked["signals"].values())) < 1e-9


@pytest.mark.parametrize(("time", "expected"), [
    ({"mode": "current"}, {"billing": None, "search": "confirmed", "on-call": "possible"}),
    ({"mode": "at", "at": "2026-03-01T00:00:00Z"}, {"billing": "confirmed", "search": None, "on-call": "possible"}),
    ({"mode": "overlap", "from": "2026-05-15T00:00:00+02:00", "to": "2026-06-15T00:00:00Z"},
     {"billing": "confirmed", "search": "confirmed", "on-call": "possible"}),
    ({"mode": "history"}, {"billing": "confirmed", "search": "confirmed", "on-call": "possible"}),
])
def test_the_time_page_table_in_all_four_modes(base: str, time: dict, expected: dict) -> None:
    ravi = op(base, "resolve_entity", name="Ravi")["entities"][0]["entity_id"]
    env = op(base, "facts_context", query="what does Ravi work on and is he on call", entity_ids=[ravi], k=30,
             time=time)
    marks = {}
    for fact in env["facts"]:
        for key, label in (("billing", "Ravi works on billing migration"), ("search", "Ravi works on search team")):
            if fact["label"] == label:
                marks[key] = fact["temporal_match"]
        if "on-call" in fact["label"]:
            marks["on-call"] = fact["temporal_match"]
    assert {key: marks.get(key) for key in expected} == expected
    assert env["temporal_scope"]["mode"] == time["mode"]
    # the evidence comes in the facts' order, best fact first
    rank = {fact["fact_id"]: i for i, fact in enumerate(env["facts"])}
    linked = [rank[link["fact_id"]] for link in env["fact_evidence"]]
    assert len(set(linked)) > 1 and linked == sorted(linked)


def test_a_contradiction_returns_every_side_together(base: str) -> None:
    env = op(base, "facts_context", query="When is the billing migration cutover?", time={"mode": "history"})
    side = next(f for f in env["facts"] if "cutover" in f["label"])
    block = side["contradiction"]
    assert block is not None and block["total"] == 1 and block["returned"] == 1
    other = block["co_members"][0]["label"]
    assert {side["label"], other} == {"billing migration cutover: 8 June 2026",
                                      "billing migration cutover: 15 June 2026"}


def test_resolving_dana_returns_both_danas_and_never_picks(base: str) -> None:
    env = op(base, "resolve_entity", name="Dana")
    names = sorted(e["canonical_name"] for e in env["entities"])
    assert names == ["Dana Kim", "Dana Lee"]
    assert env["truncation"]["reason"] == "resolve_candidate_limit"
    unknown = op(base, "resolve_entity", name="Zebulon")
    assert unknown["entities"] == [] and unknown["negative"]["kind"] == "unknown_entity"


def test_claims_and_sources_group_and_count_and_chunks_come_back(base: str) -> None:
    env = op(base, "claims_and_sources_context", query="invoice exporter rewrite", k=5, candidate_k=10)
    assert env["grain"] == "evidence" and env["evidence"] and env["chunks"]
    assert all(e["corroboration_count"] >= 1 for e in env["evidence"])
    assert all(c["chunk_text"] for c in env["chunks"])


def test_combined_context_is_a_bundle_of_both_envelopes(base: str) -> None:
    bundle = op(base, "combined_context", query="billing migration")
    assert bundle["contract"] == "ContextBundle/v2"
    assert bundle["claims_and_sources"]["grain"] == "evidence" and bundle["facts"]["grain"] == "fact"


@pytest.mark.parametrize(("name", "arguments", "message"), [
    ("facts_context", {}, "query"),
    ("facts_context", {"query": "x", "colour": "red"}, "unknown argument(s): colour"),
    ("facts_context", {"query": "x", "k": 31}, "k violates maximum=30"),
    ("facts_context", {"query": "x", "k": True}, "invalid k: expected an integer"),
    ("facts_context", {"query": "x", "k": "3"}, "invalid k: expected an integer"),
    ("facts_context", {"query": "x", "time": {"mode": "at", "at": "2026-03-01T00:00:00"}}, "invalid time"),
    ("facts_context", {"query": "x", "time": {"mode": "at", "at": "2026-03-01"}}, "invalid time"),
    ("claims_and_sources_context", {"query": "x", "k": 50, "candidate_k": 10}, "candidate_k cannot be smaller than k"),
    ("claims_and_sources_context", {"query": "x", "entity_ids": ["a", "a"]}, "invalid entity_ids"),
    ("facts_context", {"query": "x" * 8193}, "query violates maxLength=8192"),
])
def test_bad_arguments_get_invalid_parameter(base: str, name: str, arguments: dict, message: str) -> None:
    reply = httpx.post(f"{base}/operations/{name}", json=arguments, timeout=30)
    assert reply.status_code == 422, reply.text
    detail = reply.json()["detail"]
    assert detail["code"] == "invalid_parameter" and detail["message"].startswith(message)


@pytest.mark.parametrize("operation", ["claims_and_sources_context", "facts_context", "combined_context"])
def test_questions_no_index_can_answer_get_a_typed_answer_or_a_4xx_never_a_500(base: str, operation: str) -> None:
    """The bad inputs of a real client: empty, 100 KB, only stopwords, only emoji, a name
    nobody in the space has. Each is a 422 naming the argument, or a 200 envelope: evidence
    or a documented negative."""
    for query, status in (("", 422), ("word " * 20_000, 422), ("what was it that they did", 200),
                          ("😀🎉😀", 200), ("Zebulon Quartermaine", 200)):
        reply = httpx.post(f"{base}/operations/{operation}", json={"query": query}, timeout=30)
        assert reply.status_code == status, (query[:40], reply.status_code, reply.text[:300])
        if status == 422:
            assert reply.json()["detail"]["message"].startswith("query violates"), reply.text
            continue
        body = reply.json()
        envelopes = [body["claims_and_sources"], body["facts"]] if operation == "combined_context" else [body]
        for env in envelopes:
            assert env.get("evidence") or env.get("chunks") or env.get("facts") or env["negative"]["kind"], env
    assert op(base, "resolve_entity", name="Zebulon Quartermaine")["negative"]["kind"] == "unknown_entity"


def test_operation_routes_and_unknown_operations(base: str) -> None:
    listed = httpx.get(f"{base}/operations", timeout=10).json()
    assert [o["name"] for o in listed] == ["resolve_entity", "claims_and_sources_context", "facts_context",
                                           "combined_context"]
    assert all(o["input_schema"]["additionalProperties"] is False and o["mutates"] is False for o in listed)
    missing = httpx.post(f"{base}/operations/summarise", json={}, timeout=10)
    assert (missing.status_code, missing.json()) == (404, {"detail": "summarise"})
    assert httpx.post(f"{base}/operations/facts_context", json=[1], timeout=10).status_code == 422
    assert op(base, "facts_context", query="x", k=3.0)["grain"] == "fact"  # 3.0 is an integer


def test_primitives_answer_with_typed_negatives(base: str) -> None:
    relations = httpx.get(f"{base}/lookup/relations", params={"predicate": "other:owns"}, timeout=10).json()
    (owns,) = [f for f in relations["facts"] if f["label"] == "Ravi owns invoice exporter"]
    hydrated = httpx.get(f"{base}/hydrate/relation/{owns['fact_id']}", timeout=10).json()
    assert hydrated["grain"] == "composite" and hydrated["sources"][0]["title"] == "standup"
    transcript = httpx.get(f"{base}/transcript/relation/{owns['fact_id']}", timeout=10).json()
    assert transcript["transcript"][0]["outcome"] == "add" and transcript["truncation"] is not None
    unknown = "00000000-0000-0000-0000-000000000000"
    assert httpx.get(f"{base}/hydrate/relation/{unknown}").json()["negative"]["kind"] == "unknown_entity"
    assert httpx.get(f"{base}/transcript/relation/{unknown}").json()["negative"]["kind"] == "known_empty"
    assert httpx.get(f"{base}/hydrate/relation/not-a-uuid").status_code == 422
    assert httpx.get(f"{base}/lookup/relations", params={"valid_at": "2026-03-01T00:00:00+01:00"}).status_code == 422
    assert httpx.get(f"{base}/lookup/relations", params={"k": "401"}).status_code == 422
    found = httpx.post(f"{base}/search/claims", json={"query": "exporter", "k": 3, "channel": "bm25"}).json()
    assert found["evidence"] and all("exporter" in e["claim_text"].lower() for e in found["evidence"])
    chunk = httpx.get(f"{base}/search/chunks", params={"query": "cutover"}).json()["chunks"][0]
    around = httpx.post(f"{base}/chunks/adjacent", json={"chunk_id": chunk["chunk_id"], "window": 2}).json()
    assert around["chunks"][0]["chunk_id"] == chunk["chunk_id"]
    assert httpx.get(f"{base}/chunks/{unknown}/adjacent").json()["negative"]["kind"] == "unknown_entity"
    wrong_turn = httpx.get(f"{base}/chunks/{chunk['chunk_id']}/adjacent", params={"turn_id": "s9-9"})
    assert wrong_turn.status_code == 422 and wrong_turn.json()["detail"][0]["loc"][-1] == "turn_id", wrong_turn.text
    nothing = httpx.get(f"{base}/search/claims", params={"query": "xylophone", "channel": "bm25"}).json()
    assert nothing["evidence"] == [] and nothing["negative"]["kind"] == "known_empty"


@pytest.mark.skipif(not os.environ.get("REMEMBER_PYTHON"), reason="REMEMBER_PYTHON not set")
def test_the_real_remember_client_gets_valid_results_from_every_operation(base: str, tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(f"""
import json, remember
c = remember.Client(base_url={base!r})
out = {{}}
out["operations"] = len(c.list_operations())
out["facts"] = len(c.facts_context("Who owns the invoice exporter?").facts)
out["claims"] = len(c.claims_and_sources_context("invoice exporter").evidence)
out["combined"] = c.combined_context("billing migration").contract
ravi = c.resolve_entity("Ravi").entities[0]
out["resolve"] = len(c.resolve(name="Ravi").entities)
rel = c.lookup_relations(subject_entity_id=ravi.entity_id)
out["lookup_relations"] = len(rel.facts)
out["lookup_observations"] = c.lookup_observations(entity_id=ravi.entity_id).grain
out["hydrate"] = len(c.hydrate_relation(relation_id=rel.facts[0].fact_id).evidence)
out["transcript"] = len(c.transcript_relation(relation_id=rel.facts[0].fact_id).transcript)
out["search_claims"] = len(c.search_claims(query="exporter").evidence)
chunks = c.search_chunks(query="exporter", channel="bm25").chunks
out["adjacent"] = len(c.adjacent_chunks(chunk_id=chunks[0].chunk_id).chunks)
out["graph"] = len(c.graph_neighborhood(entity_id=ravi.entity_id).nodes)
print(json.dumps(out))
""")
    result = subprocess.run([os.environ["REMEMBER_PYTHON"], str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["operations"] == 4 and out["facts"] >= 1 and out["claims"] >= 1
    assert out["combined"] == "ContextBundle/v2" and out["resolve"] >= 1 and out["lookup_relations"] >= 1
    assert out["hydrate"] >= 1 and out["transcript"] >= 1 and out["adjacent"] >= 1 and out["graph"] >= 2


def test_a_provider_outage_is_a_503_never_a_500(pg, tmp_path: Path) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    dsn = clone_database(pg)
    env = {"TESTAMENT_EMBEDDING_PROVIDER": "openai", "TESTAMENT_OPENAI_API_KEY": "test",
           "TESTAMENT_OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "TESTAMENT_OPENAI_TIMEOUT_S": "2",
           "TESTAMENT_EMBEDDING_DIMENSION": "8"}
    with run_service("retrieval", dsn, tmp_path, **env) as retrieval, \
            run_gateway(dsn, tmp_path, retrieval=retrieval.address) as gateway:
        url = f"http://127.0.0.1:{gateway.extra['http']}"
        reply = httpx.post(f"{url}/operations/facts_context", json={"query": "anything"}, timeout=30)
        assert (reply.status_code, reply.json()) == (503, {"detail": "model provider unavailable"})
        reply = httpx.get(f"{url}/search/claims", params={"query": "anything"}, timeout=30)
        assert reply.status_code == 503
        assert httpx.get(f"{url}/search/claims", params={"query": "anything", "channel": "bm25"}).status_code == 200
