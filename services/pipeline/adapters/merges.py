"""Merge proposals, and applying or reverting one.

Identity is decided at write time; merges revisit it. Proposals are *recorded*, never
applied automatically: an operator applies one (``testament ops merges apply``).

* **Proposing.** A group forms around one seed entity (the entity a mention chose among
  compatible rivals, or an entity whose profile was just refreshed): the seed plus the
  neighbours that qualify *against the seed* (compatible aliases with a profile that does
  not disagree, or a very close profile with names that do not positively differ). The
  survivor is the best-supported member (most facts and mentions, then the oldest); every
  other member that qualifies *against the survivor* is proposed as absorbed into it. No
  chaining of pairwise guesses, so arrival order does not decide. A pair is proposed once
  ever, in either direction; groups larger than MERGE_GROUP_MAX are held back.
* **Applying** is a redirect (``entities.merged_into = survivor``) stored with a JSON
  snapshot of what it changes: the absorbed entity's row, its aliases, and the facts and
  mentions that point at it. Facts and mentions are not rewritten; readers follow the
  redirect. A merge touching more than MERGE_MAX_FACTS facts, or one that would chain
  through an already merged entity (either side merged, or the absorbed entity already a
  survivor), is refused.
* **Reverting** replays the snapshot: the absorbed entity's row and its aliases are put back
  exactly as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.pipeline.domain.entities import names_compatible
from services.platform.locks import lock_space

MERGE_MAX_FACTS = 50  # facts (subject or object) of the absorbed entity above which apply refuses
MERGE_GROUP_MAX = 6  # a group larger than this is suspicious: nothing is proposed
MERGE_ALIAS_PROFILE_MIN = 0.5  # compatible aliases: the profiles' cosine must reach this (when both exist)
MERGE_PROFILE_MIN = 0.9  # incompatible aliases: only a near-identical profile proposes
NEIGHBOURS = 8  # neighbours examined per seed, by alias and by profile


class MergeRefused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class _Member:
    entity_id: uuid.UUID
    normalized_name: str
    aliases: tuple[str, ...]
    vector: np.ndarray | None
    support: int  # current facts + mentions
    created_at: dt.datetime


def _cosine(a: _Member, b: _Member) -> float | None:
    if a.vector is None or b.vector is None or a.vector.shape != b.vector.shape:
        return None
    na, nb = float(np.linalg.norm(a.vector)), float(np.linalg.norm(b.vector))
    return float(a.vector @ b.vector) / (na * nb) if na and nb else None


def qualify(a: _Member, b: _Member) -> float | None:
    """The score of merging ``a`` and ``b``, or None when they should not be proposed."""
    names = names_compatible(a.aliases or (a.normalized_name,), b.aliases or (b.normalized_name,))
    cos = _cosine(a, b)
    if names > 0:
        if cos is None:
            return round(names, 4)
        return round(cos, 4) if cos >= MERGE_ALIAS_PROFILE_MIN else None
    full_names = len(a.normalized_name.split()) > 1 and len(b.normalized_name.split()) > 1
    if cos is not None and cos >= MERGE_PROFILE_MIN and not full_names:  # "Dana Kim" vs "Dana Lee": never
        return round(cos, 4)
    return None


async def _members(conn: Any, space_id: uuid.UUID, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, _Member]:
    rows = await conn.fetch(
        """SELECT e.entity_id, e.normalized_name, e.profile_embedding, e.created_at,
                  ARRAY(SELECT a.normalized_alias FROM entity_aliases a WHERE a.entity_id = e.entity_id
                         ORDER BY 1) AS aliases,
                  (SELECT count(*) FROM facts f WHERE f.space_id = e.space_id AND f.invalidated_at IS NULL
                      AND f.subject_entity_id = e.entity_id)
                  + (SELECT count(*) FROM facts f WHERE f.space_id = e.space_id AND f.invalidated_at IS NULL
                      AND f.object_entity_id = e.entity_id)
                  + (SELECT count(*) FROM mentions m WHERE m.resolved_entity_id = e.entity_id) AS support
             FROM entities e
            WHERE e.space_id = $1 AND e.entity_id = ANY($2::uuid[]) AND e.merged_into IS NULL""",
        space_id, list(ids))
    return {r["entity_id"]: _Member(
        r["entity_id"], r["normalized_name"], tuple(r["aliases"] or ()),
        _array(r["profile_embedding"]), int(r["support"]), r["created_at"]) for r in rows}


def _array(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if hasattr(value, "to_numpy"):  # pgvector's Vector
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float64)


def _survivor(group: Sequence[_Member]) -> _Member:
    return min(group, key=lambda m: (-m.support, m.created_at, str(m.entity_id)))


async def _record(conn: Any, space_id: uuid.UUID, groups: Sequence[tuple[uuid.UUID, Collection[uuid.UUID]]],
                  members: dict[uuid.UUID, _Member]) -> list[uuid.UUID]:
    involved = sorted({i for seed, others in groups for i in (seed, *others)}, key=str)
    seen = {frozenset((r[0], r[1])) for r in await conn.fetch(
        """SELECT survivor_id, absorbed_id FROM merge_proposals
            WHERE survivor_id = ANY($1::uuid[]) AND absorbed_id = ANY($1::uuid[])""", involved)}
    created: list[uuid.UUID] = []
    for seed_id, others in groups:
        seed = members.get(seed_id)
        if seed is None:
            continue
        group = [seed] + [members[o] for o in others
                          if o != seed_id and o in members and qualify(seed, members[o]) is not None]
        if len(group) < 2 or len(group) > MERGE_GROUP_MAX:
            continue
        survivor = _survivor(group)
        for member in group:
            pair = frozenset((survivor.entity_id, member.entity_id))
            if member is survivor or pair in seen:
                continue
            score = qualify(survivor, member)
            if score is None:
                continue
            seen.add(pair)
            proposal = await conn.fetchval(
                """INSERT INTO merge_proposals (space_id, survivor_id, absorbed_id, score) VALUES ($1, $2, $3, $4)
                   ON CONFLICT (survivor_id, absorbed_id, space_id) DO NOTHING RETURNING proposal_id""",
                space_id, survivor.entity_id, member.entity_id, score)
            if proposal is not None:
                created.append(proposal)
    return created


async def propose_group(conn: Any, space_id: uuid.UUID, members: Collection[uuid.UUID], *,
                        seed: uuid.UUID) -> list[uuid.UUID]:
    """Record proposals for one group formed around ``seed`` (see the module note)."""
    rows = await _members(conn, space_id, {seed, *members})
    return await _record(conn, space_id, [(seed, [m for m in members if m != seed])], rows)


async def propose_neighbours(conn: Any, space_id: uuid.UUID, entity_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Re-examine the neighbourhood of each entity (aliases by trigram, profiles by cosine)."""
    return await record_neighbourhood(conn, space_id, await neighbourhood(conn, space_id, entity_ids))


async def neighbourhood(conn: Any, space_id: uuid.UUID, entity_ids: Sequence[uuid.UUID],
                        profiles: Mapping[uuid.UUID, Sequence[float] | None] | None = None,
                        ) -> dict[uuid.UUID, list[uuid.UUID]]:
    """Each entity's nearest others by alias (trigram) and by profile (cosine). Reads only, so
    it may run outside the space lock; ``profiles`` are vectors about to be stored, searched
    in place of the stored ones (None: the profile will have no vector)."""
    profiles = profiles or {}
    neighbours: dict[uuid.UUID, list[uuid.UUID]] = {e: [] for e in entity_ids}
    if not entity_ids:
        return neighbours
    rows = await conn.fetch(
        """SELECT seed, other FROM (
               SELECT a1.entity_id AS seed, a2.entity_id AS other,
                      row_number() OVER (PARTITION BY a1.entity_id
                                         ORDER BY similarity(a1.normalized_alias, a2.normalized_alias) DESC,
                                                  a2.entity_id) AS n
                 FROM entity_aliases a1
                 JOIN entity_aliases a2 ON a2.space_id = a1.space_id AND a2.normalized_alias % a1.normalized_alias
                                       AND a2.entity_id <> a1.entity_id
                 JOIN entities e2 ON e2.entity_id = a2.entity_id AND e2.space_id = a2.space_id
                      AND e2.merged_into IS NULL
                WHERE a1.space_id = $1 AND a1.entity_id = ANY($2::uuid[])) x
            WHERE n <= $3""", space_id, list(entity_ids), NEIGHBOURS * 2)
    for r in rows:
        neighbours[r["seed"]].append(r["other"])
    stored = [e for e in entity_ids if e not in profiles]
    dims = [r[0] for r in await conn.fetch(
        """SELECT DISTINCT profile_dim FROM entities
            WHERE entity_id = ANY($1::uuid[]) AND profile_dim IS NOT NULL AND merged_into IS NULL""",
        stored)] if stored else []
    for dim in dims:
        dim = int(dim)  # a literal, so the partial HNSW index applies
        rows = await conn.fetch(
            f"""SELECT s.entity_id AS seed, n.entity_id AS other
                  FROM entities s
                  CROSS JOIN LATERAL (
                      SELECT e.entity_id FROM entities e
                       WHERE e.space_id = s.space_id AND e.profile_dim = {dim} AND e.merged_into IS NULL
                         AND e.entity_id <> s.entity_id AND e.profile_embedding IS NOT NULL
                       ORDER BY e.profile_embedding::vector({dim}) <=> s.profile_embedding::vector({dim})
                       LIMIT $3) n
                 WHERE s.space_id = $1 AND s.entity_id = ANY($2::uuid[]) AND s.profile_dim = {dim}
                   AND s.profile_embedding IS NOT NULL""", space_id, stored, NEIGHBOURS)
        for r in rows:
            neighbours[r["seed"]].append(r["other"])
    given: dict[int, list[tuple[uuid.UUID, Sequence[float]]]] = {}  # by dimension
    for seed, vector in profiles.items():
        if vector is not None and seed in neighbours:
            given.setdefault(len(vector), []).append((seed, vector))
    for dim, seeds in given.items():
        rows = await conn.fetch(  # vectors as text: asyncpg has no codec for an array of vectors
            f"""SELECT s.seed, n.entity_id AS other
                  FROM unnest($2::uuid[], $3::text[]) AS s(seed, vector)
                  CROSS JOIN LATERAL (
                      SELECT e.entity_id FROM entities e
                       WHERE e.space_id = $1 AND e.profile_dim = {dim} AND e.merged_into IS NULL
                         AND e.entity_id <> s.seed AND e.profile_embedding IS NOT NULL
                       ORDER BY e.profile_embedding::vector({dim}) <=> s.vector::vector({dim})
                       LIMIT $4) n""",
            space_id, [seed for seed, _ in seeds],
            ["[" + ",".join(format(float(x), ".9g") for x in vector) + "]" for _, vector in seeds], NEIGHBOURS)
        for r in rows:
            neighbours[r["seed"]].append(r["other"])
    return neighbours


async def record_neighbourhood(conn: Any, space_id: uuid.UUID,
                               neighbours: Mapping[uuid.UUID, Sequence[uuid.UUID]]) -> list[uuid.UUID]:
    """Propose the merges a neighbourhood qualifies for, judged on the entities as they are now
    (under the space lock): one read outside it only chose whom to compare."""
    if not neighbours:
        return []
    involved = set(neighbours) | {o for others in neighbours.values() for o in others}
    members = await _members(conn, space_id, involved)
    groups = [(seed, list(dict.fromkeys(others))) for seed, others in neighbours.items() if others]
    return await _record(conn, space_id, groups, members)


# --------------------------------------------------------------------------------------
# apply and revert
# --------------------------------------------------------------------------------------

async def _proposal(conn: asyncpg.Connection, proposal_id: uuid.UUID, space_id: uuid.UUID) -> asyncpg.Record:
    """The space's proposal, locked, after its space (the lock order of services/platform/locks.py);
    one of another space is refused as unknown."""
    space_id = await conn.fetchval("SELECT space_id FROM merge_proposals WHERE proposal_id = $1 AND space_id = $2",
                                   proposal_id, space_id)
    if space_id is None:
        raise MergeRefused("unknown_proposal", f"no merge proposal {proposal_id}")
    await lock_space(conn, space_id)
    row = await conn.fetchrow("SELECT * FROM merge_proposals WHERE proposal_id = $1 FOR UPDATE", proposal_id)
    assert row is not None  # proposals are never deleted
    return row


async def apply(conn: asyncpg.Connection, proposal_id: uuid.UUID, space_id: uuid.UUID, *,
                max_facts: int = MERGE_MAX_FACTS) -> dict[str, Any]:
    """Redirect the absorbed entity to the survivor, with a snapshot. Call inside a transaction."""
    p = await _proposal(conn, proposal_id, space_id)
    if p["status"] not in ("proposed", "reverted"):
        raise MergeRefused("not_applicable", f"the proposal is {p['status']}")
    survivor, absorbed = p["survivor_id"], p["absorbed_id"]
    sides = {r["entity_id"]: r["merged_into"] for r in await conn.fetch(
        "SELECT entity_id, merged_into FROM entities WHERE entity_id = ANY($1::uuid[]) ORDER BY entity_id FOR UPDATE",
        [survivor, absorbed])}
    for side, entity in (("survivor", survivor), ("absorbed", absorbed)):
        if sides.get(entity) is not None:
            raise MergeRefused("chain", f"the {side} {entity} is already merged into {sides[entity]}")
    absorbed_by_it = await conn.fetchval("SELECT count(*) FROM entities WHERE merged_into = $1", absorbed)
    if absorbed_by_it:
        raise MergeRefused("chain", f"the absorbed entity {absorbed} is the survivor of {absorbed_by_it} "
                                    "applied merge(s)")
    touched = await conn.fetchval(
        "SELECT count(*) FROM facts WHERE subject_entity_id = $1 OR object_entity_id = $1", absorbed)
    if touched > max_facts:
        raise MergeRefused("too_many_facts", f"the merge would touch {touched} facts (limit {max_facts})")
    snapshot = await conn.fetchval(
        """UPDATE merge_proposals p SET status = 'applied', applied_at = clock_timestamp(), reverted_at = NULL,
                  snapshot = jsonb_build_object(
                      'format', 1,
                      'survivor_id', p.survivor_id,
                      'entity', (SELECT to_jsonb(e) FROM entities e WHERE e.entity_id = p.absorbed_id),
                      'aliases', (SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.alias_id), '[]'::jsonb)
                                    FROM entity_aliases a WHERE a.entity_id = p.absorbed_id),
                      'facts', (SELECT coalesce(jsonb_agg(f.fact_id ORDER BY f.fact_id), '[]'::jsonb) FROM facts f
                                 WHERE f.subject_entity_id = p.absorbed_id OR f.object_entity_id = p.absorbed_id),
                      'mentions', (SELECT coalesce(jsonb_agg(m.mention_id ORDER BY m.mention_id), '[]'::jsonb)
                                     FROM mentions m WHERE m.resolved_entity_id = p.absorbed_id),
                      'taken_at', clock_timestamp())
            WHERE p.proposal_id = $1 RETURNING p.snapshot""", proposal_id)
    await conn.execute("UPDATE entities SET merged_into = $2, updated_at = clock_timestamp() WHERE entity_id = $1",
                       absorbed, survivor)
    snap = _json(snapshot)
    return {"proposal_id": str(proposal_id), "status": "applied", "survivor_id": str(survivor),
            "absorbed_id": str(absorbed), "facts": len(snap["facts"]), "mentions": len(snap["mentions"]),
            "aliases": len(snap["aliases"])}


async def _columns(conn: asyncpg.Connection, table: str) -> list[str]:
    return [r[0] for r in await conn.fetch(
        """SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
            ORDER BY attnum""", table)]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def revert(conn: asyncpg.Connection, proposal_id: uuid.UUID, space_id: uuid.UUID) -> dict[str, Any]:
    """Replay an applied proposal's snapshot: the absorbed entity's row and aliases exactly."""
    p = await _proposal(conn, proposal_id, space_id)
    if p["status"] != "applied" or p["snapshot"] is None:
        raise MergeRefused("not_applied", f"the proposal is {p['status']}")
    absorbed = p["absorbed_id"]
    entity_cols = [c for c in await _columns(conn, "entities") if c != "entity_id"]
    await conn.execute(
        f"""UPDATE entities e SET ({", ".join(map(_ident, entity_cols))}) =
                   (SELECT {", ".join("r." + _ident(c) for c in entity_cols)}
                      FROM merge_proposals p, jsonb_populate_record(NULL::entities, p.snapshot -> 'entity') r
                     WHERE p.proposal_id = $1)
             WHERE e.entity_id = $2""", proposal_id, absorbed)
    alias_cols = [c for c in await _columns(conn, "entity_aliases") if c != "alias_id"]
    await conn.execute(
        """DELETE FROM entity_aliases a
            WHERE a.entity_id = $2 AND a.alias_id NOT IN (
                SELECT r.alias_id FROM merge_proposals p,
                       jsonb_populate_recordset(NULL::entity_aliases, p.snapshot -> 'aliases') r
                 WHERE p.proposal_id = $1)""", proposal_id, absorbed)
    await conn.execute(
        f"""INSERT INTO entity_aliases
            SELECT r.* FROM merge_proposals p,
                   jsonb_populate_recordset(NULL::entity_aliases, p.snapshot -> 'aliases') r
             WHERE p.proposal_id = $1
            ON CONFLICT (alias_id, space_id) DO UPDATE SET ({", ".join(map(_ident, alias_cols))}) =
                ROW({", ".join("EXCLUDED." + _ident(c) for c in alias_cols)})""", proposal_id)
    await conn.execute("UPDATE merge_proposals SET status = 'reverted', reverted_at = clock_timestamp() "
                       "WHERE proposal_id = $1", proposal_id)
    snap = _json(p["snapshot"])
    still = await conn.fetchval(
        "SELECT count(*) FROM facts WHERE fact_id = ANY($1::uuid[]) AND $2 IN (subject_entity_id, object_entity_id)",
        [uuid.UUID(f) for f in snap["facts"]], absorbed)
    return {"proposal_id": str(proposal_id), "status": "reverted", "survivor_id": str(p["survivor_id"]),
            "absorbed_id": str(absorbed), "facts": len(snap["facts"]), "facts_still_pointing": still,
            "aliases": len(snap["aliases"])}


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------

async def follow(conn: Any, entity_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
    """Each entity's live identity: itself, or the survivor its applied merge redirects to."""
    rows = await conn.fetch("SELECT entity_id, coalesce(merged_into, entity_id) FROM entities "
                            "WHERE entity_id = ANY($1::uuid[])", list(entity_ids))
    return {r[0]: r[1] for r in rows}


async def list_proposals(conn: Any, space_id: uuid.UUID, *, status: str | None = None,
                         limit: int = 100) -> list[asyncpg.Record]:
    """The space's proposals, newest first."""
    return list(await conn.fetch(
        """SELECT p.proposal_id, p.survivor_id, s.canonical_name AS survivor_name, p.absorbed_id,
                  a.canonical_name AS absorbed_name, p.score, p.status, p.created_at, p.applied_at, p.reverted_at
             FROM merge_proposals p
             JOIN entities s ON s.entity_id = p.survivor_id AND s.space_id = p.space_id
             JOIN entities a ON a.entity_id = p.absorbed_id AND a.space_id = p.space_id
            WHERE p.space_id = $1 AND ($2::text IS NULL OR p.status = $2)
            ORDER BY p.created_at DESC, p.proposal_id LIMIT $3""", space_id, status, limit))
