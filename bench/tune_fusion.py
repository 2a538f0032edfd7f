"""Set the evidence fusion weights from the labelled set: ``python -m bench.tune_fusion``.

Ingests tests/data/retrieval through a real stack (the configured embedder), collects
every channel's candidates for each question once, then searches the weights offline by
coordinate ascent on mean evidence recall@10 (MRR breaks ties) over the even-numbered
questions and reports the odd-numbered ones as held out, then the reverse. Prints the
even-half weights as a ``FusionWeights(...)`` literal for ``services/retrieval/domain.py``.
``--units`` tunes only the unit stage (``fuse_units``), the first stage as it is.
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
from services.retrieval.domain import UNIT_LEGS, FusionWeights, weights_for

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
# The unit stage, tuned with the first stage fixed (it only reads the first stage's ranks).
UNIT_GRID: dict[str, Sequence[Any]] = {
    "unit_semantic": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "unit_bm25": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "unit_passage": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "unit_claim": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0),
    "unit_k": (1, 3, 5, 10, 20, 30, 60, 100),
}


def tune(cases: Sequence[Case], starts: Sequence[FusionWeights], passes: int = 4,
         grid: dict[str, Sequence[Any]] = GRID) -> FusionWeights:
    """Coordinate ascent from each start (the current weights, plain RRF, each channel
    alone); the best end point. Starting from a channel alone, the result can only be at
    least as good as that channel on these questions."""
    results = []
    for start in starts:
        best, best_score = start, objective(cases, start)
        for _ in range(passes):
            improved = False
            for name, values in grid.items():
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


def main(cache: str | None, units_only: bool) -> None:
    if cache and Path(cache).exists():
        embedder_model, cases = pickle.loads(Path(cache).read_bytes())
    else:
        embedder_model, cases = uvloop.run(gather())
        if cache:
            Path(cache).write_bytes(pickle.dumps((embedder_model, cases)))
    report(embedder_model, cases, units_only)


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


def report(embedder_model: str, cases: list[Case], units_only: bool) -> None:
    """Tune on the even-numbered questions and report the odd ones, then the reverse; the
    weights chosen on the even half are printed for ``domain.py``. (The blind set stays out
    of tuning altogether: ``python -m bench quality`` scores it.)"""
    current = weights_for(embedder_model)
    halves = {"even": cases[0::2], "odd": cases[1::2]}
    print(f"embedder {embedder_model}; {len(cases)} labelled questions", file=sys.stderr)
    for name in CHANNELS:
        print(f"{name:16} alone: even {objective(halves['even'], alone(name))} odd "
              f"{objective(halves['odd'], alone(name))}")
    chunk_level = dataclasses.replace(current, **dict.fromkeys((f"unit_{leg}" for leg in UNIT_LEGS), 0.0))
    for label, weights in (("chunk level", chunk_level), ("current", current)):
        print(f"{label:16}      : even {objective(halves['even'], weights)} odd "
              f"{objective(halves['odd'], weights)}")
    chosen = None
    for train, held in (("even", "odd"), ("odd", "even")):
        if units_only:
            tuned = tune(halves[train], [current], passes=2, grid=UNIT_GRID)
        else:
            tuned = tune(halves[train], [current, FusionWeights(), alone("chunk_bm25"), alone("unit_semantic")])
        print(f"tuned on {train}: {tuned}\n  {train} {objective(halves[train], tuned)} {held} "
              f"{objective(halves[held], tuned)}")
        chosen = chosen or tuned
    print(chosen)


if __name__ == "__main__":
    # An optional file caches the candidates, to re-tune without re-ingesting; --units tunes
    # only the unit stage (the first stage as it is).
    args = [a for a in sys.argv[1:] if a != "--units"]
    main(args[0] if args else None, "--units" in sys.argv)
