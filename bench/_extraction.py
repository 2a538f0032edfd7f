"""The extraction corpus and an in-memory run of extraction → normalisation → adjudication.

The corpus (``tests/data/extraction_corpus.txt``) is written for this project: small
scenarios of meeting notes, chats, emails, status reports and wiki pages, each with the
facts (and their windows, with precision) that should be held after all its documents are
read, and statements that must not be held as facts. The in-memory run uses the engine's
own domain code (claim providers, relation providers, ``adjudicate.decide``) with a
dictionary for the fact store, so the corpus test and the bench need no database; the
write rules mirror ``facts_store.apply``.

Corpus format::

    === scenario <id> | <genre>
    --- <said-on ISO time>
    <document Markdown>
    --- <said-on ISO time>
    <another document>
    === facts
    <label> | <valid_from or -> | <valid_until or -> | <precision>
    === absent
    <label that must not be held as a current fact>
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.pipeline.domain import claims as claims_domain
from services.pipeline.domain import facts as facts_domain
from services.pipeline.domain.adjudicate import FactView, Incoming, PendingEnd, Verdict, decide, holder_predicates
from services.pipeline.domain.entities import better_name, compatible, proper_name
from services.pipeline.domain.facts import (
    AssertionDraft,
    ClaimView,
    Window,
    attribute_key,
    claim_window,
    normalize_name,
    observation_label,
    relation_label,
)
from services.platform.settings import Settings
from services.platform.structure import build_sections, chunk, parse_blocks

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "extraction_corpus.txt"
# Written before the extractor was changed against it and scored on its own: the estimate for unseen text.
HELDOUT = CORPUS.with_name("extraction_heldout.txt")
_CHUNK_TOKEN_BUDGET: int = Settings.model_fields["chunk_token_budget"].default


@dataclass(frozen=True)
class ExpectedFact:
    label: str
    valid_from: dt.date | None
    valid_until: dt.date | None
    precision: str


@dataclass
class Scenario:
    id: str
    genre: str
    documents: list[tuple[dt.datetime, str]] = field(default_factory=list)
    facts: list[ExpectedFact] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    batch: int = 1  # a "# ---- batch N" comment line starts batch N

    @property
    def sentences(self) -> int:
        count = 0
        for _, text in self.documents:
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    count += max(1, len(re.findall(r"[.!?](?:\s|$)", line)))
        return count


def load_corpus(path: Path = CORPUS) -> list[Scenario]:
    scenarios: list[Scenario] = []
    section = None
    current: Scenario | None = None
    buffer: list[str] = []
    said_on: dt.datetime | None = None
    batch = 1

    def flush() -> None:
        nonlocal buffer
        if current is not None and said_on is not None and section == "doc":
            current.documents.append((said_on, "\n".join(buffer).strip() + "\n"))
        buffer = []

    for raw in path.read_text(encoding="utf-8").splitlines():
        batch_header = re.match(r"# ---- batch (\d+)", raw)
        if raw.startswith("#") and section != "doc":
            batch = int(batch_header.group(1)) if batch_header else batch  # comments outside documents
        elif raw.startswith("=== scenario "):
            flush()
            ident, _, genre = raw[len("=== scenario "):].partition("|")
            current = Scenario(ident.strip(), genre.strip(), batch=batch)
            scenarios.append(current)
            section = None
        elif raw.startswith("--- "):
            flush()
            said_on = dt.datetime.fromisoformat(raw[4:].strip().replace("Z", "+00:00"))
            section = "doc"
        elif raw.startswith("=== "):
            flush()
            section = raw[4:].strip()
        elif section == "doc":
            buffer.append(raw)
        elif section == "facts" and raw.strip() and current is not None:
            label, start, end, precision = (p.strip() for p in raw.split("|"))
            current.facts.append(ExpectedFact(label, _day(start), _day(end), precision))
        elif section == "absent" and raw.strip() and current is not None:
            current.absent.append(raw.strip())
    flush()
    return scenarios


def _day(text: str) -> dt.date | None:
    return None if text in ("-", "") else dt.date.fromisoformat(text)


# ------------------------------------------------------------------------- in-memory engine


@dataclass
class HeldFact:
    fact_id: uuid.UUID
    kind: str
    subject_id: uuid.UUID
    predicate: str | None
    object_id: uuid.UUID | None
    statement: str | None
    label: str
    window: Window
    superseded_by: uuid.UUID | None = None
    contradiction_group: uuid.UUID | None = None
    change_kind: str = "none"
    previous_object_id: uuid.UUID | None = None
    said_at: dt.datetime | None = None
    label_features: dict[str, object] = field(default_factory=dict)


@dataclass
class Memory:
    """Entities by normalised name and facts by id: what the tables would hold."""

    entities: dict[str, tuple[uuid.UUID, str]] = field(default_factory=dict)
    facts: dict[uuid.UUID, HeldFact] = field(default_factory=dict)
    pending_ends: list[tuple[uuid.UUID, uuid.UUID, PendingEnd]] = field(default_factory=list)
    counter: int = 0

    names: dict[uuid.UUID, str] = field(default_factory=dict)

    def resolve(self, surface: str) -> tuple[uuid.UUID, str]:
        """Exact names; a first name alone joins the one full (proper) name it starts, and a
        full name joins the one first name seen alone when it fits every full name of that
        entity (the fullest spelling becomes the name), as the resolver's rules do."""
        key = normalize_name(surface)
        if key not in self.entities:
            first = key.split()[0] if key else key
            if " " not in key:
                matches = {v[0] for k, v in self.entities.items()
                           if k.split()[0] == key and (" " not in k or proper_name(v[1]) or surface.islower())}
            elif proper_name(surface) or first in self.entities and self.entities[first][1].islower():
                matches = {v[0] for k, v in self.entities.items() if k == first
                           and all(compatible(key, other) for other, (e, _) in self.entities.items()
                                   if e == v[0] and " " in other)}
            else:
                matches = set()
            if len(matches) == 1:
                entity_id = next(iter(matches))
            else:
                entity_id = uuid.uuid5(uuid.NAMESPACE_OID, key)
                self.names[entity_id] = surface.strip()
            self.entities[key] = (entity_id, surface.strip())
        entity_id = self.entities[key][0]
        if better_name(surface.strip(), self.names[entity_id]):
            self.names[entity_id] = surface.strip()
        return entity_id, self.names[entity_id]

    def name(self, entity_id: uuid.UUID) -> str:
        return self.names[entity_id]

    def label(self, fact: HeldFact) -> str:
        """Rendered from the entities' current names, as the store relabels them."""
        if fact.kind == "relation" and fact.object_id is not None:
            return relation_label(self.names[fact.subject_id], fact.predicate or "", self.names[fact.object_id])
        return observation_label(self.names[fact.subject_id], fact.label, fact.label_features)

    def views(self, a: Incoming) -> list[FactView]:
        subject_key = normalize_name(self.name(a.subject_id))
        return [FactView(f.fact_id, f.kind, f.subject_id, f.predicate, f.object_id, f.statement, f.window,
                         f.superseded_by is not None, f.contradiction_group,
                         attribute_key(f.statement or "", subject_key), normalize_name(f.statement or ""),
                         f.change_kind, f.previous_object_id, f.said_at)
                for f in self.facts.values()
                if f.subject_id == a.subject_id or (f.kind == "relation" and f.object_id == a.object_id
                                                     and f.predicate in holder_predicates(a.predicate))]

    def current(self) -> dict[str, HeldFact]:
        return {self.label(f): f for f in self.facts.values()
                if f.superseded_by is None and f.window.valid_until is None}


def _apply(memory: Memory, a: Incoming, verdict: Verdict, label: str, draft: AssertionDraft) -> None:
    if verdict.outcome == "drop":
        if verdict.reason == "pending_end" and a.object_id is not None:
            memory.pending_ends.append((a.subject_id, a.object_id, PendingEnd(a.window.valid_from, a.said_at,
                                                                              precision=a.window.precision)))
        return
    if verdict.outcome == "end":
        for fact_id, at in verdict.supersede:
            held = memory.facts[fact_id]
            held.window = held.window.ended(at, verdict.end_precision) if at is not None else held.window
        return
    if verdict.outcome in ("noop", "update", "contradict_evidence"):
        assert verdict.target is not None
        held = memory.facts[verdict.target]
        if verdict.outcome == "update" and verdict.window is not None:
            held.window = verdict.window
            if held.kind == "observation":
                held.statement, held.label, held.label_features = a.statement, label, draft.features
        return
    memory.counter += 1
    fact_id = uuid.uuid5(uuid.NAMESPACE_OID, f"fact-{memory.counter}")
    window = verdict.window or a.window
    superseded_by = verdict.closed_by[0] if verdict.closed_by is not None else None
    closed_at = verdict.closed_at()
    if closed_at is not None:
        window = window.ended(closed_at, verdict.end_precision)
    group = None
    if verdict.outcome == "contradict":
        group = next((memory.facts[g].contradiction_group for g in verdict.group_with
                      if memory.facts[g].contradiction_group), None) or uuid.uuid5(fact_id, "group")
        for other in verdict.group_with:
            memory.facts[other].contradiction_group = group
    memory.facts[fact_id] = HeldFact(fact_id, a.kind, a.subject_id, a.predicate, a.object_id, a.statement, label,
                                     window, superseded_by, group, a.change_kind, a.previous_object_id,
                                     a.said_at, dict(draft.features))
    for predecessor, at in verdict.supersede:
        held = memory.facts[predecessor]
        held.superseded_by = fact_id
        if at is not None:
            held.window = held.window.ended(at)


@dataclass(frozen=True)
class Extractor:
    name: str
    claims: object
    relations: object


def parse_extractor() -> Extractor:
    return Extractor("parse", claims_domain.ParsedClaimProvider(), facts_domain.ParseRelationProvider())


def regex_extractor() -> Extractor:
    return Extractor("regex", claims_domain.RulesClaimProvider(), facts_domain.RulesRelationProvider())


async def read_document(extractor: Extractor, text: str, said_on: dt.datetime, memory: Memory) -> None:
    """One document through claims, normalisation and adjudication, one passage per chunk."""
    views: list[ClaimView] = []
    for start, end in _passages(text):
        item = claims_domain.ExtractionInput(text, claims_domain.Passage("p", start, end), said_on, None)
        drafts, _ = await extractor.claims.extract(item)  # type: ignore[attr-defined]
        for index, d in enumerate(drafts):
            views.append(ClaimView(f"{start}-{index}", d.claim_text, d.is_attributed, d.attributed_to, d.valid_from,
                                   d.valid_until, d.valid_precision, d.valid_kind, said_on))
    results = await extractor.relations.normalize(views, frozenset())  # type: ignore[attr-defined]
    for view, (drafts, _reason) in zip(views, results, strict=True):
        for draft in drafts:
            await _adjudicate(memory, view, draft)


async def _adjudicate(memory: Memory, view: ClaimView, draft: AssertionDraft) -> None:
    subject_id, subject_name = memory.resolve(draft.subject)
    object_id = object_name = None
    if draft.object is not None:
        object_id, object_name = memory.resolve(draft.object)
    previous_id = memory.resolve(draft.previous_object)[0] if draft.previous_object else None
    if draft.features.get("previous_holder"):
        memory.resolve(str(draft.features["previous_holder"]))  # a mention like any other name
    window = claim_window(view, draft)
    incoming = Incoming(draft.kind, subject_id, draft.predicate, object_id, draft.statement, window, view.valid_kind,
                        draft.change_kind, previous_object_id=previous_id, previous_value=draft.previous_value,
                        attribute=attribute_key(draft.statement or "", normalize_name(subject_name)),
                        statement_key=normalize_name(draft.statement or ""), ends=bool(draft.features.get("ends")),
                        said_at=view.asserted_at, until_claim=bool(draft.features.get("until_claim")),
                        schedule=bool(draft.features.get("schedule")))
    ends = [end for s, o, end in memory.pending_ends if s == subject_id and o == object_id]
    verdict = decide(incoming, memory.views(incoming), pending_ends=ends)
    label = (relation_label(subject_name, draft.predicate or "", object_name or "") if draft.kind == "relation"
             else draft.statement or "")
    _apply(memory, incoming, verdict, label, draft)


def _passages(text: str) -> list[tuple[int, int]]:
    """The document's chunks, cut as the pipeline's chunk stage cuts them at the default
    token budget: the extract stage reads one chunk per call."""
    blocks = parse_blocks(text)
    chunks = chunk(blocks, build_sections(blocks, text), markdown=text, token_budget=_CHUNK_TOKEN_BUDGET)
    return [(c.char_start, c.char_end) for c in chunks] or [(0, len(text))]


async def run_scenario(extractor: Extractor, scenario: Scenario,
                       order: Sequence[int] | None = None) -> Memory:
    memory = Memory()
    documents = scenario.documents if order is None else [scenario.documents[i] for i in order]
    for said_on, text in documents:
        await read_document(extractor, text, said_on, memory)
    return memory


# ------------------------------------------------------------------------- scoring


def key(label: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w:,' -]", " ", label.lower())).strip()


def is_scored(fact: HeldFact) -> bool:
    """Structured facts: relations and canonical attribute values (statements are evidence)."""
    return fact.kind == "relation" or (bool(re.match(r"^[^:.]{1,120}: \S", fact.label))
                                       and not fact.label.endswith("."))


def labelled(memory: Memory) -> dict[str, HeldFact]:
    return {key(memory.label(f)): f for f in memory.facts.values()}


def is_clean(label: str) -> bool:
    return not label.endswith(".") and " said that " not in label and len(label.split()) <= 14


@dataclass
class Score:
    expected: int = 0
    predicted: int = 0
    matched: int = 0
    windows_exact: int = 0
    labels: int = 0
    clean_labels: int = 0
    absent_violations: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        for name in ("expected", "predicted", "matched", "windows_exact", "labels", "clean_labels",
                     "absent_violations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.extend(other.failures)

    @property
    def precision(self) -> float:
        return self.matched / (self.predicted + self.absent_violations) if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def windows(self) -> float:
        return self.windows_exact / self.expected if self.expected else 1.0

    @property
    def clean(self) -> float:
        return self.clean_labels / self.labels if self.labels else 1.0


def _date(value: dt.datetime | None) -> dt.date | None:
    return value.date() if value is not None else None


def score(scenario: Scenario, memory: Memory) -> Score:
    result = Score(expected=len(scenario.facts))
    held = labelled(memory)
    scored = {k: f for k, f in held.items() if is_scored(f)}
    result.predicted = len(scored)
    result.labels = len(held)
    result.clean_labels = sum(1 for f in held.values() if is_clean(memory.label(f)))
    for expected in scenario.facts:
        fact = held.get(key(expected.label))
        if fact is None:
            result.failures.append(f"{scenario.id}: missing {expected.label!r} (held: "
                                   f"{sorted(memory.label(f) for f in memory.facts.values())})")
            continue
        if key(expected.label) in scored:
            result.matched += 1
        else:
            result.predicted += 1
            result.matched += 1
        window = (_date(fact.window.valid_from), _date(fact.window.valid_until), fact.window.precision)
        if window == (expected.valid_from, expected.valid_until, expected.precision):
            result.windows_exact += 1
        else:
            result.failures.append(f"{scenario.id}: window of {expected.label!r} is {window}, expected "
                                   f"{(expected.valid_from, expected.valid_until, expected.precision)}")
    current = {key(label) for label in memory.current()}
    for label in scenario.absent:
        if key(label) in current:
            result.absent_violations += 1
            result.failures.append(f"{scenario.id}: {label!r} is held as a current fact")
    return result


def snapshot(memory: Memory) -> list[tuple[str, object, object, str, bool]]:
    """What an order-independence check compares: labels, windows, and which are history."""
    return sorted((memory.label(f), f.window.valid_from, f.window.valid_until, f.window.precision,
                   f.superseded_by is None) for f in memory.facts.values())
