"""The cost ledger: one ``provider_calls`` row per model call (tokens, latency, outcome;
never the text), whichever service made it. The pipeline records its stages' calls with
the work unit; retrieval and the query space record query embeddings with the caller's
space through :class:`LedgeredEmbeddings`."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Sequence

from services.platform.auth import current_caller
from services.platform.db import Database
from services.platform.embeddings import EmbeddingProvider


class CostLedger:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def record(self, *, space_id: uuid.UUID | None, provider: str, model: str | None, latency_ms: float,
                     outcome: str, work_id: uuid.UUID | None = None, stage: str | None = None,
                     attempt: int | None = None, tokens_in: int | None = None, tokens_out: int | None = None) -> None:
        if space_id is None:  # a receipt is a space's (ListCostReceipts); a call outside any space has no reader
            return
        await self.db.execute(
            """INSERT INTO provider_calls (space_id, work_id, stage, attempt, provider, model, tokens_in, tokens_out,
                                           latency_ms, outcome)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
            space_id, work_id, stage, attempt, provider, model, tokens_in, tokens_out, latency_ms, outcome)


def is_model_call(model: str) -> bool:
    """Local feature hashing is no model call; every other embedder is."""
    return not model.startswith("hash-")


class LedgeredEmbeddings:
    """An embedding provider whose every call is on the ledger, with the caller's space."""

    def __init__(self, inner: EmbeddingProvider, ledger: CostLedger) -> None:
        self.inner = inner
        self.ledger = ledger
        self.model = inner.model
        self.dimension = inner.dimension

    async def warm_up(self) -> None:
        warm = getattr(self.inner, "warm_up", None)
        if warm is not None:
            await warm()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        outcome = "error"
        try:
            vectors = await self.inner.embed(texts)
            outcome = "ok"
            return vectors
        finally:
            if is_model_call(self.model):
                caller = current_caller.get()
                with contextlib.suppress(Exception):  # the ledger never turns a good answer into a failure
                    await self.ledger.record(space_id=caller.space_id if caller else None, provider="embeddings",
                                             model=self.model, latency_ms=(time.perf_counter() - started) * 1000,
                                             outcome=outcome)
