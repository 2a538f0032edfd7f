"""Entity resolution rules: which candidate a mention names, or a new entity.

The database finds candidates cheapest first (exact alias, trigram spelling, phonetic
sound, profile embedding); this module decides among them. It prefers an existing
compatible candidate unless the names positively distinguish a new referent (two full
names with different surnames are two people).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

RESOLVER_VERSION = "rules-resolver/1"
TIER_WEIGHT = {"T0": 1.0, "T1": 0.8, "T2": 0.7, "T3": 0.6}


@dataclass(frozen=True)
class Candidate:
    entity_id: uuid.UUID
    alias: str  # normalised
    tier: str
    score: float  # the tier's own score (trigram similarity, cosine…)
    in_document: bool = False  # already named in the same document


@dataclass(frozen=True)
class ResolutionVerdict:
    entity_id: uuid.UUID | None  # None = a new entity
    method: str
    confidence: float
    scores: dict[str, object]


def _trigrams(word: str) -> set[str]:
    padded = f"  {word} "
    return {padded[i:i + 3] for i in range(len(padded) - 2)}


def _similar(a: str, b: str) -> float:
    ta, tb = _trigrams(a), _trigrams(b)
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


def _token_compatible(mention: str, alias: str) -> bool:
    if mention == alias:
        return True
    if len(mention) == 1:  # an initial: "S" for "Shankar"
        return alias.startswith(mention)
    if len(alias) == 1:
        return mention.startswith(alias)
    return len(mention) >= 4 and len(alias) >= 4 and _similar(mention, alias) >= 0.45  # a misspelling


def compatible(mention: str, alias: str) -> bool:
    """Can these two names refer to one referent? "Ravi" ~ "Ravi Shankar" ~ "Ravi S." ~
    "Ravi Shanker"; "Dana Kim" is not "Dana Lee"."""
    m, a = mention.split(), alias.split()
    if not m or not a:
        return False
    if len(m) > 1 and len(a) > 1:
        if len(m) != len(a):
            short, long_ = (m, a) if len(m) < len(a) else (a, m)
            return all(_token_compatible(s, lg) for s, lg in zip(short, long_, strict=False))
        return all(_token_compatible(x, y) for x, y in zip(m, a, strict=True))
    one, many = (m, a) if len(m) == 1 else (a, m)
    if len(many) == 1:
        return _token_compatible(one[0], many[0])
    return _token_compatible(one[0], many[0])  # a single name matches the first name of a full one


def choose(mention: str, candidates: Sequence[Candidate]) -> ResolutionVerdict:
    usable = [c for c in candidates if compatible(mention, c.alias)]
    scores = {str(c.entity_id): {"tier": c.tier, "score": round(c.score, 4), "alias": c.alias,
                                 "compatible": c in usable, "in_document": c.in_document} for c in candidates}
    if not usable:
        return ResolutionVerdict(None, "new", 1.0, {"candidates": scores})

    def rank(c: Candidate) -> float:
        return TIER_WEIGHT[c.tier] * 0.5 + c.score * 0.3 + (0.5 if c.in_document else 0.0)

    best = max(usable, key=rank)
    others = {c.entity_id for c in usable} - {best.entity_id}
    confidence = min(1.0, rank(best))
    return ResolutionVerdict(best.entity_id, best.tier, round(confidence, 4),
                             {"candidates": scores, "ambiguous_with": sorted(str(o) for o in others)})
