"""Work-queue rules: the stage graph, back-off, failure classification and wording.

Pure: the queue adapter and the worker apply these rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Per-chunk stages: one unit per chunk (unit_key = chunk ordinal), paired one to one.
PER_CHUNK = ("extract_claims", "ground_claims")
LINEAR = ("convert", "structure", "chunk", "embed_chunk")
AFTER_CLAIMS = ("normalize_relations", "adjudicate_observations", "adjudicate_supersession", "embed_claim",
                "reconcile", "label_relation")
# Stages that write entities, facts or fact support: their completion takes the space lock
# first (services/platform/locks.py), so they run one at a time per space.
SPACE_WIDE = frozenset({"normalize_relations", "adjudicate_observations", "adjudicate_supersession", "reconcile",
                        "label_relation"})

FAILURE_SENTENCES = {
    "input_too_large": "The document is larger than this deployment accepts.",
    "provider_rejected": "The model provider refused a request made for this document.",
    "provider_unavailable": "The model provider could not be reached; the work can be replayed once it is back.",
    "extraction_failed": "The document could not be read or converted.",
    "chunk_set_changed": "The document's passages changed while it was being processed.",
    "unknown": "Processing stopped for an unexpected reason; an operator can inspect and replay it.",
}


class StageFailure(Exception):
    """A stage could not finish. ``reason`` is a code of :data:`FAILURE_SENTENCES`;
    ``permanent`` dead-letters at once instead of retrying."""

    def __init__(self, reason: str, message: str, *, permanent: bool, retry_after_s: float | None = None) -> None:
        assert reason in FAILURE_SENTENCES, reason
        super().__init__(message)
        self.reason = reason
        self.permanent = permanent
        self.retry_after_s = retry_after_s


def backoff_s(attempts: int, *, base_s: float, max_s: float) -> float:
    """2 s, 4 s, 8 s … capped (``attempts`` counts the one that just failed)."""
    return float(min(max_s, base_s * (2 ** max(0, attempts - 1))))


@dataclass(frozen=True)
class Unit:
    stage: str
    unit_key: str = ""


def successors(stage: str, unit_key: str, *, chunk_ordinals: Sequence[int], stage_done: bool) -> list[Unit]:
    """What to queue when unit (stage, unit_key) succeeds.

    ``stage_done`` says whether every unit of this stage for the version has now finished;
    fan-in stages are queued only then. Per-chunk stages chain chunk by chunk.
    """
    if stage in LINEAR[:-1]:
        return [Unit(LINEAR[LINEAR.index(stage) + 1])]
    if stage == LINEAR[-1]:
        if not chunk_ordinals:
            return [Unit("extract_claims"), ]
        return [Unit("extract_claims", str(o)) for o in chunk_ordinals]
    generation = generation_suffix(unit_key)
    if stage == "extract_claims":
        return [Unit("ground_claims", unit_key)]
    if stage == "ground_claims":
        return [Unit(AFTER_CLAIMS[0], generation)] if stage_done else []
    if stage in AFTER_CLAIMS[:-1]:
        return [Unit(AFTER_CLAIMS[AFTER_CLAIMS.index(stage) + 1], generation)]
    return []


def generation_suffix(unit_key: str) -> str:
    """Re-extraction runs the claim stages again as a new generation: its units' keys end in
    ``#<n>`` (the first run has none), and the stages after it inherit the suffix."""
    _, sep, generation = unit_key.partition("#")
    return f"#{generation}" if sep else ""


def chunk_ordinal(unit_key: str) -> int | None:
    head = unit_key.partition("#")[0]
    return int(head) if head else None
