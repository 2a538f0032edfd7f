"""Retrieval quality on the labelled set (tests/data/retrieval), with two baselines in the
same run, plus conversation ingest throughput and the latency of the assured operation
through the gateway.

The whole set (six multi-session conversations, six document sets) is ingested through
the real stack (ingest, pipeline with the configured providers) into one space, so every
question searches ~700 evidence units, not just its own set. Then each question is asked
of each search channel alone, of ``claims_and_sources_context``, ``facts_context`` and
``combined_context`` (the use cases called in-process on the stack's database), and of
two baselines outside Testament over the raw units: Okapi BM25 and dense retrieval with
the same embedder. Set ``TESTAMENT_EMBEDDING_PROVIDER`` to compare embedders.

The blind set (tests/data/retrieval_blind), written by someone who never saw the code or
the labelled set, is ingested into a stack of its own and scored apart the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
import uuid

import asyncpg
import grpc
import httpx
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from bench import labelled, quality
from bench._common import Row, cpu_seconds, percentiles, running_stack
from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import EmbeddingProvider, provider_from_settings
from services.platform.settings import load_settings
from services.retrieval.app import Retrieval
from services.retrieval.domain import UNIT_LEGS
from services.retrieval.primitives import Primitives

LATENCY_QUERIES = 120
FIRST_STAGE = "claims_and_sources, 1st stage only"
WHOLE_CHUNKS = "claims_and_sources, whole chunks"
UNITS_DENSE = "units alone, semantic"
UNITS_BM25 = "units alone, bm25"
HALVES = ("baseline: Okapi BM25, raw units", "baseline: dense, raw units", "chunks alone, bm25", UNITS_DENSE,
          UNITS_BM25, "claims_and_sources_context", WHOLE_CHUNKS, FIRST_STAGE, "combined_context")
# The candidate depths before #15 sized them (evidence legs per embedder kind, fact legs).
OLD_DEPTHS = {"lexical": 200, "semantic": 30, "fact": 200}
OLD = ", old depths"
FILLER_COPIES = 10  # 6 conversations x 10 copies: ~5k turns and blocks with the labelled set


def log(message: str) -> None:
    print(f"  [quality] {message}", file=sys.stderr, flush=True)


async def ingest(stack_ingest_port: int, dsn: str, sets: list[labelled.LabelledSet]
                 ) -> tuple[dict[uuid.UUID, labelled.Document], float, int]:
    """Upload every document; wait until the last stage finished for all. Returns the
    documents by doc_id, the wall time and the bytes of conversation documents."""
    docs = [d for s in sets for d in s.documents]
    started = time.perf_counter()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack_ingest_port}") as channel:
        stub = ingest_pb2_grpc.IngestServiceStub(channel)

        async def upload(doc: labelled.Document) -> str:
            options = ingest_pb2.UploadOptions(
                filename=doc.filename, mime="text/markdown", title=doc.title,
                source_kind="chat" if doc.kind == "conversation" else "file", source_ref=doc.filename,
                source_modified_at=doc.modified_at.strftime("%Y-%m-%dT%H:%M:%SZ"))

            async def stream():  # type: ignore[no-untyped-def]
                yield ingest_pb2.UploadRequest(options=options)
                yield ingest_pb2.UploadRequest(chunk=doc.markdown.encode())
            return (await stub.Upload(stream(), timeout=120)).version_id

        versions = [await upload(d) for d in docs]
    conn = await asyncpg.connect(dsn)
    try:
        ids = [uuid.UUID(v) for v in versions]
        deadline = time.monotonic() + 1800
        while True:
            done = await conn.fetchval(
                """SELECT count(*) FROM work_units WHERE version_id = ANY($1::uuid[]) AND stage = 'label_relation'
                   AND status IN ('succeeded', 'skipped')""", ids)
            if done == len(ids):
                break
            dead = await conn.fetchval("SELECT count(*) FROM work_units WHERE version_id = ANY($1::uuid[]) "
                                       "AND status = 'dead_letter'", ids)
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the pipeline did not finish the labelled set ({dead} dead letters)")
            await asyncio.sleep(0.3)
        wall = time.perf_counter() - started
        rows = await conn.fetch("SELECT version_id, doc_id FROM document_versions WHERE version_id = ANY($1::uuid[])",
                                ids)
        by_version = {r["version_id"]: r["doc_id"] for r in rows}
        mapped = {by_version[uuid.UUID(v)]: d for v, d in zip(versions, docs, strict=True)}
        # Offsets are into the representation; the bench maps them with the source text.
        reps = await conn.fetch(
            "SELECT c.doc_id, c.char_start, c.char_end, c.chunk_text FROM chunks c WHERE c.doc_id = ANY($1::uuid[])",
            list(mapped))
        bad = sum(1 for r in reps if mapped[r["doc_id"]].markdown[r["char_start"]:r["char_end"]] != r["chunk_text"])
        if bad:
            raise RuntimeError(f"{bad} chunks do not match the source text at their offsets")
    finally:
        await conn.close()
    conversation_bytes = sum(len(d.markdown.encode()) for d in docs if d.kind == "conversation")
    return mapped, wall, conversation_bytes


Rankings = dict[str, dict[str, list[str]]]  # system -> question id -> unit ids, best first


async def _rankings(dsn: str, embedder: EmbeddingProvider, sets: list[labelled.LabelledSet],
                    docs: dict[uuid.UUID, labelled.Document]) -> tuple[list[labelled.Unit], Rankings]:
    """Every system's ranking of every question of ``sets`` (already ingested as ``docs``):
    the two baselines over the raw units, each channel, each assured operation, and the
    evidence operation without its second fusion stage."""
    questions = [q for s in sets for q in s.questions]
    units = quality.all_units(sets)
    bm25 = quality.OkapiBM25(units)
    dense = quality.DenseBaseline(units, await embedder.embed([u.body for u in units]))
    qvectors = await embedder.embed([q.text for q in questions])
    baselines: Rankings = {"baseline: Okapi BM25, raw units": {}, "baseline: dense, raw units": {}}
    for q, v in zip(questions, qvectors, strict=True):
        baselines["baseline: Okapi BM25, raw units"][q.qid] = bm25.rank(q.text)
        baselines["baseline: dense, raw units"][q.qid] = dense.rank(v)
    db = await Database.connect(dsn, min_size=1, max_size=4)
    try:
        retrieval = Retrieval(db, embedder, None)
        caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
        started = time.perf_counter()
        systems = await quality.testament_rankings(retrieval, Primitives(retrieval), caller, questions,
                                                   quality.UnitMap(docs))
        # The same operation with parts left out, for same-run comparisons: whole chunks as
        # passages (the answer before units were ranked), and without the second fusion stage
        # (both at chunk level); and each unit leg alone (the unit stage's own channels).
        off = dict.fromkeys((f"unit_{leg}" for leg in UNIT_LEGS), 0.0)
        for name, weights in ((WHOLE_CHUNKS, dataclasses.replace(retrieval.weights, **off)),
                              (FIRST_STAGE, dataclasses.replace(retrieval.weights, dense=0.0, coverage=0.0, **off)),
                              (UNITS_DENSE, dataclasses.replace(retrieval.weights, **(off | {"unit_semantic": 1.0}))),
                              (UNITS_BM25, dataclasses.replace(retrieval.weights, **(off | {"unit_bm25": 1.0})))):
            variant = Retrieval(db, embedder, None, weights=weights)
            systems[name] = (await quality.testament_rankings(
                variant, Primitives(variant), caller, questions, quality.UnitMap(docs),
                operations=["claims_and_sources_context"], channels=()))["claims_and_sources_context"]
        # The operations with the candidate depths they had before #15 measured them, same run.
        before = Retrieval(db, embedder, None, weights=dataclasses.replace(retrieval.weights, depth=OLD_DEPTHS[
            "lexical" if embedder.model.startswith("hash-") else "semantic"]), fact_depth=OLD_DEPTHS["fact"])
        for name, ranked in (await quality.testament_rankings(before, Primitives(before), caller, questions,
                                                              quality.UnitMap(docs), channels=())).items():
            systems[f"{name}{OLD}"] = ranked
        log(f"asked {len(questions)} questions of every system in {time.perf_counter() - started:.1f} s")
    finally:
        await db.close()
    return units, {**baselines, **systems}


def _ratio_rows(title: str, questions: list[labelled.Question], results: dict) -> list[Row]:  # type: ignore[type-arg]
    bm25_r10 = results["baseline: Okapi BM25, raw units"]["all"].recall[10]
    dense_r10 = results["baseline: dense, raw units"]["all"].recall[10]
    rows = []
    for name in ("claims_and_sources_context", "combined_context", "facts_context"):
        r10 = results[name]["all"].recall[10]
        rows.append(Row("quality", f"{name} recall@10{title}", len(questions), 0.0, 0.0,
                        extra=f"{r10:.3f} = {r10 / bm25_r10:.2f}x BM25 baseline ({bm25_r10:.3f}), "
                              f"dense baseline {dense_r10:.3f} {r10 - dense_r10:+.3f}; with the depths before "
                              f"#15 {results[name + OLD]['all'].recall[10]:.3f}"))
    return rows


async def _blind(embedder: EmbeddingProvider) -> list[Row]:
    """The blind set (tests/data/retrieval_blind): written by someone who never saw the code
    or the labelled set; its own stack and space, scored apart, never tuned on."""
    sets = labelled.load(directory=labelled.BLIND_DIR)
    questions = [q for s in sets for q in s.questions]
    async with running_stack() as (stack, _port):
        assert stack.dsn is not None
        ingest_proc = next(c for c in stack.children if c.name == "ingest")
        docs, _wall, _ = await ingest(ingest_proc.port, stack.dsn, sets)
        units, rankings = await _rankings(stack.dsn, embedder, sets, docs)
    results = {name: quality.summarise(questions, r) for name, r in rankings.items()}
    print(quality.table(f"evidence recall on the BLIND set ({embedder.model}, {len(questions)} questions, "
                        f"{len(units)} units)", results), flush=True)
    return _ratio_rows(", blind set", questions, results)


async def run() -> list[Row]:
    sets = labelled.load()
    questions = [q for s in sets for q in s.questions]
    settings = load_settings()
    embedder = provider_from_settings(settings)
    log(f"{len(questions)} questions over {sum(len(s.documents) for s in sets)} documents; "
        f"embedder {embedder.model}")
    rows: list[Row] = []
    async with running_stack() as (stack, port):
        assert stack.dsn is not None
        ingest_proc = next(c for c in stack.children if c.name == "ingest")
        cpu = cpu_seconds(stack)
        docs, wall, conv_bytes = await ingest(ingest_proc.port, stack.dsn, sets)
        cpu = cpu_seconds(stack) - cpu
        total = sum(len(d.markdown.encode()) for d in docs.values())
        rows.append(Row("quality", f"ingest labelled set ({embedder.model})", len(docs), wall * 1000 / len(docs),
                        wall * 1000 / len(docs),
                        extra=f"{total / 1024 / wall * 60:,.0f} KB/min end to end "
                              f"({conv_bytes / 1024:.0f} KB of conversations); {_cpu_note(cpu, total)}"))
        log(f"ingested in {wall:.1f} s")

        units, rankings = await _rankings(stack.dsn, embedder, sets, docs)
        results = {name: quality.summarise(questions, r) for name, r in rankings.items()}
        print(quality.table(f"evidence recall on the labelled set ({embedder.model}, {len(questions)} questions, "
                            f"{len(units)} units)", results), flush=True)
        for half, name in ((0, "even"), (1, "odd")):  # weights were chosen on the even half
            part = questions[half::2]
            print(quality.table(f"{name}-numbered questions ({len(part)})", {
                system: quality.summarise(part, ranked) for system, ranked in rankings.items()
                if system in HALVES}), flush=True)
        rows.extend(_ratio_rows("", questions, results))

        rows.append(await _gateway_latency(port, questions, len(units)))

        # The same question mix on a space of ~5k turns: the labelled set among other people's
        # conversations (renamed copies), ingested the same way.
        extra = labelled.filler(sets, FILLER_COPIES)
        started, cpu = time.perf_counter(), cpu_seconds(stack)
        await ingest(ingest_proc.port, stack.dsn, [labelled.LabelledSet("filler", extra, [])])
        wall, cpu = time.perf_counter() - started, cpu_seconds(stack) - cpu
        size = sum(len(d.markdown.encode()) for d in extra)
        turns = len(units) + sum(len(d.units) for d in extra)
        rows.append(Row("quality", f"ingest {len(extra)} more conversations ({embedder.model})", len(extra),
                        wall * 1000 / len(extra), wall * 1000 / len(extra),
                        extra=f"{size / 1024 / wall * 60:,.0f} KB/min ({size / 1024:.0f} KB); "
                              f"{_cpu_note(cpu, size)}"))
        rows.append(await _gateway_latency(port, questions, turns))
    rows.extend(await _blind(embedder))
    if not embedder.model.startswith("hash-"):
        rows.append(await _hash_ingest_baseline(sets, rows[0]))
    return rows


async def _hash_ingest_baseline(sets: list[labelled.LabelledSet], measured: Row) -> Row:
    """The same ingest with the lexical `hash` embedder (the old default), for the rate."""
    async with running_stack(embedding="hash") as (stack, _port):
        assert stack.dsn is not None
        ingest_proc = next(c for c in stack.children if c.name == "ingest")
        cpu = cpu_seconds(stack)
        docs, wall, _ = await ingest(ingest_proc.port, stack.dsn, sets)
        cpu = cpu_seconds(stack) - cpu
    total = sum(len(d.markdown.encode()) for d in docs.values())
    measured.baseline_p50_ms = wall * 1000 / len(docs)
    return Row("quality", "ingest labelled set (hash-384-v1), baseline", len(docs), wall * 1000 / len(docs),
               wall * 1000 / len(docs), extra=f"{total / 1024 / wall * 60:,.0f} KB/min end to end; "
                                              f"{_cpu_note(cpu, total)}")


def _cpu_note(cpu_s: float, size_bytes: int) -> str:
    """The pipeline's CPU for an ingest: what the embedder costs, whatever the machine's load."""
    return f"pipeline {cpu_s:.1f} CPU-s, {cpu_s * 1000 / (size_bytes / 1024):.0f} CPU-ms/KB"


async def _gateway_latency(port: int, questions: list[labelled.Question], n_units: int) -> Row:
    """claims_and_sources_context through the gateway (HTTP/JSON, the `remember` path)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        sample = [questions[i % len(questions)].text for i in range(LATENCY_QUERIES)]
        for text in sample[:10]:
            await client.post("/operations/claims_and_sources_context", json={"query": text})
        samples = []
        for text in sample:
            t0 = time.perf_counter()
            reply = await client.post("/operations/claims_and_sources_context", json={"query": text})
            samples.append(time.perf_counter() - t0)
            reply.raise_for_status()
    p50, p95 = percentiles(samples)
    return Row("quality", f"claims_and_sources_context via gateway, {n_units} units", len(samples), p50, p95)
