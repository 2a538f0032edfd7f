"""The labelled extraction corpus (tests/data/extraction_corpus.txt), scenario by scenario,
through the default offline extractor and the engine's adjudication rules; and the same
facts, windows and labels whatever order a scenario's documents arrive in."""

from __future__ import annotations

import itertools
import random

import pytest

from bench._extraction import HELDOUT, Score, load_corpus, parse_extractor, run_scenario, score, snapshot

SCENARIOS = load_corpus()
# Scenarios the extractor is known to get wrong, with why (strict: fixing one fails here).
KNOWN_MISSES: set[str] = {
    # session 7's tuning scenarios the extractor still gets wrong:
    "s7-ticket-reassigned",  # two undated statuses of one ticket contradict; the later does not supersede
    "s7-crm-account-owner",  # "handed the Brightline Foods account over": "account" parsed as a verb
    "s7-procurement-price",  # "the price" has no owner in its sentence ("per laptop" does not name one)
    "s7-school-term",  # a class taken over is read as owned; "the trip to the museum" loses "museum"
    "s7-negation-no-longer",  # Beatriz owns it from "now": the start of her holding is not stated (unknown)
    "s7-relative-next-week",  # two clauses, two dates, one claim: one date per claim
}


def test_the_corpus_is_large_and_varied() -> None:
    assert len(SCENARIOS) >= 60
    assert sum(s.sentences for s in SCENARIOS) >= 300
    assert {s.genre for s in SCENARIOS} >= {"meeting", "chat", "email", "status", "wiki"}
    assert len({s.id for s in SCENARIOS}) == len(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
async def test_scenario(scenario) -> None:
    result = score(scenario, await run_scenario(parse_extractor(), scenario))
    if scenario.id in KNOWN_MISSES:
        assert result.failures, "this known miss now passes: take it off KNOWN_MISSES"
        pytest.xfail("; ".join(result.failures)[:300])
    assert result.failures == []


HELDOUT_SCENARIOS = load_corpus(HELDOUT)


# F1 and windows floors per held-out group, a little under what the extractor scores now
# (batch 3 scored F1 0.70 / windows 0.69 when it was written, before any change for it, and
# 0.92 / 0.96 after session 5's general readings).
# Batch 4 was written blind (its writer never saw the extractor) and scored F1 0.62 /
# windows 0.47 when it was added: the figure for text nobody here wrote. Batch 5, written
# blind in session 5 and scored before that session's extractor work merged, scored
# 0.63 / 0.56 then and 0.66 / 0.56 after. Batch 6, written in session 6 before the extractor
# was changed for it, scored 0.67 / 0.48 when it was added and 0.75 / 0.70 after that
# session's phenomenon-level readings (none tuned on its sentences). Session 7's readings, built
# on its own s7- scenarios, moved batch 4 to 0.72 / 0.63 and batch 6 to 0.77 / 0.73.
# Session 13 added batch 8 (a development batch, 0.65 / 0.56 when written, 0.81 / 0.74 after
# that session's readings), batch 9 (blind: 0.52 / 0.43 when written, 0.55 / 0.45 after) and
# batch 10 (development, in blind batch 7's registers: 0.06 / 0.03 when written, 0.09 / 0.04)
# and batch 11 (development: minutes, postmortems, release notes; 0.45 / 0.33 when written).
# Session 15's readings, from batches 6, 8 and 11: batch 6 0.84 / 0.79, batch 8 0.87 / 0.83,
# batch 11 0.53 / 0.44; blind batches 7 and 9 moved to 0.36 / 0.26 and 0.57 / 0.49.
# Session 18's readings, from batch 11 (reports on record, alternatives set aside, weekday
# dates, reason clauses): batch 11 0.56 / 0.48; blind batch 7 0.37 / 0.27, the rest unchanged.
# Batch 12 (development, written in session 18 by a writer who saw only the format and batch
# 1) scored 0.63 / 0.53 when written, before any change for it. Batch 13 (the same, session
# 19) scored 0.52 / 0.43 when written, after that session's first readings from batch 12.
# Session 19's readings (from batches 12 and 13): batch 12 0.77 / 0.68, batch 13 0.58 / 0.49,
# blind batch 9 0.61 / 0.52, the rest unchanged. Session 20's (batches 10 to 13): batch 13
# 0.65 / 0.56, batch 12 0.78 / 0.70, batch 11 0.63 / 0.54, batch 10 0.20 / 0.10 (record fields,
# shorthand, arrows, dates in figures, shortened weekdays), blind batch 5 0.73 / 0.64, the other blind
# batches unchanged.
HELDOUT_FLOORS = {"batches 1-2": (0.85, 0.85), "batch 3": (0.88, 0.92), "batch 4": (0.58, 0.42),
                  "batch 5": (0.61, 0.51), "batch 6": (0.76, 0.72),
                  "batch 7": (0.27, 0.18), "batch 8": (0.82, 0.78), "batch 9": (0.50, 0.40),
                  "batch 10": (0.15, 0.07), "batch 11": (0.57, 0.48), "batch 12": (0.72, 0.63),
                  "batch 13": (0.57, 0.48)}
HELDOUT_BATCHES = {"batches 1-2": {1, 2}, "batch 3": {3}, "batch 4": {4}, "batch 5": {5}, "batch 6": {6},
                   "batch 7": {7}, "batch 8": {8}, "batch 9": {9},
                   "batch 10": {10}, "batch 11": {11}, "batch 12": {12}, "batch 13": {13}}


@pytest.mark.parametrize("group", sorted(HELDOUT_FLOORS))
async def test_the_held_out_batches_score_apart_and_do_not_regress(group: str) -> None:
    """The held-out batches are not asserted scenario by scenario (that would make them a tuning
    set); their totals must not fall below what the extractor scored when last looked at."""
    assert not {s.id for s in HELDOUT_SCENARIOS} & {s.id for s in SCENARIOS}
    scenarios = [s for s in HELDOUT_SCENARIOS if s.batch in HELDOUT_BATCHES[group]]
    assert len(scenarios) >= 20
    total = Score()
    for scenario in scenarios:
        total.add(score(scenario, await run_scenario(parse_extractor(), scenario)))
    f1, windows = HELDOUT_FLOORS[group]
    assert total.f1 >= f1 and total.windows >= windows, (total.f1, total.windows, total.failures)


def _orders(count: int, seed: str) -> list[tuple[int, ...]]:
    if count <= 4:
        return list(itertools.permutations(range(count)))
    rng = random.Random(seed)
    orders = {tuple(range(count)), tuple(reversed(range(count)))}
    while len(orders) < 8:
        order = list(range(count))
        rng.shuffle(order)
        orders.add(tuple(order))
    return sorted(orders)


MULTI = [s for s in SCENARIOS + HELDOUT_SCENARIOS if len(s.documents) > 1]


@pytest.mark.parametrize("scenario", MULTI, ids=[s.id for s in MULTI])
async def test_ingest_order_does_not_change_facts_windows_or_labels(scenario) -> None:
    outcomes = {}
    for order in _orders(len(scenario.documents), scenario.id):
        outcomes[order] = snapshot(await run_scenario(parse_extractor(), scenario, order))
    first = next(iter(outcomes.values()))
    assert all(outcome == first for outcome in outcomes.values()), outcomes


def _scenario(*documents: tuple[str, str]):
    import datetime as dt

    from bench._extraction import Scenario

    return Scenario("unit", "status", [(dt.datetime.fromisoformat(when), text) for when, text in documents])


async def test_an_end_at_the_close_of_a_period_ends_there_whichever_document_comes_first() -> None:
    scenario = _scenario(
        ("2026-03-02T09:00:00+00:00", "# Choir notes\n\n- Abebe Girma joined the alto section in January.\n"),
        ("2026-07-06T09:00:00+00:00", "# Choir notes\n\n- Abebe Girma left the alto section at the end of June.\n"))
    for order in ([0, 1], [1, 0]):
        held = {f[0]: f[1:4] for f in snapshot(await run_scenario(parse_extractor(), scenario, order))}
        window = held["Abebe Girma works on alto section"]
        assert (window[0].date().isoformat(), window[1].date().isoformat(), window[2]) == (
            "2026-01-01", "2026-07-01", "month"), order


async def test_values_of_periods_that_do_not_meet_neither_replace_nor_contradict_each_other() -> None:
    """March's figure corrected, April's and May's reported: each month keeps its own value,
    the corrected one goes, and no order of the reports says otherwise."""
    scenario = _scenario(
        ("2026-04-02T09:00:00+00:00", "# Orchard co-op, March\n\n- Cider sales reached 8,200 litres in March 2026.\n"),
        ("2026-05-04T09:00:00+00:00", "# Orchard co-op, April\n\n- Correction: March cider sales were 7,900 litres, "
                                      "not 8,200 litres.\n- Cider sales reached 9,050 litres in April 2026.\n"),
        ("2026-06-01T09:00:00+00:00", "# Orchard co-op, May\n\n- Cider sales reached 9,400 litres in May 2026.\n"))
    seen = set()
    for order in itertools.permutations(range(3)):
        memory = await run_scenario(parse_extractor(), scenario, list(order))
        values = {f.label: (f.window.valid_from.month, f.superseded_by is None, f.contradiction_group is None)
                  for f in memory.facts.values() if f.label.startswith("Cider sales")}
        assert values == {"Cider sales: 7,900 litres": (3, True, True), "Cider sales: 8,200 litres": (3, False, True),
                          "Cider sales: 9,050 litres": (4, True, True), "Cider sales: 9,400 litres": (5, True, True)}
        seen.add(tuple(snapshot(memory)))
    assert len(seen) == 1
