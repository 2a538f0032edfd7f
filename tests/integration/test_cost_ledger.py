"""Query embeddings made outside the pipeline are on the cost ledger too (real PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from services.platform.auth import Caller, Scope, current_caller
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.platform.ledger import CostLedger, LedgeredEmbeddings


class _Model:
    model = "minilm-test"
    dimension = 3

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail:
            raise RuntimeError("provider down")
        return [[1.0, 0.0, 0.0] for _ in texts]


async def test_each_query_embedding_is_one_ledger_row_in_the_callers_space(fresh_dsn: str) -> None:
    db = await Database.connect(fresh_dsn, min_size=1, max_size=2)
    try:
        space = await db.fetchval("SELECT space_id FROM spaces LIMIT 1")
        token = current_caller.set(Caller(space, Scope.READ, None))
        try:
            await LedgeredEmbeddings(_Model(), CostLedger(db)).embed(["who owns billing?"])
            with pytest.raises(RuntimeError):
                await LedgeredEmbeddings(_Model(fail=True), CostLedger(db)).embed(["again"])
            await LedgeredEmbeddings(HashEmbeddings(dimension=8), CostLedger(db)).embed(["hashing is no call"])
        finally:
            current_caller.reset(token)
        rows = await db.fetch("SELECT space_id, provider, model, outcome FROM provider_calls ORDER BY occurred_at")
        assert [(r["space_id"], r["provider"], r["model"], r["outcome"]) for r in rows] == [
            (space, "embeddings", "minilm-test", "ok"), (space, "embeddings", "minilm-test", "error")]
    finally:
        await db.close()
