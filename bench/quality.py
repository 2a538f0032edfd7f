"""Evidence recall on the labelled set: Testament's channels, its fusion and its assured
operations against two baselines computed outside Testament on the same units.

Shared by ``bench_quality`` (the figures of ``make bench``) and by the test that holds
fusion to never fall below its best single channel.

Every answer is turned into a ranked list of distinct evidence units (turns, or document
blocks): a chunk contributes the units it covers, a claim the units its span touches,
in rank order. ``recall@k`` is the share of a question's gold units among the first k
distinct units; ``MRR`` is the reciprocal rank of the first gold unit (0 if absent).
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.labelled import KINDS, Document, LabelledSet, Question, Unit
from services.retrieval.domain import (
    EvidenceCandidates,
    FusionWeights,
    UnitKey,
    claims_by_unit,
    fuse_evidence,
    fuse_units,
)

DEPTH = 20
CUTS = (5, 10, 20)


# --------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------

@dataclass
class Score:
    n: int = 0
    recall: dict[int, float] | None = None
    mrr: float = 0.0

    def __post_init__(self) -> None:
        self.recall = dict.fromkeys(CUTS, 0.0)


def score_one(ranked: Sequence[str], gold: frozenset[str]) -> tuple[dict[int, float], float]:
    recall = {k: len(gold & set(ranked[:k])) / len(gold) for k in CUTS}
    first = next((i for i, u in enumerate(ranked, start=1) if u in gold), None)
    return recall, (1.0 / first if first else 0.0)


def summarise(questions: Sequence[Question], rankings: dict[str, list[str]]) -> dict[str, Score]:
    """Mean recall@k and MRR per question kind, plus ``all``."""
    out: dict[str, Score] = defaultdict(Score)
    for q in questions:
        recall, rr = score_one(rankings.get(q.qid, []), q.gold)
        for key in (q.kind, "all"):
            s = out[key]
            s.n += 1
            for k in CUTS:
                assert s.recall is not None
                s.recall[k] += recall[k]
            s.mrr += rr
    for s in out.values():
        assert s.recall is not None
        for k in CUTS:
            s.recall[k] /= max(s.n, 1)
        s.mrr /= max(s.n, 1)
    return dict(out)


def distinct(units: Iterable[str], depth: int = DEPTH) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for u in units:
        if u not in seen:
            seen.add(u)
            out.append(u)
            if len(out) >= depth:
                break
    return out


# --------------------------------------------------------------------------------------
# baselines outside Testament
# --------------------------------------------------------------------------------------

_PLAIN = re.compile(r"\w+")


def plain_tokens(text: str) -> list[str]:
    return _PLAIN.findall(text.lower())


class OkapiBM25:
    """Textbook Okapi BM25 (k1 1.2, b 0.75) over the raw units: lower-cased words, no
    stemming, no stop list; the "thirty lines of BM25" a user would write first."""

    def __init__(self, units: Sequence[Unit], k1: float = 1.2, b: float = 0.75) -> None:
        self.units = list(units)
        self.k1, self.b = k1, b
        self.tfs = [Counter(plain_tokens(u.body)) for u in self.units]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avgdl = sum(self.lengths) / max(len(self.lengths), 1)
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(self.units)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def rank(self, query: str, depth: int = DEPTH) -> list[str]:
        terms = set(plain_tokens(query))
        scores = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avgdl)
            for t in terms:
                f = tf.get(t)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            if s > 0:
                scores.append((-s, i))
        scores.sort()
        return [self.units[i].unit_id for _, i in scores[:depth]]


class DenseBaseline:
    """Cosine similarity of the query to every raw unit, embedded with the same model."""

    def __init__(self, units: Sequence[Unit], vectors: Sequence[Sequence[float]]) -> None:
        self.ids = [u.unit_id for u in units]
        self.matrix = np.asarray(vectors, dtype=np.float32)

    def rank(self, vector: Sequence[float], depth: int = DEPTH) -> list[str]:
        sims = self.matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-sims, kind="stable")[:depth]
        return [self.ids[i] for i in order]


# --------------------------------------------------------------------------------------
# Testament answers -> units
# --------------------------------------------------------------------------------------

class UnitMap:
    """doc_id -> labelled document, to map returned character ranges back to units."""

    def __init__(self, docs: dict[uuid.UUID, Document]) -> None:
        self.docs = docs

    def of_range(self, doc_id: str, start: int, end: int) -> list[str]:
        doc = self.docs.get(uuid.UUID(doc_id))
        if doc is None:
            return []
        return [u.unit_id for u in doc.units_in(start, max(end, start + 1))]

    def of_claim(self, e: Any) -> list[str]:
        spans = [(s.char_start, s.char_end) for s in e.evidence_spans] or [(e.char_start, e.char_end)]
        out: list[str] = []
        for start, end in spans:
            out.extend(self.of_range(e.doc_id, start, end))
        return out

    def of_chunk(self, c: Any) -> list[str]:
        return self.of_range(c.doc_id, c.char_start, c.char_end)

    def of_envelope(self, env: Any) -> list[str]:
        """An evidence envelope's items in the order of its ranking (the answer's reading
        order). A passage's entry names its chunk, once per returned passage in the order of
        ``chunks`` (ranked by unit, two passages can be turns of one chunk); items without a
        ranking entry follow in their returned order."""
        passages: dict[str, list[Any]] = defaultdict(list)
        for c in env.chunks:
            passages[c.chunk_id].append(c)
        claims = {e.claim_id: e for e in env.evidence}
        out: list[str] = []
        for r in env.ranking:
            if passages.get(r.item_id):
                out.extend(self.of_chunk(passages[r.item_id].pop(0)))
            elif r.item_id in claims:
                out.extend(self.of_claim(claims.pop(r.item_id)))
        out.extend(u for e in claims.values() for u in self.of_claim(e))
        out.extend(u for left in passages.values() for c in left for u in self.of_chunk(c))
        return distinct(out)


def all_units(sets: Sequence[LabelledSet]) -> list[Unit]:
    return [u for s in sets for d in s.documents for u in d.units]


def table(title: str, results: dict[str, dict[str, Score]]) -> str:
    """One line per system and kind: n, recall@5/10/20, MRR."""
    lines = [title, f"{'system':34} {'kind':12} {'n':>4} {'R@5':>6} {'R@10':>6} {'R@20':>6} {'MRR':>6}"]
    for system, by_kind in results.items():
        for kind in ("all", *KINDS):
            s = by_kind.get(kind)
            if s is None:
                continue
            assert s.recall is not None
            lines.append(f"{system:34} {kind:12} {s.n:>4} {s.recall[5]:6.3f} {s.recall[10]:6.3f} "
                         f"{s.recall[20]:6.3f} {s.mrr:6.3f}")
    return "\n".join(lines)


CHANNELS = (("claim", "bm25"), ("claim", "semantic"), ("chunk", "bm25"), ("chunk", "semantic"))


OPERATIONS = ("claims_and_sources_context", "facts_context", "combined_context")


async def testament_rankings(retrieval: Any, primitives: Any, caller: Any, questions: Sequence[Question],
                             units: UnitMap, *, operations: Sequence[str] = OPERATIONS,
                             channels: Sequence[tuple[str, str]] = CHANNELS) -> dict[str, dict[str, list[str]]]:
    """Per system (each channel alone, the fused operation, …) the ranked units of each question."""
    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for q in questions:
        for kind, channel in channels:
            env = await primitives.search(caller, kind, q.text, DEPTH, channel)
            mapped = (units.of_claim(e) for e in env.evidence) if kind == "claim" else \
                (units.of_chunk(c) for c in env.chunks)
            out[f"{kind}s alone, {channel}"][q.qid] = distinct(u for us in mapped for u in us)
        if "claims_and_sources_context" in operations:
            env = await retrieval.run_operation(caller, "claims_and_sources_context", {"query": q.text})
            out["claims_and_sources_context"][q.qid] = units.of_envelope(env)
        if "facts_context" in operations:
            env = await retrieval.run_operation(caller, "facts_context", {"query": q.text})
            out["facts_context"][q.qid] = distinct(u for e in env.evidence for u in units.of_claim(e))
        if "combined_context" in operations:
            bundle = await retrieval.run_operation(caller, "combined_context", {"query": q.text})
            out["combined_context"][q.qid] = distinct(
                [*units.of_envelope(bundle.claims_and_sources),
                 *(u for e in bundle.facts.evidence for u in units.of_claim(e))])
    return dict(out)


# --------------------------------------------------------------------------------------
# fusion replayed offline (tuning, and the fused-versus-channels test)
# --------------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    question: Question
    candidates: EvidenceCandidates
    units: dict[uuid.UUID, list[str]]  # claim or chunk id -> its units
    unit_ids: dict[UnitKey, list[str]] = dataclasses.field(default_factory=dict)  # retrieval unit -> its units


def ranked_units(case: Case, weights: FusionWeights, k: int = 50) -> list[str]:
    """The units of the replayed answer as :meth:`UnitMap.of_envelope` reads the real one."""
    claims, chunks = fuse_evidence(case.candidates, weights)
    if weights.by_unit:
        units = fuse_units(case.candidates.units, claims, chunks, weights)
        claims = claims_by_unit(claims, units, case.candidates.units.of_claim)
        return distinct([*(u for f in units[:k] for u in case.unit_ids.get(f.key, ())),
                         *(u for f in claims[:k] for u in case.units.get(f.item_id, ()))])
    merged = sorted([*claims, *chunks], key=lambda f: (-f.score, str(f.item_id)))
    return distinct(u for f in merged for u in case.units.get(f.item_id, ()))


def objective(cases: Sequence[Case], weights: FusionWeights) -> tuple[float, float]:
    r10 = mrr = 0.0
    for case in cases:
        recall, rr = score_one(ranked_units(case, weights), case.question.gold)
        r10 += recall[10]
        mrr += rr
    return r10 / len(cases), mrr / len(cases)


async def collect(retrieval: Any, caller: Any, questions: Sequence[Question],
                  units: UnitMap, candidate_k: int = 200) -> list[Case]:
    cases = []
    for q in questions:
        vector = await retrieval.embed_query(q.text)
        async with retrieval.snapshot() as conn:
            cands, claim_rows, chunk_rows, _ = await retrieval.evidence_candidates(conn, caller, q.text, vector,
                                                                                    None, candidate_k)
        mapped: dict[uuid.UUID, list[str]] = {}
        for cid, row in claim_rows.items():
            spans = [(s["char_start"], s["char_end"]) for s in row["evidence_spans"] or []] or \
                [(row["char_start"], row["char_end"])]
            mapped[cid] = [u for a, b in spans for u in units.of_range(str(row["doc_id"]), a, b)]
        unit_ids: dict[UnitKey, list[str]] = {}
        for cid, row in chunk_rows.items():
            mapped[cid] = units.of_range(str(row["doc_id"]), row["char_start"], row["char_end"])
            for n, (start, end, _) in enumerate(retrieval.unit_spans(cid, row)):
                unit_ids[(cid, n)] = units.of_range(str(row["doc_id"]), start, end)
        cases.append(Case(q, cands, mapped, unit_ids))
    return cases




def alone(channel: str) -> FusionWeights:
    """One channel by itself, in its own order (no lifts, no cross credit); a unit channel
    ranks units alone (the claims, in their fused order, follow as in the answer)."""
    return FusionWeights(**{n: (1.0 if n == channel else 0.0) for n in FUSED_CHANNELS})


FUSED_CHANNELS = ("claim_semantic", "claim_bm25", "chunk_semantic", "chunk_bm25", "unit_semantic", "unit_bm25")
