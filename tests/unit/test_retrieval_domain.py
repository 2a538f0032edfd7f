"""Retrieval rules: question analysis and evidence fusion."""

from __future__ import annotations

import re
import uuid

from hypothesis import given
from hypothesis import strategies as st

from services.platform.text import STOP_WORDS, fold, query_tokens, stem, tokens
from services.retrieval.domain import (
    EvidenceCandidates,
    FusionWeights,
    UnitCandidates,
    bm25_rank,
    fuse_evidence,
    fuse_facts,
    fuse_units,
    is_temporal_question,
    mentions_time,
    name_keys,
    term_coverage,
    turn_spans,
    weights_for,
)


def test_question_scaffolding_does_not_reach_bm25() -> None:
    assert query_tokens("What did Tom say about the flat?") == ["tom", "flat"]
    assert query_tokens("How long did Priya rest her calf?") == ["priya", "rest", "calf"]
    assert query_tokens("How old is the oven?") == ["old", "oven"]  # the measure asked is kept
    assert query_tokens("who what when, tell me!") == [] and query_tokens("😀🎉") == []
    assert tokens("He said it was long.") == ["said", "long"]  # passages keep every content word
    assert tokens("Tom’s flat, O'Brien's café; RUNNING planned") == ["tom", "flat", "o", "cafe", "run", "plan"]
    assert query_tokens("What did Tom’s landlady say?") == ["tom", "landlady"]


@given(st.text(alphabet="abeéS1_'’ .,-ingsd", max_size=40))
def test_tokens_are_each_words_stem_before_its_apostrophe(text: str) -> None:
    """The analyser's fast path (one findall, stems remembered) reads every word as the
    plain definition does: folded, cut at its apostrophe, stop words out, stemmed."""
    words = (m.group(0).replace("’", "'").split("'")[0] for m in re.finditer(r"[^\W_]+(?:['’][^\W_]+)?", fold(text)))
    assert tokens(text) == [stem(w) for w in words if w not in STOP_WORDS]


def test_names_in_a_question() -> None:
    assert name_keys("What is the name of Tom's landlady, Dona Graça?") == ["tom", "dona", "dona graca", "graca"]
    assert name_keys("When did Priya move to Lisbon?") == ["priya", "lisbon"]
    assert name_keys("what is it?") == []
    assert len(name_keys("Zed " * 50_000)) <= 3  # a huge question is read only so far


def test_temporal_questions_and_time_expressions() -> None:
    for q in ("When did Tom fly?", "How long is the walk?", "By when must desks be packed?",
              "Which month does it start?", "What's the deadline for the grant?"):
        assert is_temporal_question(q), q
    for q in ("What is the cat called?", "Who owns the exporter?", "How old is the oven?"):
        assert not is_temporal_question(q), q
    assert mentions_time("we start on the 5th of April") and mentions_time("about 25 minutes")
    assert mentions_time("the half marathon in May") and not mentions_time("it may rain")
    assert not mentions_time("[s1-1 | 2026-02-07T19:12:00Z] Priya: hey stranger")  # a turn head is no date


def _ids(n: int) -> list[uuid.UUID]:
    return [uuid.UUID(int=i + 1) for i in range(n)]


def test_fusion_ranks_claims_and_passages_on_one_scale_with_shares_that_add_up() -> None:
    c1, c2, c3, p1, p2 = _ids(5)
    candidates = EvidenceCandidates(claims={"semantic": [c1, c2], "bm25": [c2, c3]},
                                    chunks={"semantic": [p2, p1], "bm25": [p1]},
                                    chunk_of={c1: p1, c2: p1, c3: p2}, named=frozenset({c3}),
                                    dated=frozenset({p2}), temporal=True)
    weights = FusionWeights(k=5, cross=0.5, entity_lift=0.5, temporal_lift=0.5)
    claims, chunks = fuse_evidence(candidates, weights)
    assert [f.item_id for f in claims][0] == c2  # found by both claim channels
    assert {f.item_id for f in chunks} == {p1, p2}
    for f in (*claims, *chunks):
        assert abs(f.score - sum(f.signals.values())) < 1e-12
    assert "entity" in next(f for f in claims if f.item_id == c3).signals
    assert "temporal" in next(f for f in chunks if f.item_id == p2).signals
    assert "passage" in next(f for f in claims if f.item_id == c1).signals

    alone = FusionWeights(claim_semantic=0, claim_bm25=0, chunk_semantic=0, chunk_bm25=1)
    claims, chunks = fuse_evidence(candidates, alone)
    assert [f.item_id for f in chunks] == [p1, p2]  # the weighted channel's order first, then the rest
    assert all(f.score == 0 for f in claims) and {f.item_id for f in claims} == {c1, c2, c3}  # still returned


def test_the_second_stage_rescores_each_nominee_by_meaning_and_by_the_terms_it_holds() -> None:
    c1, c2, p1, p2 = _ids(4)
    # p2 was nominated by BM25 alone, at the bottom; it is the closest in meaning and holds every term.
    candidates = EvidenceCandidates(claims={"semantic": [c1, c2]}, chunks={"bm25": [p1, p2]},
                                    similarity={c1: 0.3, c2: 0.2, p1: 0.1, p2: 0.9},
                                    term_coverage={c1: 0.5, p1: 0.5, p2: 1.0})
    first_only = FusionWeights(k=5)
    claims, chunks = fuse_evidence(candidates, first_only)
    assert [f.item_id for f in chunks] == [p1, p2] and all("dense" not in f.signals for f in (*claims, *chunks))
    claims, chunks = fuse_evidence(candidates, FusionWeights(k=5, dense=0.75, coverage=0.25))
    assert [f.item_id for f in chunks] == [p2, p1]
    merged = sorted([*claims, *chunks], key=lambda f: -f.score)
    assert merged[0].item_id == p2  # above the claims too: one scale
    for f in merged:
        assert abs(f.score - sum(f.signals.values())) < 1e-12  # the ranking's shares still add up
    assert set(next(f for f in chunks if f.item_id == p2).signals) == {"bm25", "dense", "coverage"}
    assert "coverage" not in next(f for f in claims if f.item_id == c2).signals  # none of its terms
    assert term_coverage(frozenset({"cat", "name"}), frozenset({"cat", "luna"})) == 0.5
    assert term_coverage(frozenset(), frozenset({"cat"})) == 0.0  # a question of stop words only


def test_units_are_ranked_themselves_and_claims_count_through_the_turns_they_came_from() -> None:
    c1, c2, p1, p2 = _ids(4)
    a, b, c, d = (p1, 0), (p1, 1), (p1, 2), (p2, 0)
    units = UnitCandidates(semantic=[d, b], bm25=[c], of_chunk={p1: [a, b, c], p2: [d]}, of_claim={c1: [c], c2: [a]})
    claims, chunks = fuse_evidence(EvidenceCandidates(claims={"bm25": [c1, c2]}, chunks={"bm25": [p1, p2]}),
                                   FusionWeights(k=5))
    weights = FusionWeights(unit_semantic=1.0, unit_bm25=1.0, unit_passage=1.0, unit_claim=1.0, unit_k=1)
    ranked = fuse_units(units, claims, chunks, weights)
    assert ranked[0].key == c  # the passage's first unit by BM25 and by its claim, not the whole passage
    assert {u.key for u in ranked} == {a, b, c, d}  # every unit of a nominated passage can be returned
    for u in ranked:
        assert abs(u.score - sum(u.signals.values())) < 1e-12
        assert u.item_id == u.key[0]  # the ranking names a unit by its passage
    assert set(next(u for u in ranked if u.key == a).signals) == {"passage", "claim"}
    alone = fuse_units(units, claims, chunks, FusionWeights(unit_semantic=1.0))
    assert [u.key for u in alone][:2] == [d, b] and all(u.score == 0 for u in alone[2:])  # its own order first
    assert not FusionWeights().by_unit and weights.by_unit  # all unit weights 0: whole passages, as before
    # BM25 over the units themselves, with the pool's statistics: the rarer term decides.
    assert bm25_rank([a, b, c], [{"cat": 1, "luna": 1}, {"cat": 2}, {"flat": 1}], frozenset({"cat", "luna"})) == [a, b]


def test_each_kind_of_embedder_has_its_weights() -> None:
    assert weights_for("hash-384-v1") is not weights_for("sentence-transformers/all-MiniLM-L6-v2")


def test_the_turns_of_a_passage() -> None:
    passage = ("[s2-7 | 2026-02-28T10:51:19Z] Tom: The Telecaster goes in hand luggage.\n\n"
               "[s2-8 | 2026-02-28T10:52:56Z] Priya: fair. I adopted a cat btw\n\n"
               "Note: [not a turn | at all] here")
    offset = 1000
    turns = turn_spans(passage, offset)
    assert [t for _, _, t in turns] == ["s2-7", "s2-8"]
    second = passage.index("[s2-8")
    assert turns[0] == (offset, offset + second, "s2-7") and turns[1][1] == offset + len(passage)
    assert turn_spans("# Weekly notes\n\nNo turns in here.") == []


def test_facts_fuse_by_the_same_machinery_and_a_named_entity_lifts_its_facts() -> None:
    a, b, c = (uuid.uuid4() for _ in range(3))
    legs = {"semantic": [a, b, c], "bm25": [b, a], "entity_profile": [c]}
    plain = fuse_facts(legs, FusionWeights(k=60, depth=200))
    assert [f.item_id for f in plain][:2] in ([a, b], [b, a]) and plain[-1].item_id == c
    lifted = fuse_facts(legs, FusionWeights(k=60, depth=200, entity_lift=1.0), named=frozenset({c}))
    assert lifted[0].item_id == c and lifted[0].signals["entity"] > 0
    for fused in lifted:
        assert abs(sum(fused.signals.values()) - fused.score) < 1e-12  # the ranking shows every share


def test_maxscore_is_not_planned_for_terms_without_postings(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A question whose every term is absent from the space has nothing to read: no plan, not
    a crash, even with the posting floor lowered as the equivalence tests lower it."""
    from services.retrieval import lexical

    monkeypatch.setattr(lexical, "MAXSCORE_MIN", 0)
    assert lexical.essential_terms({"ember": 0, "quartz": 0}) is None
    assert lexical.essential_terms({}) is None
