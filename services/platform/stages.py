"""The pipeline's stages, in order, with the component version each runs at.

Shared by the pipeline (which runs them) and ingest (which reports readiness on
them). A stage's component version changes when its output would change; work is
keyed by it, so an upgrade schedules the new version's work.
"""

from __future__ import annotations

STAGES: tuple[tuple[str, str], ...] = (
    ("convert", "convert/1"),
    ("structure", "structure/1"),
    ("chunk", "chunk/1"),
    ("embed_chunk", "embed_chunk/1"),
    ("extract_claims", "extract_claims/1"),
    ("ground_claims", "ground_claims/1"),
    ("normalize_relations", "normalize_relations/1"),
    ("adjudicate_observations", "adjudicate_observations/1"),
    ("adjudicate_supersession", "adjudicate_supersession/1"),
    ("embed_claim", "embed_claim/1"),
    ("reconcile", "reconcile/1"),
    ("label_relation", "label_relation/1"),
)
STAGE_NAMES: tuple[str, ...] = tuple(name for name, _ in STAGES)
COMPONENT_VERSION: dict[str, str] = dict(STAGES)
FIRST_STAGE = STAGES[0][0]
