"""Set the evidence fusion weights from the labelled set: ``python -m bench.tune_fusion``.

Ingests tests/data/retrieval through a real stack (the configured embedder), collects
every channel's candidates for each question once, then searches the weights offline by
coordinate ascent on mean evidence recall@10 (MRR breaks ties) over the even-numbered
questions, and reports the odd-numbered ones as held out. Prints the best weights as a
``FusionWeights(...)`` literal for ``services/retrieval/domain.py``.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvloop

from bench import labelled, quality
from bench._common import running_stack
from bench.bench_quality import ingest
from bench.quality import FUSED_CHANNELS as CHANNELS
from bench.quality import Case, alone, collect, objective
from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import provider_from_settings
from services.platform.settings import load_settings
from services.retrieval.app import Retrieval
from services.retrieval.domain import FusionWeights, weights_for

GRID: dict[str, Sequence[Any]] = {
    "claim_semantic": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
    "claim_bm25": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
    "chunk_semantic": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
    "chunk_bm25": (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "k": (5, 10, 20, 30, 60, 100),
    "depth": (20, 50, 100, 200),
    "cross": (0.0, 0.1, 0.25, 0.5, 1.0),
    "entity_lift": (0.0, 0.1, 0.25, 0.5, 1.0),
    "temporal_lift": (0.0, 0.1, 0.25, 0.5, 1.0),
    "claim_share": (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5),
    "dense": (0.0, 0.25, 0.5, 0.75, 1.0),
    "coverage": (0.0, 0.1, 0.25, 0.5),
}


def tune(cases: Sequence[Case], starts: Sequence[FusionWeights], passes: int = 4) -> FusionWeights:
    """Coordinate ascent from each start (the current weights, plain RRF, each channel
    alone); the best end point. Starting from a channel alone, the result can only be at
    least as good as that channel on these questions."""
    results = []
    for start in starts:
        best, best_score = start, objective(cases, start)
        for _ in range(passes):
            improved = False
            for name, values in GRID.items():
                for value in values:
                    trial = dataclasses.replace(best, **{name: value})
                    score = objective(cases, trial)
                    if score > best_score:
                        best, best_score, improved = trial, score, True
            if not improved:
                break
        print(f"  from {start}: recall@10 {best_score[0]:.4f} MRR {best_score[1]:.4f}", file=sys.stderr)
        results.append((best_score, best))
    return max(results, key=lambda r: r[0])[1]


def main(cache: str | None) -> None:
    if cache and Path(cache).exists():
        embedder_model, cases = pickle.loads(Path(cache).read_bytes())
    else:
        embedder_model, cases = uvloop.run(gather())
        if cache:
            Path(cache).write_bytes(pickle.dumps((embedder_model, cases)))
    report(embedder_model, cases)


async def gather() -> tuple[str, list[Case]]:
    sets = labelled.load()
    questions = [q for s in sets for q in s.questions]
    settings = load_settings()
    embedder = provider_from_settings(settings)
    async with running_stack() as (stack, _port):
        assert stack.dsn is not None
        ingest_proc = next(c for c in stack.children if c.name == "ingest")
        docs, _, _ = await ingest(ingest_proc.port, stack.dsn, sets)
        db = await Database.connect(stack.dsn, min_size=1, max_size=2)
        try:
            retrieval = Retrieval(db, embedder, None)
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            cases = await collect(retrieval, caller, questions, quality.UnitMap(docs))
        finally:
            await db.close()
    return embedder.model, cases


def report(embedder_model: str, cases: list[Case]) -> None:
    train = [c for i, c in enumerate(cases) if i % 2 == 0]
    held = [c for i, c in enumerate(cases) if i % 2 == 1]
    print(f"embedder {embedder_model}; {len(train)} tuning questions, {len(held)} held out", file=sys.stderr)
    current = weights_for(embedder_model)
    starts = [current, FusionWeights(), alone("chunk_bm25")]
    for name in CHANNELS:
        print(f"{name:16} alone: all {objective(cases, alone(name))} tune {objective(train, alone(name))} "
              f"held out {objective(held, alone(name))}")
    print(f"{'current':16}      : all {objective(cases, current)} tune {objective(train, current)} "
          f"held out {objective(held, current)}")
    on_half = tune(train, starts)
    print(f"tuned on half: {on_half}\n  tune {objective(train, on_half)} held out {objective(held, on_half)}")
    on_all = tune(cases, [on_half])
    print(f"tuned on all ({len(cases)} questions): recall@10, MRR {objective(cases, on_all)}")
    print(on_all)


if __name__ == "__main__":
    # An optional file caches the candidates, to re-tune without re-ingesting.
    main(sys.argv[1] if len(sys.argv) > 1 else None)
