"""Re-embed a space with another model: ``testament ops reembed``.

A space's vectors all come from one model (``space_embedding_models``); the pipeline
refuses to add vectors of another, and retrieval never compares a query with vectors of
another model. Changing the model is therefore this guided step: every vector of the
space (passages and their turns or blocks, claims, facts, entity profiles) is recomputed
with the configured provider, and the rows and the space's model switch in one
transaction, so a reader sees either the old model everywhere or the new one everywhere,
never a mix.

Run it while no embedding work is pending or running for the space (it refuses
otherwise): rows written by an embed stage running meanwhile would keep the old model.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.pipeline.adapters.store import PgStageStore
from services.platform.structure import embedding_inputs

EMBED_STAGES = ("embed_chunk", "embed_claim", "label_relation", "reconcile")


@dataclass(frozen=True)
class _Table:
    name: str
    key: str
    text: str
    vector: str
    dim: str
    model: str


TABLES = (
    _Table("chunks", "chunk_id", "chunk_text", "embedding", "embedding_dim", "embedding_model"),
    _Table("claims", "claim_id", "claim_text", "embedding", "embedding_dim", "embedding_model"),
    _Table("facts", "fact_id", "label", "embedding", "embedding_dim", "embedding_model"),
    _Table("entities", "entity_id", "profile_summary", "profile_embedding", "profile_dim", "profile_model"),
)


class ReembedRefused(Exception):
    """The space cannot be re-embedded now (work in flight); the message says why."""


async def reembed_space(conn: asyncpg.Connection, space_id: uuid.UUID, embed: Callable[[list[str]],
                        Awaitable[list[list[float]]]], model: str, *, batch: int = 64,
                        progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    busy = await conn.fetchval(
        "SELECT count(*) FROM work_units WHERE space_id = $1 AND stage = ANY($2::text[]) "
        "AND status IN ('pending', 'running', 'failed')", space_id, list(EMBED_STAGES))
    if busy:
        raise ReembedRefused(f"{busy} embedding work unit(s) of this space are pending or running: let the "
                             "pipeline finish (testament ops inspect), then run reembed again")
    previous = await conn.fetchval("SELECT model FROM space_embedding_models WHERE space_id = $1", space_id)
    computed: dict[str, list[tuple[Any, np.ndarray]]] = {}
    units: list[tuple[Any, int, list[float]]] = []
    dimension = None
    for table in TABLES:
        rows = await conn.fetch(
            f"SELECT {table.key} AS id, {table.text} AS text FROM {table.name} "
            f"WHERE space_id = $1 AND {table.text} IS NOT NULL ORDER BY {table.key}", space_id)
        owned = [item for r in rows for item in embedding_inputs(table.name, r["id"], r["text"])]
        vectors: list[list[float]] = []
        for start in range(0, len(owned), batch):
            vectors.extend(await embed([text for _, _, text in owned[start:start + batch]]))
            if progress is not None:
                progress(table.name, min(start + batch, len(owned)))
        if vectors:
            dimension = len(vectors[0])
        embedded = list(zip(owned, vectors, strict=True))
        computed[table.name] = [(i, np.asarray(v, dtype=np.float32)) for (i, part, _), v in embedded if part is None]
        units.extend((i, part, v) for (i, part, _), v in embedded if part is not None)
    counts = {name: len(items) for name, items in computed.items()}
    counts["chunk_units"] = len(units)
    if dimension is None:
        return {"space_id": str(space_id), "previous_model": previous, "model": model, "reembedded": counts}
    async with conn.transaction():
        for table in TABLES:
            await conn.executemany(
                f"UPDATE {table.name} SET {table.vector} = $2, {table.dim} = $3, {table.model} = $4 "
                f"WHERE {table.key} = $1", [(i, v, dimension, model) for i, v in computed[table.name]])
        await PgStageStore.save_units(conn, space_id, units, model)
        await conn.execute(
            """INSERT INTO space_embedding_models (space_id, model, dimension) VALUES ($1, $2, $3)
               ON CONFLICT (space_id) DO UPDATE SET model = EXCLUDED.model, dimension = EXCLUDED.dimension""",
            space_id, model, dimension)
    return {"space_id": str(space_id), "previous_model": previous, "model": model, "dimension": dimension,
            "reembedded": counts}
