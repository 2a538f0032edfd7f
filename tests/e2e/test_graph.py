"""The graph service through the gateway and through gRPC, on a real PostgreSQL.

Relations, their evidence, claims and documents are written with SQL (the fact pipeline
is built separately); the service reads them as it would read the pipeline's rows.
A few cases run the use cases in-process against the same database, where a test needs
to reach between two steps of one request (nomination → confirmation) or to lower a
budget (time, statement timeout, slots) that the process does not expose.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from testament.graph.v1 import graph_pb2, graph_pb2_grpc

from services.graph.adapters import PgGraphStore
from services.graph.app import GraphService, Snapshot
from services.graph.domain import Budgets, Clocks, NeighborhoodQuery, PathQuery
from services.platform.auth import Caller, Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from services.platform.errors import Unavailable
from tests.conftest import clone_database
from tests.support import run_gateway, run_service


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Seed:
    """Writes the rows the fact pipeline would write: documents (with the version,
    representation and chunk a claim needs), claims, entities, relations with their
    supporting evidence, and cross-references."""

    def __init__(self, conn: asyncpg.Connection, space_id: uuid.UUID) -> None:
        self.conn = conn
        self.space = space_id
        self.chunks: dict[uuid.UUID, tuple[uuid.UUID, uuid.UUID, uuid.UUID]] = {}
        self.ordinal = 0

    async def doc(self, title: str, *, acl: Sequence[str] = (), deleted: bool = False) -> uuid.UUID:
        doc_id, version, rep, chunk = (uuid.uuid4() for _ in range(4))
        content = hashlib.sha256(doc_id.bytes).hexdigest()
        await self.conn.execute(
            """INSERT INTO content_objects (space_id, content_hash, byte_size, mime, object_key)
               VALUES ($1, $2, 1, 'text/markdown', $2)""", self.space, content)
        await self.conn.execute(
            """INSERT INTO documents (doc_id, space_id, source_kind, identity_hash, title, versioning_mode, acl,
                                      deleted_at)
               VALUES ($1, $2, 'upload', $3, $4, 'snapshot', $5, CASE WHEN $6 THEN now() END)""",
            doc_id, self.space, content, title, list(acl), deleted)
        await self.conn.execute(
            """INSERT INTO document_versions (version_id, doc_id, space_id, version_no, content_hash, status)
               VALUES ($1, $2, $3, 1, $4, 'ready')""", version, doc_id, self.space, content)
        await self.conn.execute(
            """INSERT INTO representations (representation_id, space_id, version_id, object_key, markdown_sha256,
                                            char_count, converter) VALUES ($1, $2, $3, 'k', $4, 100, 'markdown')""",
            rep, self.space, version, content)
        await self.conn.execute(
            """INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, ordinal, block_start,
                                   block_end, char_start, char_end, token_count, chunk_text, content_hash)
               VALUES ($1, $2, $3, $4, $5, 0, 0, 0, 0, 100, 10, $6, $7)""",
            chunk, self.space, doc_id, version, rep, title, content)
        self.chunks[doc_id] = (version, rep, chunk)
        return doc_id

    async def claim(self, doc_id: uuid.UUID, text: str = "a claim", *, current: bool = True) -> uuid.UUID:
        version, rep, chunk = self.chunks[doc_id]
        claim_id = uuid.uuid4()
        self.ordinal += 1
        await self.conn.execute(
            """INSERT INTO claims (claim_id, space_id, doc_id, version_id, representation_id, chunk_id, ordinal,
                                   claim_text, source_span, char_start, char_end, extractor_version,
                                   is_current_testimony)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, 0, 10, 'test', $9)""",
            claim_id, self.space, doc_id, version, rep, chunk, self.ordinal, text, current)
        return claim_id

    async def entity(self, name: str) -> uuid.UUID:
        entity_id = uuid.uuid4()
        await self.conn.execute(
            """INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name)
               VALUES ($1, $2, $3, lower($3))""", entity_id, self.space, name)
        return entity_id

    async def relation(self, subject: uuid.UUID, predicate: str, obj: uuid.UUID, *, claims: Sequence[uuid.UUID],
                       valid_from: str | None = None, valid_until: str | None = None, precision: str = "unknown",
                       ingested_at: str | None = None, invalidated_at: str | None = None,
                       superseded_by: uuid.UUID | None = None, label: str | None = None) -> uuid.UUID:
        fact_id = uuid.uuid4()
        await self.conn.execute(
            """INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, predicate, object_entity_id, label,
                                  valid_from, valid_until, valid_precision, ingested_at, invalidated_at,
                                  superseded_by, evidence_count)
               VALUES ($1, $2, 'relation', $3, $4, $5, $6, $7, $8, $9, coalesce($10, clock_timestamp()), $11, $12,
                       $13)""",
            fact_id, self.space, subject, predicate, obj, label or predicate,
            utc(valid_from) if valid_from else None, utc(valid_until) if valid_until else None, precision,
            utc(ingested_at) if ingested_at else None, utc(invalidated_at) if invalidated_at else None,
            superseded_by, len(claims))
        for claim_id in claims:
            doc_id = await self.conn.fetchval("SELECT doc_id FROM claims WHERE claim_id = $1", claim_id)
            await self.conn.execute(
                """INSERT INTO fact_evidence (fact_id, claim_id, stance, space_id, doc_id)
                   VALUES ($1, $2, 'supports', $3, $4)""", fact_id, claim_id, self.space, doc_id)
        return fact_id

    async def star(self, name: str, leaves: int, claim: uuid.UUID, *, predicate: str = "has_leaf") -> uuid.UUID:
        """A hub with ``leaves`` neighbours, generated in one statement."""
        hub = await self.entity(name)
        doc_id = await self.conn.fetchval("SELECT doc_id FROM claims WHERE claim_id = $1", claim)
        await self.conn.execute(
            """WITH leaves AS (
                   INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name)
                   SELECT gen_random_uuid(), $1, $2 || ' leaf ' || i, lower($2 || ' leaf ' || i)
                     FROM generate_series(1, $3) i RETURNING entity_id),
               rel AS (
                   INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, predicate, object_entity_id, label,
                                      evidence_count)
                   SELECT gen_random_uuid(), $1, 'relation', $4, $7, entity_id, $7, 1 FROM leaves
                   RETURNING fact_id)
               INSERT INTO fact_evidence (fact_id, claim_id, stance, space_id, doc_id)
               SELECT fact_id, $5, 'supports', $1, $6 FROM rel""",
            self.space, name, leaves, hub, claim, doc_id, predicate)
        return hub

    async def crossref(self, a: uuid.UUID, b: uuid.UUID, kind: str = "cites", context: str | None = None) -> uuid.UUID:
        value: uuid.UUID = await self.conn.fetchval(
            """INSERT INTO document_crossrefs (space_id, from_doc_id, to_doc_id, kind, context)
               VALUES ($1, $2, $3, $4, $5) RETURNING crossref_id""", self.space, a, b, kind, context)
        return value


@dataclass
class World:
    ids: dict[str, uuid.UUID]
    keys: dict[str, str]
    callers: dict[str, Caller]


async def build_world(dsn: str) -> World:
    db = await Database.connect(dsn)
    creds = PgCredentials(db)
    keys: dict[str, str] = {}
    callers: dict[str, Caller] = {}
    for name, kwargs in {
        "admin": {"scope": Scope.WRITE, "trusted": True},
        "alice": {"scope": Scope.READ, "principals": ["alice"]},
        "bob": {"scope": Scope.READ, "principals": ["bob"]},
    }.items():
        keys[name], callers[name] = await creds.create_key(**kwargs)  # type: ignore[arg-type]
    await creds.ensure_space("elsewhere", "Another space")
    keys["other"], callers["other"] = await creds.create_key(scope=Scope.READ, space_slug="elsewhere", trusted=True)
    await db.close()

    ids: dict[str, uuid.UUID] = {}
    conn = await asyncpg.connect(dsn)
    try:
        s = Seed(conn, callers["admin"].space_id)
        # --- the billing migration (RememberStack's "Time" walkthrough) ---------------
        kickoff = await s.doc("Billing kickoff")
        retro = await s.doc("Billing retro")
        roster = await s.doc("On-call roster")
        k1, r1, o1 = await s.claim(kickoff), await s.claim(retro), await s.claim(roster)
        for name in ("Ravi", "Billing migration", "Search team", "On-call rotation", "Dana", "Berlin", "Lisbon"):
            ids[name] = await s.entity(name)
        ids["billing"] = await s.relation(
            ids["Ravi"], "works_on", ids["Billing migration"], claims=[k1, r1], valid_from="2026-01-14T00:00:00Z",
            valid_until="2026-06-01T00:00:00Z", precision="day", ingested_at="2026-01-14T10:00:00Z",
            label="Ravi works on the billing migration")
        ids["search"] = await s.relation(
            ids["Ravi"], "works_on", ids["Search team"], claims=[r1], valid_from="2026-06-01T00:00:00Z",
            precision="open", ingested_at="2026-06-05T10:00:00Z", label="Ravi works on the search team")
        await s.relation(ids["Ravi"], "member_of", ids["On-call rotation"], claims=[o1],
                         ingested_at="2026-02-01T09:00:00Z", label="Ravi is on-call")
        await s.relation(ids["Ravi"], "reports_to", ids["Dana"], claims=[k1], ingested_at="2026-01-14T10:00:00Z",
                         invalidated_at="2026-04-01T00:00:00Z", label="Ravi reports to Dana")
        lisbon = await s.relation(ids["Ravi"], "located_in", ids["Lisbon"], claims=[r1],
                                  valid_from="2026-05-01T00:00:00Z", ingested_at="2026-06-05T10:00:00Z")
        await s.relation(ids["Ravi"], "located_in", ids["Berlin"], claims=[k1], valid_from="2025-01-01T00:00:00Z",
                         ingested_at="2026-01-14T10:00:00Z", superseded_by=lisbon)

        # --- paths: A-B-C-D and A-X-Y-D (two shortest), a 12-wide ladder --------------
        notes = await s.doc("Path notes")
        n1 = await s.claim(notes)
        for name in ("A", "B", "C", "D", "X", "Y", "Far1", "Far2", "Loner", "S", "T"):
            ids[name] = await s.entity(name)
        for a, b in (("A", "B"), ("B", "C"), ("C", "D"), ("A", "X"), ("X", "Y"), ("Y", "D"), ("D", "Far1"),
                     ("Far1", "Far2")):
            ids[f"{a}-{b}"] = await s.relation(ids[a], "linked_to", ids[b], claims=[n1])
        await conn.execute("INSERT INTO mentions (mention_id, space_id, doc_id, version_id, claim_id, surface_form, "
                           "normalized_lemma, resolved_entity_id) VALUES ($1, $2, $3, $4, $5, 'Loner', 'loner', $6)",
                           uuid.uuid4(), s.space, notes, s.chunks[notes][0], n1, ids["Loner"])
        for i in range(12):
            middle = await s.entity(f"M{i:02d}")
            await s.relation(ids["S"], "via", middle, claims=[n1])
            await s.relation(middle, "via", ids["T"], claims=[n1])

        # --- budgets: generated stars --------------------------------------------------
        bulk = await s.claim(notes, "bulk")
        ids["Star30"] = await s.star("Star30", 30, bulk)
        ids["Star900"] = await s.star("Star900", 900, bulk)
        ids["Star1200"] = await s.star("Star1200", 1200, bulk)
        ids["Star2500"] = await s.star("Star2500", 2500, bulk)
        ids["Beyond"] = await s.entity("Beyond")
        await s.relation(ids["Star900"], "linked_to", ids["Beyond"], claims=[n1])

        # --- ACL: one project, neighbours supported by differently visible documents ---
        public = await s.doc("Atlas overview")
        secret_a = await s.doc("Alice's notes", acl=["alice"])
        secret_b = await s.doc("Bob's notes", acl=["bob"])
        gone = await s.doc("Deleted memo", deleted=True)
        pa, sa, sb, dg = await s.claim(public), await s.claim(secret_a), await s.claim(secret_b), await s.claim(gone)
        stale = await s.claim(public, "superseded testimony", current=False)
        for name in ("Atlas", "Alpha", "Alphonse", "Beta", "Bertrand", "Gamma", "Delta", "Epsilon"):
            ids[name] = await s.entity(name)
        await s.relation(ids["Atlas"], "includes", ids["Alpha"], claims=[sa])
        await s.relation(ids["Alpha"], "led_by", ids["Alphonse"], claims=[sa])
        await s.relation(ids["Atlas"], "includes", ids["Beta"], claims=[sb])
        await s.relation(ids["Beta"], "led_by", ids["Bertrand"], claims=[sb])
        await s.relation(ids["Atlas"], "includes", ids["Gamma"], claims=[pa, sb])
        await s.relation(ids["Atlas"], "includes", ids["Delta"], claims=[stale])
        await s.relation(ids["Atlas"], "includes", ids["Epsilon"], claims=[dg])

        # --- citations: D1 -> D2 -> D3, D1 -> D4 -> D3, detours through invisible docs ---
        for name in ("D1", "D2", "D3", "D4"):
            ids[name] = await s.doc(f"Paper {name}")
        ids["D5"] = await s.doc("Paper D5", deleted=True)
        ids["D6"] = await s.doc("Paper D6", acl=["bob"])
        ids["D1-D2"] = await s.crossref(ids["D1"], ids["D2"], "cites", "see the method of D2")
        ids["D2-D3"] = await s.crossref(ids["D2"], ids["D3"], "cites")
        ids["D1-D4"] = await s.crossref(ids["D1"], ids["D4"], "links_to", "appendix")
        ids["D4-D3"] = await s.crossref(ids["D4"], ids["D3"], "replies_to")
        for detour in ("D5", "D6"):
            await s.crossref(ids["D1"], ids[detour])
            await s.crossref(ids[detour], ids["D3"])
        ids["D6-D3"] = await s.crossref(ids["D6"], ids["D2"], "attaches")
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    return World(ids, keys, callers)


@dataclass
class Stack:
    base: str
    grpc: str
    dsn: str
    world: World

    def id(self, name: str) -> str:
        return str(self.world.ids[name])

    def post(self, route: str, body: dict[str, Any], *, who: str = "admin") -> httpx.Response:
        return httpx.post(f"{self.base}/graph/{route}", json=body, timeout=30,
                          headers={"authorization": f"Bearer {self.world.keys[who]}"})

    def ok(self, route: str, body: dict[str, Any], *, who: str = "admin") -> dict[str, Any]:
        reply = self.post(route, body, who=who)
        assert reply.status_code == 200, reply.text
        envelope: dict[str, Any] = reply.json()
        return envelope

    def names(self, envelope: dict[str, Any]) -> dict[str, int]:
        return {n["name"]: n["hops"] for n in envelope["nodes"]}


@pytest.fixture(scope="module")
def stack(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    dsn = clone_database(pg)
    world = asyncio.run(build_world(dsn))
    tmp = tmp_path_factory.mktemp("graph")
    with run_service("graph", dsn, tmp) as graph, run_gateway(dsn, tmp, graph=graph.address) as gateway:
        yield Stack(f"http://127.0.0.1:{gateway.extra['http']}", graph.address, dsn, world)


ENVELOPE_KEYS = {"grain", "temporal_scope", "entities", "facts", "evidence", "fact_evidence", "evidence_totals",
                 "chunks", "sources", "transcript", "nodes", "paths", "edges", "ranking", "changes", "aggregate",
                 "pages", "freshness", "truncation", "dropped_by_hydration", "excluded_unstamped", "negative"}


def at(day: str, believed: str | None = None) -> dict[str, str]:
    return {"valid_at": f"{day}T00:00:00Z", "believed_at": f"{believed or day}T00:00:00Z"}


# --- the billing migration -------------------------------------------------------------


def test_ravi_in_march_works_on_the_billing_migration(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), **at("2026-03-01")})
    assert set(env) == ENVELOPE_KEYS and env["grain"] == "fact"
    assert stack.names(env) == {"Ravi": 0, "Billing migration": 1, "On-call rotation": 1, "Dana": 1}
    assert env["temporal_scope"]["mode"] == "as_of"
    assert env["temporal_scope"]["valid_at"] == env["temporal_scope"]["believed_at"] == "2026-03-01T00:00:00Z"
    assert set(env["temporal_scope"]) == {"mode", "valid_at", "evaluated_at", "believed_at", "identity_regime"}
    assert env["temporal_scope"]["identity_regime"] == "current"
    assert env["paths"] == [] and env["edges"] == []
    assert env["truncation"] == {"truncated": False, "returned": 4, "estimated_total": 4, "total_is_exact": True,
                                 "continuation": None, "reason": None}
    assert env["negative"] is None and env["dropped_by_hydration"] == 0
    assert env["freshness"]["pg_live_ts"].endswith("Z")


def test_ravi_in_july_works_on_the_search_team(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), **at("2026-07-01"), "include_paths": True})
    # Dana's fact was invalidated in April; Berlin was superseded (no end: counts as ended).
    assert stack.names(env) == {"Ravi": 0, "Search team": 1, "On-call rotation": 1, "Lisbon": 1}
    search = next(e for e in env["edges"] if e["relation_id"] == stack.id("search"))
    assert search == {
        "relation_id": stack.id("search"), "subject_id": stack.id("Ravi"), "object_id": stack.id("Search team"),
        "predicate": "works_on", "fact": "Ravi works on the search team", "evidence_count": 1,
        "valid_from": "2026-06-01T00:00:00Z", "valid_until": None, "valid_precision": "open",
        "ingested_at": "2026-06-05T10:00:00Z", "invalidated_at": None, "support": "current",
    }
    assert len(env["paths"]) == 3 and all(p["length"] == 1 and p["nodes"][0]["name"] == "Ravi" for p in env["paths"])


def test_before_the_retro_was_ingested_the_june_facts_are_absent(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), **at("2026-06-15", "2026-06-02")})
    # The search team and Lisbon were learned on June 5th; the billing window is shown as it
    # stands today (ended June 1st); Dana was still believed... until April.
    assert stack.names(env) == {"Ravi": 0, "On-call rotation": 1}
    before = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), **at("2026-03-01", "2026-03-01")})
    assert "Dana" in stack.names(before)  # believed then, invalidated on April 1st
    nothing = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), **at("2026-03-01", "2026-01-01")})
    assert nothing["nodes"] == [] and nothing["negative"]["kind"] == "known_empty"


def test_default_clocks_are_the_request_instant(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("A"), "hops": 1, "valid_at": None, "believed_at": None})
    scope = env["temporal_scope"]
    assert scope["valid_at"] == scope["believed_at"] == scope["evaluated_at"]
    assert stack.names(env) == {"A": 0, "B": 1, "X": 1}


def test_predicates_filter_and_unknown_ones_match_nothing(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), "predicates": ["member_of"], **at("2026-07-01")})
    assert stack.names(env) == {"Ravi": 0, "On-call rotation": 1}
    none = stack.ok("neighborhood", {"entity_id": stack.id("Ravi"), "predicates": ["no_such_predicate"]})
    assert none["negative"]["kind"] == "known_empty"


def test_hops_reach_further_and_paths_are_whole(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("A"), "hops": 3, "include_paths": True})
    assert stack.names(env) == {"A": 0, "B": 1, "X": 1, "C": 2, "Y": 2, "D": 3}
    hops = [n["hops"] for n in env["nodes"]]
    assert hops == sorted(hops)
    assert len(env["paths"]) == 5
    for path in env["paths"]:
        assert path["length"] == len(path["edges"]) == len(path["nodes"]) - 1
        assert [n["hops"] for n in path["nodes"]] == list(range(path["length"] + 1))
    assert len({e["relation_id"] for e in env["edges"]}) == len(env["edges"]) == 5


def test_unknown_and_empty_neighbourhoods(stack: Stack) -> None:
    unknown = stack.ok("neighborhood", {"entity_id": str(uuid.uuid4())})
    assert unknown["negative"]["kind"] == "unknown_entity" and unknown["nodes"] == []
    assert unknown["truncation"]["truncated"] is False
    loner = stack.ok("neighborhood", {"entity_id": stack.id("Loner")})  # named in a document, no relation
    assert loner["negative"]["kind"] == "known_empty"


# --- paths -----------------------------------------------------------------------------


def test_two_shortest_paths_of_equal_length(stack: Stack) -> None:
    env = stack.ok("path", {"from_entity_id": stack.id("A"), "to_entity_id": stack.id("D")})
    routes = sorted([n["name"] for n in p["nodes"]] for p in env["paths"])
    assert routes == [["A", "B", "C", "D"], ["A", "X", "Y", "D"]]
    assert {p["length"] for p in env["paths"]} == {3}
    assert stack.names(env) == {"A": 0, "B": 1, "X": 1, "C": 2, "Y": 2, "D": 3}
    assert len(env["edges"]) == 6 and env["negative"] is None
    assert env["truncation"]["returned"] == 2 and env["truncation"]["truncated"] is False
    short = stack.ok("path", {"from_entity_id": stack.id("A"), "to_entity_id": stack.id("Far2"), "max_hops": 4})
    assert short["negative"]["kind"] == "known_empty"  # Far2 is 5 hops away
    longer = stack.ok("path", {"from_entity_id": stack.id("A"), "to_entity_id": stack.id("Far2"), "max_hops": 5})
    assert [p["length"] for p in longer["paths"]] == [5, 5]


def test_at_most_ten_paths_and_the_cap_is_reported(stack: Stack) -> None:
    env = stack.ok("path", {"from_entity_id": stack.id("S"), "to_entity_id": stack.id("T")})
    assert len(env["paths"]) == 10 and {p["length"] for p in env["paths"]} == {2}
    assert env["truncation"] == {"truncated": True, "returned": 10, "estimated_total": 12, "total_is_exact": True,
                                 "continuation": None, "reason": "result_budget"}
    assert len({n["entity_id"] for n in env["nodes"]}) == len(env["nodes"]) == 12
    assert len({e["relation_id"] for e in env["edges"]}) == len(env["edges"]) == 20


def test_path_negatives(stack: Stack) -> None:
    missing = stack.ok("path", {"from_entity_id": stack.id("A"), "to_entity_id": str(uuid.uuid4())})
    assert missing["negative"]["kind"] == "unknown_entity"
    apart = stack.ok("path", {"from_entity_id": stack.id("A"), "to_entity_id": stack.id("Ravi")})
    assert apart["negative"]["kind"] == "known_empty" and apart["paths"] == []
    assert apart["truncation"]["truncated"] is False


# --- citation chains -------------------------------------------------------------------


def test_citation_chains_follow_live_visible_documents(stack: Stack) -> None:
    env = stack.ok("citation-path", {"from_doc_id": stack.id("D1"), "to_doc_id": stack.id("D3")}, who="alice")
    chains = sorted([n["name"] for n in p["nodes"]] for p in env["paths"])
    assert chains == [["Paper D1", "Paper D2", "Paper D3"], ["Paper D1", "Paper D4", "Paper D3"]]
    assert env["temporal_scope"]["mode"] == "current" and "valid_at" not in env["temporal_scope"]
    edge = next(e for e in env["edges"] if e["relation_id"] == stack.id("D1-D2"))
    assert edge == {"relation_id": stack.id("D1-D2"), "subject_id": stack.id("D1"), "object_id": stack.id("D2"),
                    "predicate": "cites", "fact": "see the method of D2", "evidence_count": 0, "valid_from": None,
                    "valid_until": None, "valid_precision": "unknown", "ingested_at": None,
                    "invalidated_at": None, "support": "current"}
    assert {e["predicate"] for e in env["edges"]} == {"cites", "links_to", "replies_to"}
    assert "D6" not in json.dumps(env) and "D5" not in json.dumps(env)
    backwards = stack.ok("citation-path", {"from_doc_id": stack.id("D3"), "to_doc_id": stack.id("D1")})
    assert backwards["negative"]["kind"] == "known_empty"
    deleted = stack.ok("citation-path", {"from_doc_id": stack.id("D1"), "to_doc_id": stack.id("D5")})
    assert deleted["negative"]["kind"] == "unknown_entity"
    hidden = stack.ok("citation-path", {"from_doc_id": stack.id("D6"), "to_doc_id": stack.id("D3")}, who="alice")
    assert hidden["negative"]["kind"] == "unknown_entity"
    seen_by_bob = stack.ok("citation-path", {"from_doc_id": stack.id("D6"), "to_doc_id": stack.id("D3")}, who="bob")
    assert [len(p["edges"]) for p in seen_by_bob["paths"]] == [1]


# --- budgets ---------------------------------------------------------------------------


def test_result_budget_pages_with_a_continuation(stack: Stack) -> None:
    seen: list[str] = []
    body: dict[str, Any] = {"entity_id": stack.id("Star30"), "hops": 1, "limit": 10}
    pages = 0
    while True:
        env = stack.ok("neighborhood", body)
        pages += 1
        seen += [n["entity_id"] for n in env["nodes"]]
        t = env["truncation"]
        assert t["estimated_total"] == 31 and t["total_is_exact"] is True
        if t["continuation"] is None:
            assert t["truncated"] is False
            break
        assert (t["truncated"], t["reason"], t["returned"]) == (True, "result_budget", 10)
        body = {**body, "continuation": t["continuation"]}
    assert pages == 4 and len(seen) == len(set(seen)) == 31 and seen[0] == stack.id("Star30")


def test_a_foreign_or_forged_continuation_is_a_boundary(stack: Stack) -> None:
    first = stack.ok("neighborhood", {"entity_id": stack.id("Star30"), "hops": 1, "limit": 5})
    token = first["truncation"]["continuation"]
    for who, body in [
        ("admin", {"entity_id": stack.id("Star900"), "hops": 1, "continuation": token}),  # another query
        ("admin", {"entity_id": stack.id("Star30"), "hops": 2, "continuation": token}),
        ("admin", {"entity_id": stack.id("Star30"), "hops": 1, "continuation": token, **at("2026-03-01")}),
        ("alice", {"entity_id": stack.id("Star30"), "hops": 1, "continuation": token}),  # another caller
        ("admin", {"entity_id": stack.id("Star30"), "hops": 1, "continuation": "forged-token"}),
        ("admin", {"entity_id": stack.id("Star30"), "hops": 1, "continuation": token[:-3] + "AAA"}),
    ]:
        env = stack.ok("neighborhood", body, who=who)
        assert env["negative"]["kind"] == "boundary", body
        assert env["nodes"] == [] and env["truncation"]["truncated"] is False


def test_frontier_budget(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Star1200"), "hops": 2, "limit": 500})
    t = env["truncation"]
    assert (t["truncated"], t["reason"], t["total_is_exact"]) == (True, "frontier_budget", False)
    assert t["estimated_total"] == 1001 and t["returned"] == 500 and t["continuation"]


def test_expansion_budget(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Star2500"), "hops": 1})
    t = env["truncation"]
    assert (t["truncated"], t["reason"], t["total_is_exact"]) == (True, "expansion_budget", False)
    assert t["returned"] == 500 and t["estimated_total"] == 1001


def test_path_stopped_by_a_budget_is_a_boundary_not_a_none(stack: Stack) -> None:
    env = stack.ok("path", {"from_entity_id": stack.id("Star2500"), "to_entity_id": stack.id("Ravi")})
    assert env["negative"]["kind"] == "boundary"
    assert env["truncation"]["reason"] == "expansion_budget" and env["truncation"]["truncated"] is True


# --- ACL -------------------------------------------------------------------------------

HIDDEN_FROM_ALICE = ("Beta", "Bertrand", "Delta", "Epsilon")
HIDDEN_FROM_BOB = ("Alpha", "Alphonse", "Delta", "Epsilon")


def test_two_principals_see_different_neighbourhoods(stack: Stack) -> None:
    body = {"entity_id": stack.id("Atlas"), "include_paths": True}
    alice = stack.ok("neighborhood", body, who="alice")
    bob = stack.ok("neighborhood", body, who="bob")
    admin = stack.ok("neighborhood", body, who="admin")
    assert stack.names(alice) == {"Atlas": 0, "Alpha": 1, "Gamma": 1, "Alphonse": 2}
    assert stack.names(bob) == {"Atlas": 0, "Beta": 1, "Gamma": 1, "Bertrand": 2}
    # Not current testimony (Delta) and a deleted document (Epsilon) support nothing.
    assert stack.names(admin) == {"Atlas": 0, "Alpha": 1, "Beta": 1, "Gamma": 1, "Alphonse": 2, "Bertrand": 2}
    for envelope, hidden in ((alice, HIDDEN_FROM_ALICE), (bob, HIDDEN_FROM_BOB)):
        text = json.dumps(envelope)
        assert not any(name in text for name in hidden)
        assert envelope["truncation"]["estimated_total"] == 4
    for name in ("Beta", "Bertrand"):
        env = stack.ok("neighborhood", {"entity_id": stack.id(name)}, who="alice")
        assert env["negative"]["kind"] == "unknown_entity" and name not in json.dumps(env)
    env = stack.ok("path", {"from_entity_id": stack.id("Atlas"), "to_entity_id": stack.id("Bertrand")}, who="alice")
    assert env["negative"]["kind"] == "unknown_entity"
    env = stack.ok("path", {"from_entity_id": stack.id("Alphonse"), "to_entity_id": stack.id("Gamma")}, who="alice")
    assert [[n["name"] for n in p["nodes"]] for p in env["paths"]] == [["Alphonse", "Alpha", "Atlas", "Gamma"]]


def test_another_space_sees_nothing(stack: Stack) -> None:
    env = stack.ok("neighborhood", {"entity_id": stack.id("Atlas")}, who="other")
    assert env["negative"]["kind"] == "unknown_entity" and env["nodes"] == []


# --- bad input -------------------------------------------------------------------------


def locs(reply: httpx.Response) -> list[tuple[Any, ...]]:
    assert reply.status_code == 422, reply.text
    return [tuple(item["loc"]) for item in reply.json()["detail"]]


def test_bad_input_is_a_422_list_naming_each_field(stack: Stack) -> None:
    ravi = stack.id("Ravi")
    cases: list[tuple[str, dict[str, Any], list[tuple[Any, ...]]]] = [
        ("neighborhood", {"entity_id": ravi, "valid_at": "2026-03-01T00:00:00Z"}, [("body", "believed_at")]),
        ("neighborhood", {"entity_id": ravi, "believed_at": "2026-03-01T00:00:00Z"}, [("body", "valid_at")]),
        ("neighborhood", {"entity_id": ravi, "valid_at": "2026-03-01T00:00:00+02:00",
                          "believed_at": "2026-03-01T00:00:00Z"}, [("body", "valid_at")]),
        ("neighborhood", {"entity_id": ravi, **at("2026-03-01"), "believed_at": "2026-03-01T00:00:00"},
         [("body", "believed_at")]),
        ("neighborhood", {"entity_id": ravi, "hops": 0}, [("body", "hops")]),
        ("neighborhood", {"entity_id": ravi, "hops": 5}, [("body", "hops")]),
        ("neighborhood", {"entity_id": ravi, "limit": 501}, [("body", "limit")]),
        ("neighborhood", {"entity_id": ravi, "predicates": ["ok", "", "p" * 201]},
         [("body", "predicates", 1), ("body", "predicates", 2)]),
        ("neighborhood", {"entity_id": ravi, "predicates": ["p"] * 101}, [("body", "predicates")]),
        ("neighborhood", {"entity_id": ravi, "continuation": "c" * 201}, [("body", "continuation")]),
        ("neighborhood", {"entity_id": ravi, "depth": 2}, [("body", "depth")]),
        ("neighborhood", {"entity_id": "ravi"}, [("body", "entity_id")]),
        ("neighborhood", {}, [("body", "entity_id")]),
        ("neighborhood", {"entity_id": ravi, "hops": "two"}, [("body", "hops")]),
        ("path", {"from_entity_id": ravi, "to_entity_id": ravi, "max_hops": 7}, [("body", "max_hops")]),
        ("path", {"from_entity_id": ravi, "to_entity_id": ravi, "valid_at": "2026-03-01T00:00:00Z"},
         [("body", "believed_at")]),
        ("citation-path", {"from_doc_id": stack.id("D1"), "to_doc_id": stack.id("D3"), "max_hops": 0},
         [("body", "max_hops")]),
        ("citation-path", {"from_doc_id": stack.id("D1"), "to_doc_id": stack.id("D3"),
                           "valid_at": "2026-03-01T00:00:00Z"}, [("body", "valid_at")]),
    ]
    for route, body, expected in cases:
        assert locs(stack.post(route, body)) == expected, (route, body)
    many = stack.post("neighborhood", {"entity_id": "x", "hops": 9, "limit": 0, "valid_at": "2026-03-01"})
    assert locs(many) == [("body", "entity_id"), ("body", "hops"), ("body", "believed_at"), ("body", "valid_at"),
                          ("body", "limit")]
    item = stack.post("neighborhood", {"entity_id": ravi, "hops": 5}).json()["detail"][0]
    assert item == {"type": "less_than_equal", "loc": ["body", "hops"], "input": 5, "ctx": {"le": 4},
                    "msg": "Input should be less than or equal to 4"}


def test_a_read_credential_is_needed(stack: Stack) -> None:
    reply = httpx.post(f"{stack.base}/graph/neighborhood", json={"entity_id": stack.id("Ravi")}, timeout=10)
    assert reply.status_code == 401


# --- gRPC ------------------------------------------------------------------------------


def call(stack: Stack, method: str, request: Any, who: str = "admin") -> Any:
    with grpc.insecure_channel(stack.grpc) as channel:
        stub = graph_pb2_grpc.GraphServiceStub(channel)
        return getattr(stub, method)(request, timeout=30,
                                     metadata=(("authorization", f"Bearer {stack.world.keys[who]}"),))


def test_grpc_neighbourhood_and_path(stack: Stack) -> None:
    reply = call(stack, "Neighborhood", graph_pb2.NeighborhoodRequest(
        entity_id=stack.id("Ravi"), valid_at="2026-03-01T00:00:00Z", believed_at="2026-03-01T00:00:00Z"))
    env = reply.envelope
    assert {n.name for n in env.nodes} == {"Ravi", "Billing migration", "On-call rotation", "Dana"}
    assert env.temporal_scope.WhichOneof("scope") == "as_of" and env.truncation.returned == 4
    path = call(stack, "Path", graph_pb2.PathRequest(from_entity_id=stack.id("A"), to_entity_id=stack.id("D")))
    assert len(path.envelope.paths) == 2
    with pytest.raises(grpc.RpcError) as caught:
        call(stack, "Neighborhood", graph_pb2.NeighborhoodRequest(entity_id=stack.id("Ravi"), hops=7))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_grpc_expand_entities_for_facts_context(stack: Stack) -> None:
    reply = call(stack, "ExpandEntities", graph_pb2.ExpandEntitiesRequest(
        anchor_entity_ids=[stack.id("A")], hops=2))
    assert [(e.entity_id, e.hops) for e in reply.entities][:1] == [(stack.id("A"), 0)]
    assert {e.entity_id for e in reply.entities} == {stack.id(n) for n in ("A", "B", "X", "C", "Y")}
    assert [e.hops for e in reply.entities] == sorted(e.hops for e in reply.entities)
    assert reply.truncated is False
    wide = call(stack, "ExpandEntities", graph_pb2.ExpandEntitiesRequest(
        anchor_entity_ids=[stack.id("Star30"), stack.id("Ravi")], hops=1, predicate="has_leaf"))
    assert len(wide.entities) == 20 and wide.truncated is True
    assert [e.entity_id for e in wide.entities[:2]] == [stack.id("Star30"), stack.id("Ravi")]
    then = call(stack, "ExpandEntities", graph_pb2.ExpandEntitiesRequest(
        anchor_entity_ids=[stack.id("Ravi")], hops=1, valid_at=_ts("2026-03-01T00:00:00Z")))
    assert stack.id("Billing migration") in {e.entity_id for e in then.entities}
    hidden = call(stack, "ExpandEntities", graph_pb2.ExpandEntitiesRequest(
        anchor_entity_ids=[stack.id("Atlas")], hops=2), who="alice")
    assert stack.id("Beta") not in {e.entity_id for e in hidden.entities}
    for bad in (graph_pb2.ExpandEntitiesRequest(hops=1),
                graph_pb2.ExpandEntitiesRequest(anchor_entity_ids=[str(uuid.uuid4())] * 20, hops=1),
                graph_pb2.ExpandEntitiesRequest(anchor_entity_ids=["nope"], hops=1),
                graph_pb2.ExpandEntitiesRequest(anchor_entity_ids=[stack.id("A")], hops=3)):
        with pytest.raises(grpc.RpcError) as caught:
            call(stack, "ExpandEntities", bad)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _ts(text: str) -> Any:
    from google.protobuf import timestamp_pb2

    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(utc(text))
    return stamp


# --- in-process: between nomination and confirmation, and lowered limits ---------------


@pytest.fixture()
async def db(stack: Stack) -> Any:
    database = await Database.connect(stack.dsn)
    try:
        yield database
    finally:
        await database.close()


CLOCKS = Clocks(utc("2030-01-01T00:00:00Z"), utc("2030-01-01T00:00:00Z"))


def retract(fact_id: uuid.UUID) -> Any:
    """A hook that retracts a relation between nomination and confirmation. The store is
    opened read-write for the test, so the hook's UPDATE runs inside the request's own
    transaction: the confirmation re-reads in the same snapshot and sees it, exactly as it
    would see a retraction that happened between two reads of a live graph. The
    transaction is always rolled back, so nothing persists."""

    async def hook(snap: Snapshot, route: str) -> None:
        await snap.conn.execute(  # type: ignore[attr-defined]
            "UPDATE facts SET invalidated_at = '2026-08-01T00:00:00Z' WHERE fact_id = $1", fact_id)

    return hook


async def test_a_path_whose_middle_edge_is_retracted_is_dropped_whole(stack: Stack, db: Database) -> None:
    admin = stack.world.callers["admin"]
    ids = stack.world.ids
    query = PathQuery(ids["A"], ids["D"], clocks=CLOCKS)
    service = GraphService(PgGraphStore(db, readonly=False), after_nomination=retract(ids["B-C"]))
    result = await service.path(admin, query)
    assert [[n.name for n in p.nodes] for p in result.paths] == [["A", "X", "Y", "D"]]
    assert result.dropped_by_hydration == 1
    assert (result.truncation.returned, result.truncation.estimated_total) == (1, 2)
    assert {n.name for n in result.nodes} == {"A", "X", "Y", "D"}
    assert ids["B-C"] not in {e.relation_id for e in result.edges}
    # Both paths lose an edge: nothing is returned shortened, the drop says why.
    twice = GraphService(PgGraphStore(db, readonly=False), after_nomination=_both(retract(ids["B-C"]),
                                                                                  retract(ids["X-Y"])))
    empty = await twice.path(admin, query)
    assert empty.paths == () and empty.nodes == () and empty.dropped_by_hydration == 2
    assert empty.negative is not None and empty.negative.kind == "boundary"
    # Nothing persisted: the same request without a hook finds both paths again.
    again = await GraphService(PgGraphStore(db)).path(admin, query)
    assert len(again.paths) == 2 and again.dropped_by_hydration == 0


async def test_a_neighbour_reached_through_a_retracted_edge_is_dropped(stack: Stack, db: Database) -> None:
    ids = stack.world.ids
    service = GraphService(PgGraphStore(db, readonly=False), after_nomination=retract(ids["A-B"]))
    result = await service.neighborhood(stack.world.callers["admin"], NeighborhoodQuery(
        ids["A"], hops=2, clocks=CLOCKS, include_paths=True))
    # B (through A-B) and C (through A-B, B-C) are dropped, never re-routed or shortened.
    assert {n.name for n in result.nodes} == {"A", "X", "Y"}
    assert result.dropped_by_hydration == 2 and result.truncation.estimated_total == 5
    assert all(ids["A-B"] != e.relation_id for e in result.edges)


def _both(*hooks: Any) -> Any:
    async def hook(snap: Snapshot, route: str) -> None:
        for h in hooks:
            await h(snap, route)

    return hook


async def test_time_budget(stack: Stack, db: Database) -> None:
    admin, ids = stack.world.callers["admin"], stack.world.ids
    # 1 ms: the first level (900 edges, each checked against its evidence) outlasts it,
    # so the second level never starts.
    service = GraphService(PgGraphStore(db), budgets=Budgets(time_ms=1))
    result = await service.neighborhood(admin, NeighborhoodQuery(ids["Star900"], hops=2))
    t = result.truncation
    assert (t.truncated, t.reason, t.total_is_exact, t.estimated_total) == (True, "time_budget", False, 902)
    # Spent before anything was found: a boundary, not a none.
    nothing = await GraphService(PgGraphStore(db), budgets=Budgets(time_ms=0)).neighborhood(
        admin, NeighborhoodQuery(ids["Star30"], hops=1))
    assert nothing.negative is not None and nothing.negative.kind == "boundary"
    assert nothing.truncation.reason == "time_budget"


async def test_statement_timeout_is_a_503_timed_out(stack: Stack, db: Database) -> None:
    async def slow(snap: Snapshot, route: str) -> None:
        await snap.conn.execute("SELECT pg_sleep(2)")  # type: ignore[attr-defined]

    service = GraphService(PgGraphStore(db), budgets=Budgets(statement_timeout_ms=200), after_nomination=slow)
    with pytest.raises(Unavailable) as caught:
        await service.neighborhood(stack.world.callers["admin"], NeighborhoodQuery(stack.world.ids["A"]))
    assert (caught.value.detail, caught.value.http_status) == ("live graph timed out", 503)


async def test_no_free_slot_within_the_wait_is_busy(stack: Stack, db: Database) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def hold(snap: Snapshot, route: str) -> None:
        entered.set()
        await release.wait()

    service = GraphService(PgGraphStore(db), slots=2, after_nomination=hold)
    admin, ids = stack.world.callers["admin"], stack.world.ids
    holders = [asyncio.create_task(service.neighborhood(admin, NeighborhoodQuery(ids["A"]))) for _ in range(2)]
    await entered.wait()
    await asyncio.sleep(0.05)
    started = asyncio.get_running_loop().time()
    with pytest.raises(Unavailable) as caught:
        await service.path(admin, PathQuery(ids["A"], ids["D"]))
    waited = asyncio.get_running_loop().time() - started
    assert (caught.value.detail, caught.value.http_status) == ("live graph is busy", 503)
    assert 0.9 <= waited < 2.0
    release.set()
    assert all(len(r.nodes) == 5 for r in await asyncio.gather(*holders))
    assert len((await service.path(admin, PathQuery(ids["A"], ids["D"]))).paths) == 2
