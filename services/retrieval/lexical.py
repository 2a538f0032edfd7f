"""The BM25 top-k over impact-ordered prefixes, as pure rules (the SQL that reads the
prefixes is ``adapters.SearchLegs.lexical``)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from services.retrieval.domain import bm25_idf

# BM25 (Okapi k1 = 1.2, b = 0.75, in ``bm25_term``), the reference lengths of migration 0008's ``bm25_impact``,
# and how deep the lexical rounds read: the first round reads max(FIRST, 4k) postings per
# term, each further round four times more, up to READ_MAX postings in all (so a term that
# matches half of a million-row space costs a bounded read, and the plan says the answer
# was bounded).
BM25_REFERENCE_LENGTHS = {"claim": 16.0, "chunk": 64.0, "fact": 8.0, "entity": 32.0}
BM25_FIRST_DEPTH = 200
BM25_READ_MAX = 40_000
BM25_COMPLETE_MAX = 2_000
# A round brings back at least this many visible targets (8k in general, see
# ``returned_per_round``): those whose scores may be highest, by what was read.
BM25_RETURNED_MIN = 200
# Up to this many postings over all query terms (known from the counters), every one is
# scored in one statement instead: as many as the prefix rounds may read, because on short
# uniform texts they read whole lists anyway, checking the visibility of every posting read
# (at 100k claims, 14k postings: ~25 ms in the one statement, ~400 ms in two rounds).
BM25_EXHAUSTIVE_MAX = BM25_READ_MAX
# MaxScore (Turtle and Flood): when a query mixes rare terms with common ones ("who supports
# the difavo kozuno project": "support" in 8k of 100k claims, the name's words in 600 each),
# the common terms alone cannot reach the top k. Every posting of the rare ("essential")
# terms is read, the targets they name get their common terms' parts (the best
# ``maxscore_candidates(k)`` of them by their rare parts), and the answer stands when the
# k-th exact score beats whatever a target left out could reach (otherwise the exhaustive
# statement answers). Tried from MAXSCORE_MIN postings (below, one statement scores them all
# as fast), when the essential lists hold at most MAXSCORE_SHARE of the postings; a term is
# essential when its list is at most MAXSCORE_RATIO times the shortest one's. Every target
# the rare lists name is completed (they hold at most the read cap): a cut inside a tier of
# equal rare parts (a name's words in thousands of claims of a million-claim space) fails
# the proof.
MAXSCORE_MIN = 4_000
MAXSCORE_SHARE = 0.5
MAXSCORE_RATIO = 4
MAXSCORE_CANDIDATES_PER_K = 32
MAXSCORE_CANDIDATES_MIN = BM25_EXHAUSTIVE_MAX


def bm25_term(idf: float, tf: int, length: int, avgdl: float) -> float:
    """One term's Okapi BM25 score, written operation for operation as ``BM25_TERM_SQL``
    (float8 throughout), so that Python and SQL compute the same bits."""
    return idf * (tf * 2.2) / (tf + 1.2 * (0.25 + 0.75 * length / avgdl))


# The same in SQL, over ``idf``, ``p.tf``, ``p.length`` and an average length ``{avgdl}``.
# A target's score is the sum of its terms' scores in term order (``BM25_SUM_SQL``): a float
# sum depends on its order, and targets with mathematically equal scores must get equal
# floats on every path, or an exact tie is ranked by rounding instead of by id.
BM25_TERM_SQL = ("{idf} * (p.tf * 2.2::float8) / (p.tf + 1.2::float8 * (0.25::float8 + 0.75::float8 * p.length"
                 " / {avgdl}))")
BM25_SUM_SQL = 'sum({term} ORDER BY p.term COLLATE "C")'


def essential_terms(df: dict[str, int]) -> list[str] | None:
    """The terms whose postings a MaxScore read takes whole (the rarest, see MAXSCORE_RATIO),
    or None when MaxScore would not pay: too few postings, no common term to skip, or the
    rare lists hold most of the postings anyway."""
    present = {t: n for t, n in df.items() if n}
    total = sum(present.values())
    if not present or total < MAXSCORE_MIN:  # (no term has a posting: nothing to read)
        return None
    shortest = min(present.values())
    essential = sorted(t for t, n in present.items() if n <= MAXSCORE_RATIO * shortest)
    read = sum(present[t] for t in essential)
    if len(essential) == len(present) or read > MAXSCORE_SHARE * total or read > BM25_EXHAUSTIVE_MAX:
        return None
    return essential


def maxscore_candidates(k: int) -> int:
    return max(MAXSCORE_CANDIDATES_MIN, MAXSCORE_CANDIDATES_PER_K * k)


def maxscore_proven(scores: Sequence[float], k: int, cut: float | None, rest: float, slack: float) -> bool:
    """Is a MaxScore answer the exact top k? ``scores``: the visible candidates' exact scores,
    best first; ``cut``: the best essential part of a target left out (None: none was);
    ``rest``: the common terms' most (their idf times their highest stored impact), which
    ``slack`` turns into a bound on any target's common parts. A target left out scores at
    most ``cut + rest * slack``, one with no rare term ``rest * slack``; the k-th score must
    beat both outright (a tie could rank by id above it)."""
    if len(scores) < k:
        return False
    bound = rest * slack
    left_out = max(bound, cut + bound) if cut is not None else bound
    return scores[k - 1] > left_out * (1 + 1e-9) + 1e-12


def returned_per_round(k: int) -> int:
    """How many visible targets a round brings back (the best by what was read)."""
    return max(BM25_RETURNED_MIN, 8 * k)


class ThresholdTopK:
    """One round of impact-ordered prefixes, judged by Fagin's threshold test. A visible
    target read in a term's prefix has that term's exact part; a term whose whole list was
    read (fewer rows than the depth) adds nothing to targets it did not list; any other
    missing part is at most the term's lowest impact read times the slack. Of the targets
    read, the round returns the ``returned`` visible ones with the highest such bounds; any
    other visible target read is bounded by the last of them (``rest``). The top k is
    proven when no other target, read or unread, can reach the k-th exact score."""

    def __init__(self, rows: Sequence[Any], terms: Sequence[str], df: dict[str, int], n: float, avgdl: float,
                 slack: float, depth: int, returned: int) -> None:
        self.avgdl = avgdl
        self.df = df
        self.idf = {t: bm25_idf(int(n), df[t]) for t in terms if df[t]}
        self.terms = [t for t in terms if t in self.idf]
        self.bound = dict.fromkeys(self.terms, 0.0)  # a term no row read: its list is empty
        self.rest = -math.inf
        postings = []
        for r in rows:
            if r["term"] is None:  # the returned targets: their count and the lowest bound
                if r["walked"] >= returned:
                    self.rest = r["floor"]
            elif r["target_id"] is None:
                exhausted = r["walked"] < depth
                self.bound[r["term"]] = 0.0 if exhausted else self.idf[r["term"]] * r["floor"] * slack
            else:
                postings.append(r)
        # Per target: the known terms' scores, and their sum in term order (as BM25_SUM_SQL).
        self.known: dict[uuid.UUID, dict[str, float]] = {}
        self.score: dict[uuid.UUID, float] = {}
        self.complete_ids: set[uuid.UUID] = set()
        self._add(postings)

    def next_depth(self, depth: int, deepest: int) -> int:
        """How deep the next round reads: to the end of every unfinished list when that is
        within the bound (one more round then proves the answer; flat impacts, as in short
        fact labels, would otherwise take a round per factor of four), else four times deeper,
        and to the bound itself rather than a last short step."""
        needed = max((self.df[t] for t in self.terms if self.bound[t] > 0), default=0) + 1
        if needed <= deepest:
            return max(needed, depth + 1)
        return deepest if depth * 8 > deepest else depth * 4

    def _add(self, postings: Sequence[Any]) -> None:
        for p in postings:
            target, term = p["target_id"], p["term"]
            known = self.known.setdefault(target, {})
            if term not in known:
                known[term] = bm25_term(self.idf[term], p["tf"], p["length"], self.avgdl)
                self.score[target] = sum(known[t] for t in sorted(known))

    def _upper(self, target: uuid.UUID) -> float:
        if target in self.complete_ids:
            return self.score[target]
        known = self.known[target]
        return self.score[target] + sum(self.bound[t] for t in self.terms if t not in known)

    def _split(self) -> tuple[list[tuple[uuid.UUID, float]], list[tuple[uuid.UUID, float]]]:
        """(exact scores best first, open targets with their upper bound)."""
        exact: list[tuple[uuid.UUID, float]] = []
        open_: list[tuple[uuid.UUID, float]] = []
        for target, score in self.score.items():
            upper = self._upper(target)
            (open_ if upper > score else exact).append((target, upper if upper > score else score))
        exact.sort(key=lambda x: (-x[1], x[0]))
        return exact, open_

    def contenders(self, k: int) -> list[uuid.UUID]:
        """Read targets with unknown parts that could still reach the top k, best bound
        first (at most BM25_COMPLETE_MAX: on the last round the answer is chosen among them)."""
        exact, open_ = self._split()
        threshold = exact[k - 1][1] if len(exact) >= k else -math.inf
        ranked = sorted(((i, upper) for i, upper in open_ if upper >= threshold), key=lambda x: (-x[1], x[0]))
        return [i for i, _ in ranked[:BM25_COMPLETE_MAX]]

    def complete(self, targets: Sequence[uuid.UUID], postings: Sequence[Any]) -> None:
        """Every query term's posting of these targets (random access): their scores are exact."""
        self._add(postings)
        self.complete_ids.update(targets)

    def top(self, k: int) -> tuple[list[tuple[uuid.UUID, float]], bool]:
        exact, open_ = self._split()
        threshold = exact[k - 1][1] if len(exact) >= k else -math.inf
        unseen = sum(self.bound.values())
        # Every list read to its end: the returned targets are complete, and any other came
        # after them in (score, id) order, the order of the answer.
        rest_below = self.rest == -math.inf or unseen == 0.0 or self.rest < threshold
        proven = ((unseen == 0.0 or unseen < threshold) and rest_below
                  and all(upper < threshold for _, upper in open_))
        return exact[:k], proven
