"""Retrieval: latency of the assured operations and of claim search at 10k and 100k claims;
recall@10 of the vector leg under clustered ACLs; hybrid versus vector-only versus BM25-only
on a labelled set.

Everything runs in-process against the running stack's PostgreSQL: the use cases
(``Retrieval.run_operation``, ``Primitives.search``, ``SearchLegs``) are called directly
with a :class:`Caller`, so the figures are the service's SQL and Python without gRPC.

Data is generated, never ingested: documents (one version, one representation), chunks,
claims, entities with aliases and mentions, facts with evidence, BM25 postings (the
pipeline's analyser, ``term_frequencies``, written with COPY rather than ``index_text``'s
row-by-row upserts) and ``HashEmbeddings`` vectors (computed in two worker processes and
written with binary COPY). Order of the run: the 10k space is loaded and measured alone
(the baseline; all its vector legs are exact scans, so no HNSW index is needed yet); the
labelled sets are loaded and scored; then the 100k space is loaded, the HNSW indexes are
rebuilt with the migration's own definitions, and the 100k latencies, the 10k search with
the 100k space co-hosted, and the ACL recall are measured.

Each synthetic document belongs to one of ten topics; a topic has its own vocabulary and
its own people, so with the lexical hash embedder a topic is a region of the embedding
space. A document's ACL names its topic (``topic:N``, the clustered arrangement of seed
002) and a random shard (``shard:N``, the conventional random arrangement, as a control).

The labelled set plants "P owns the C service." among twelve other claims naming C and
asks five kinds of question whose gold answer is that claim: the same words, an inflected
form ("the owner of"), a misspelt codename, a synonym ("responsible for"), and a two-hop
question that names only what C does (said in a sibling claim). The hash embedder is
lexical: it matches shared words, word pairs and character trigrams (so it survives some
misspellings and inflections) but knows no synonyms. When the optional local
all-MiniLM-L6-v2 model is installed, the same set is scored with it as a contrast.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import itertools
import json
import math
import multiprocessing
import random
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from bench._common import Row, percentiles, running_stack
from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import _BIGRAM_WEIGHT, _TRIGRAM_WEIGHT, _UNIGRAM_WEIGHT, HashEmbeddings, _bucket
from services.platform.text import normalize_name, term_frequencies
from services.retrieval import adapters
from services.retrieval.adapters import CLAIM_VISIBLE
from services.retrieval.app import Retrieval
from services.retrieval.primitives import Primitives

SIZES = (10_000, 100_000)
TOPICS = 10
CLAIMS_PER_CHUNK = 4
CHUNKS_PER_DOC = 5
QUERIES = 50  # measured calls per operation and size (after WARMUP others)
WARMUP = 10
ACL_QUERIES = 50
SERVICES = 100  # labelled set: planted facts, five questions each
K = 10
DIM = 384
HNSW_INDEXES = ("claims_hnsw_384", "chunks_hnsw_384", "chunk_units_hnsw_384", "facts_hnsw_384",
                "entities_profile_hnsw_384")
PREDICATES = ("owns", "maintains", "reviews", "approves", "funds", "migrates", "audits", "designs", "leads",
              "supports", "tests", "deploys")
FIRST_NAMES = ("Dana", "Ravi", "Mina", "Omar", "Lena", "Kofi", "Ines", "Tomas", "Yuki", "Sara", "Jonas", "Amara",
               "Pablo", "Nadia", "Felix", "Hana", "Igor", "Leila", "Marco", "Noor", "Oskar", "Priya", "Quinn",
               "Rosa", "Sven", "Tara", "Umar", "Vera", "Wen", "Xavi", "Yara", "Zane", "Aiko", "Bruno", "Chen",
               "Dmitri", "Elif", "Farah", "Goran", "Hugo")
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aiou"  # pseudo-words end in a, i, o or u: the BM25 stemmer leaves them whole


def log(message: str) -> None:
    print(f"  [retrieval] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# generated corpora
# --------------------------------------------------------------------------------------

@dataclass
class ClaimGen:
    claim_id: uuid.UUID
    text: str
    mentions: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    fact_id: uuid.UUID | None = None


@dataclass
class DocGen:
    doc_id: uuid.UUID
    title: str
    acl: list[str]
    chunks: list[list[ClaimGen]]


@dataclass
class FactGen:
    fact_id: uuid.UUID
    subject: uuid.UUID
    predicate: str
    obj: uuid.UUID
    label: str
    window: tuple[dt.datetime, dt.datetime] | None = None
    invalidated: bool = False


@dataclass
class Corpus:
    space: uuid.UUID
    docs: list[DocGen]
    entities: dict[uuid.UUID, str] = field(default_factory=dict)
    facts: list[FactGen] = field(default_factory=list)

    @property
    def claims(self) -> int:
        return sum(len(c) for d in self.docs for c in d.chunks)


class Ids:
    """Deterministic, compact ids: a namespace tag and a counter."""

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.counter = itertools.count(1)

    def __call__(self) -> uuid.UUID:
        return uuid.UUID(int=(self.tag << 96) | next(self.counter))


def pseudo_words(rng: random.Random, count: int, syllables: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


@dataclass
class Vocabulary:
    topics: list[list[str]]
    general: list[str]
    surnames: list[str]


def vocabulary(seed: int = 2002) -> Vocabulary:
    rng = random.Random(seed)
    taken: set[str] = set()
    topics = [pseudo_words(rng, 80, 3, taken) for _ in range(TOPICS)]
    general = pseudo_words(rng, 150, 2, taken)
    surnames = [w.capitalize() for w in pseudo_words(rng, 320, 3, taken)]
    return Vocabulary(topics, general, surnames)


def synthetic(space: uuid.UUID, claims: int, vocab: Vocabulary, tag: int, seed: int) -> Corpus:
    """``claims`` claims in documents of one topic each; facts (subject, predicate, object)
    between the topic's people, each stated by the claims that cite it."""
    rng = random.Random(seed)
    new_id = Ids(tag)
    corpus = Corpus(space, [])
    pool = [f"{f} {s}" for f in FIRST_NAMES for s in vocab.surnames]
    if claims // 10 > len(pool):  # beyond ~128k claims: double-barrelled surnames too
        pool += [f"{f} {s}-{t}" for f in FIRST_NAMES for s in vocab.surnames[:40] for t in vocab.surnames]
    names = rng.sample(pool, claims // 10)
    people: list[list[uuid.UUID]] = [[] for _ in range(TOPICS)]
    for i, name in enumerate(names):
        entity = new_id()
        corpus.entities[entity] = name
        people[i % TOPICS].append(entity)
    pools: list[list[FactGen]] = []
    for topic in range(TOPICS):
        pool = []
        for _ in range(claims // TOPICS // 2):
            subject, obj = rng.sample(people[topic], 2)
            predicate = rng.choice(PREDICATES)
            fact = FactGen(new_id(), subject, predicate, obj,
                           f"{corpus.entities[subject]} {predicate} {corpus.entities[obj]}")
            roll = rng.random()
            if roll < 0.05:  # a closed world window: not held now, dropped at hydration
                fact.window = (dt.datetime(2023, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
            elif roll < 0.07:  # retracted: filtered inside SQL
                fact.invalidated = True
            pool.append(fact)
        pools.append(pool)
    used: set[uuid.UUID] = set()
    per_doc = CLAIMS_PER_CHUNK * CHUNKS_PER_DOC
    for d in range(claims // per_doc):
        topic = d % TOPICS
        words, general = vocab.topics[topic], vocab.general
        doc = DocGen(new_id(), f"{rng.choice(words)} {rng.choice(words)} notes {d}",
                     [f"topic:{topic}", f"shard:{rng.randrange(10)}"], [])
        for _ in range(CHUNKS_PER_DOC):
            chunk = []
            for _ in range(CLAIMS_PER_CHUNK):
                fact = rng.choice(pools[topic])
                used.add(fact.fact_id)
                tw = rng.sample(words, 5)
                gw = rng.sample(general, 2)
                subject, obj = corpus.entities[fact.subject], corpus.entities[fact.obj]
                text = (f"{subject} {fact.predicate} {obj} on the {tw[0]} {tw[1]} {gw[0]} "
                        f"and the {tw[2]} {tw[3]} {gw[1]} {tw[4]}.")
                chunk.append(ClaimGen(new_id(), text, [(fact.subject, subject), (fact.obj, obj)], fact.fact_id))
            doc.chunks.append(chunk)
        corpus.docs.append(doc)
    corpus.facts = [f for pool in pools for f in pool if f.fact_id in used]
    return corpus


def latency_queries(corpus: Corpus, vocab: Vocabulary, count: int, seed: int) -> tuple[list[str], list[str]]:
    """Questions in the corpus's vocabulary, and names to resolve (a quarter misspelt)."""
    rng = random.Random(seed)
    facts = rng.sample(corpus.facts, count)
    questions, names = [], []
    for i, fact in enumerate(facts):
        words = vocab.topics[rng.randrange(TOPICS)]
        subject = corpus.entities[fact.subject]
        if i % 2:
            questions.append(f"What does {subject} {fact.predicate} on the {rng.choice(words)}?")
        else:
            questions.append(f"Who {fact.predicate} the {rng.choice(words)} {rng.choice(words)} "
                             f"{rng.choice(vocab.general)}?")
        names.append(typo(subject, rng) if i % 4 == 3 else subject)
    return questions, names


def typo(word: str, rng: random.Random) -> str:
    """Change one interior vowel of the last word (a trigram-visible misspelling)."""
    head, _, last = word.rpartition(" ")
    spots = [i for i in range(1, len(last) - 1) if last[i] in "aeiou"]
    i = rng.choice(spots)
    changed = last[:i] + rng.choice([v for v in "aiou" if v != last[i]]) + last[i + 1:]
    return f"{head} {changed}".strip()


# --- the labelled set ------------------------------------------------------------------

DESC_VERBS = ("exports", "imports", "archives", "renders", "validates", "schedules", "routes", "encrypts",
              "indexes", "reconciles")
DESC_OBJECTS = ("invoices", "payroll records", "shipping labels", "support tickets", "audit logs",
                "customer contracts", "sensor readings", "expense reports", "tax filings", "release notes",
                "feature flags", "chat transcripts", "price lists", "warehouse counts", "login events")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
MONTHS = ("January", "March", "May", "July", "September", "November")
TEAMS = ("platform", "finance", "growth", "security", "data", "mobile")
METRICS = ("error rates", "queue depth", "p95 latency", "cache hits", "disk usage")
REGIONS = ("Frankfurt", "Oregon", "Tokyo", "Dublin")
DISTRACTORS = (
    "The {C} service deploys every {day}.",
    "{P2} reviewed the {C} roadmap in {month}.",
    "The {C} dashboard shows {metric} for the {team} team.",
    "{P3} asked who should approve changes to {C}.",
    "{C} depends on the {X} queue.",
    "The {C} service was migrated to {region} in {month}.",
    "{P4} wrote the runbook for {C} outages.",
    "Alerts from {C} go to the {team} channel.",
    "{C} stores its data in the {Y} database.",
    "The {team} team plans to retire {C} next quarter.",
    "{P5} fixed a memory leak in the {C} service.",
    "Requests to {C} are rate limited at {n} per second.",
)
QUESTION_KINDS = {
    "lexical": "Who owns the {C} service?",
    "inflected": "Who is the owner of {C}?",
    "typo": "Who owns the {T} service?",
    "synonym": "Which person is responsible for {C}?",
    "two-hop": "Who owns the service that {desc}?",  # the gold claim does not say what C does
}


@dataclass
class Question:
    kind: str
    text: str
    gold: uuid.UUID


def labelled(space: uuid.UUID, vocab: Vocabulary, tag: int, seed: int) -> tuple[Corpus, list[Question]]:
    """SERVICES services, each with one planted ownership claim ("P owns the C service."), a
    sibling claim describing what C does, and twelve distractor claims that also name C.
    Five questions per service whose gold answer is the ownership claim."""
    rng = random.Random(seed)
    new_id = Ids(tag)
    taken = {w for words in vocab.topics for w in words} | set(vocab.general)
    codenames = [w.capitalize() for w in pseudo_words(rng, SERVICES, 3, taken)]
    lowered = {c.lower() for c in codenames}
    descriptions = [f"{v} {o}" for v in DESC_VERBS for o in DESC_OBJECTS]
    rng.shuffle(descriptions)
    descriptions = descriptions[:SERVICES]
    people = [f"{f} {s}" for f in FIRST_NAMES for s in vocab.surnames[:40]]
    corpus = Corpus(space, [])
    questions: list[Question] = []
    loose: list[ClaimGen] = []
    for i, (name, desc) in enumerate(zip(codenames, descriptions, strict=True)):
        owner = rng.choice(people)
        gold = ClaimGen(new_id(), f"{owner} owns the {name} service.")
        sibling = ClaimGen(new_id(), f"The {name} service {desc}.")
        corpus.docs.append(DocGen(new_id(), f"{name} service", [], [[gold, sibling]]))
        for template in DISTRACTORS:
            text = template.format(C=name, P2=rng.choice(people), P3=rng.choice(people), P4=rng.choice(people),
                                   P5=rng.choice(people), day=rng.choice(WEEKDAYS), month=rng.choice(MONTHS),
                                   metric=rng.choice(METRICS), team=rng.choice(TEAMS), region=rng.choice(REGIONS),
                                   X=codenames[(i + 7) % len(codenames)], Y=codenames[(i + 31) % len(codenames)],
                                   n=rng.choice((50, 100, 500, 1000)))
            loose.append(ClaimGen(new_id(), text))
        while True:
            misspelt = typo(name, rng)
            if misspelt.lower() not in lowered:
                break
        for kind, template in QUESTION_KINDS.items():
            questions.append(Question(kind, template.format(C=name, T=misspelt, desc=desc), gold.claim_id))
    # Background testimony from the topic generator, so corpus statistics are not all codenames.
    background = synthetic(space, 1_500, vocab, tag + 1, seed + 1)
    loose.extend(c for d in background.docs for chunk in d.chunks for c in chunk)
    for c in loose:
        c.mentions, c.fact_id = [], None
    rng.shuffle(loose)
    per_doc = CLAIMS_PER_CHUNK * CHUNKS_PER_DOC
    for start in range(0, len(loose), per_doc):
        claims = loose[start:start + per_doc]
        chunks = [claims[j:j + CLAIMS_PER_CHUNK] for j in range(0, len(claims), CLAIMS_PER_CHUNK)]
        corpus.docs.append(DocGen(new_id(), f"notes {start // per_doc}", [], chunks))
    return corpus, questions


# --------------------------------------------------------------------------------------
# loading: embeddings and postings in worker processes, rows by binary COPY
# --------------------------------------------------------------------------------------

_HASH = HashEmbeddings(DIM)


def _hash_vectors(texts: list[str]) -> np.ndarray:
    """``HashEmbeddings.embed_one`` of each text, its per-feature sums in the same order but
    scattered with numpy (a third of the time at a million texts); the norms by ``fsum``
    as ``l2_normalise`` takes them."""
    rows: list[int] = []
    slots: list[int] = []
    values: list[float] = []
    weights = {"w": _UNIGRAM_WEIGHT, "b": _BIGRAM_WEIGHT, "c": _TRIGRAM_WEIGHT}
    odd: set[int] = set()
    for row, text in enumerate(texts):
        counts = _HASH.features(text)
        if not counts:
            odd.add(row)
            continue
        for feature, tf in counts.items():
            index, sign = _bucket(feature, DIM)
            rows.append(row)
            slots.append(index)
            values.append(sign * weights[feature[0]] * (1.0 + math.log(tf)))
    sums = np.zeros((len(texts), DIM), dtype=np.float64)
    np.add.at(sums, (np.asarray(rows, dtype=np.intp), np.asarray(slots, dtype=np.intp)), np.asarray(values))
    out = np.empty((len(texts), DIM), dtype=np.float32)
    for row in range(len(texts)):
        norm = math.sqrt(math.fsum((sums[row] * sums[row]).tolist()))
        if row in odd or norm == 0.0 or not math.isfinite(norm):
            out[row] = _HASH.embed_one(texts[row])  # no features, or all cancelled: its own fallback
        else:
            out[row] = sums[row] / norm
    return out


def _analyse(texts: list[str], postings: bool = True) -> tuple[np.ndarray, list[tuple[dict[str, int], int]]]:
    """Worker: hash vectors and (unless the pipeline's writer makes them) BM25 term
    frequencies of a block of texts."""
    tfs = [(dict(counts), length) for counts, length in map(term_frequencies, texts)] if postings else []
    return _hash_vectors(texts), tfs


class Analyser:
    def __init__(self, pool: ProcessPoolExecutor | None, *, postings: bool = True) -> None:
        self.pool = pool
        self.postings = postings

    async def __call__(self, texts: list[str], embed: Callable[[list[str]], Awaitable[np.ndarray]] | None = None
                       ) -> tuple[np.ndarray, list[tuple[dict[str, int], int]]]:
        loop = asyncio.get_running_loop()
        blocks = [texts[i:i + 2_000] for i in range(0, len(texts), 2_000)]
        if self.pool is None:
            parts = [_analyse(b, self.postings) for b in blocks]
        else:
            parts = await asyncio.gather(*(loop.run_in_executor(self.pool, _analyse, b, self.postings)
                                           for b in blocks))
        vectors = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, DIM), np.float32)
        if embed is not None:  # another provider's vectors (the postings are the same analyser's)
            vectors = await embed(texts)
        return vectors, [tf for p in parts for tf in p[1]]


async def copy(conn: asyncpg.Connection, table: str, columns: Sequence[str], records: list[tuple[Any, ...]]) -> None:
    if records:
        await conn.copy_records_to_table(table, records=records, columns=list(columns))


async def load(conn: asyncpg.Connection, corpus: Corpus, analyse: Analyser, model: str,
               embed: Callable[[list[str]], Awaitable[np.ndarray]] | None = None, *, with_postings: bool = True
               ) -> None:
    """Bulk-load a corpus (COPY, triggers off). ``with_postings=False`` leaves the BM25 rows to
    the pipeline's writer (``index_text``), as the smoke test and ``bench-scale`` do."""
    space = corpus.space
    now = dt.datetime.now(dt.UTC)
    objects, documents, versions, reps, chunk_rows, claim_rows, mentions, evidence = [], [], [], [], [], [], [], []
    chunk_texts: list[str] = []
    claim_texts: list[str] = []
    chunk_meta: list[tuple[Any, ...]] = []
    claim_meta: list[tuple[Any, ...]] = []
    fact_docs: dict[uuid.UUID, set[uuid.UUID]] = defaultdict(set)
    fact_claims: dict[uuid.UUID, int] = Counter()
    for doc in corpus.docs:
        digest = hashlib.sha256(doc.doc_id.bytes).hexdigest()
        version = uuid.UUID(int=doc.doc_id.int ^ (1 << 90))
        rep = uuid.UUID(int=doc.doc_id.int ^ (1 << 91))
        objects.append((space, digest, 1000, "text/markdown", f"bench/{digest}"))
        documents.append((doc.doc_id, space, "upload", digest, doc.title, "snapshot", doc.acl))
        versions.append((version, doc.doc_id, space, 1, digest, "ready"))
        offset = 0
        for ordinal, claims in enumerate(doc.chunks):
            chunk_id = uuid.UUID(int=doc.doc_id.int ^ ((ordinal + 1) << 80))
            text = " ".join(c.text for c in claims)
            chunk_texts.append(text)
            chunk_meta.append((chunk_id, space, doc.doc_id, version, rep, ordinal, ordinal, ordinal, offset,
                               offset + len(text), len(text.split()), text, hashlib.md5(text.encode()).hexdigest()))
            inner = 0
            for n, claim in enumerate(claims):
                claim_texts.append(claim.text)
                claim_meta.append((claim.claim_id, space, doc.doc_id, version, rep, chunk_id, n, claim.text,
                                   claim.text, offset + inner, offset + inner + len(claim.text), "bench", now))
                for entity, surface in claim.mentions:
                    mentions.append((uuid.uuid4(), space, doc.doc_id, version, claim.claim_id, surface,
                                     normalize_name(surface), entity, "T0", 1.0))
                if claim.fact_id is not None:
                    evidence.append((claim.fact_id, claim.claim_id, "supports", space, doc.doc_id))
                    fact_docs[claim.fact_id].add(doc.doc_id)
                    fact_claims[claim.fact_id] += 1
                inner += len(claim.text) + 1
            offset += len(text) + 2
        reps.append((rep, space, version, f"bench/{digest}.md", digest, offset, "markdown"))
    # Entity profiles: the name and the labels of its strongest facts (as the pipeline writes them).
    labels: dict[uuid.UUID, list[tuple[int, str]]] = defaultdict(list)
    for f in corpus.facts:
        for e in (f.subject, f.obj):
            labels[e].append((len(fact_docs[f.fact_id]), f.label))
    entity_ids = list(corpus.entities)
    profiles = [f"{corpus.entities[e]}. " + ". ".join(lbl for _, lbl in sorted(labels[e], key=lambda x: -x[0])[:8])
                for e in entity_ids]
    fact_texts = [f.label for f in corpus.facts]

    started = time.perf_counter()
    claim_vec, claim_tf = await analyse(claim_texts, embed)
    chunk_vec, chunk_tf = await analyse(chunk_texts, embed)
    fact_vec, fact_tf = await analyse(fact_texts, embed)
    entity_vec, entity_tf = await analyse(profiles, embed)
    log(f"space {space}: {len(claim_texts):,} claims, {len(chunk_texts):,} chunks, {len(fact_texts):,} facts, "
        f"{len(profiles):,} entities analysed in {time.perf_counter() - started:.1f}s")

    started = time.perf_counter()
    for i, meta in enumerate(chunk_meta):
        chunk_rows.append((*meta, chunk_vec[i], DIM, model))
    for i, meta in enumerate(claim_meta):
        claim_rows.append((*meta, claim_vec[i], DIM, model))
    bm25_docs, postings = [], []
    for kind, ids, tfs, docs in (
            ("claim", [m[0] for m in claim_meta], claim_tf, [m[2] for m in claim_meta]),
            ("chunk", [m[0] for m in chunk_meta], chunk_tf, [m[2] for m in chunk_meta]),
            ("fact", [f.fact_id for f in corpus.facts], fact_tf, [None] * len(corpus.facts)),
            ("entity", entity_ids, entity_tf, [None] * len(entity_ids))):
        if not with_postings:
            break
        for target, (counts, length), doc in zip(ids, tfs, docs, strict=True):
            bm25_docs.append((space, kind, target, doc, length))
            postings.extend((space, kind, term, target, tf, length) for term, tf in counts.items())
    past = now - dt.timedelta(days=30)
    async with conn.transaction():
        # Bulk load: no change-feed triggers, no per-row foreign-key checks (the rows are consistent).
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute("INSERT INTO space_embedding_models (space_id, model, dimension) VALUES ($1, $2, $3) "
                           "ON CONFLICT DO NOTHING", space, model, DIM)
        await copy(conn, "content_objects", ("space_id", "content_hash", "byte_size", "mime", "object_key"), objects)
        await copy(conn, "documents", ("doc_id", "space_id", "source_kind", "identity_hash", "title",
                                       "versioning_mode", "acl"), documents)
        # What the documents' ACL trigger would have noted (triggers are off here).
        await conn.execute("INSERT INTO acl_principals (space_id, principal) SELECT DISTINCT space_id, unnest(acl) "
                           "FROM documents WHERE space_id = $1 ON CONFLICT DO NOTHING", space)
        await copy(conn, "document_versions", ("version_id", "doc_id", "space_id", "version_no", "content_hash",
                                               "status"), versions)
        await copy(conn, "representations", ("representation_id", "space_id", "version_id", "object_key",
                                             "markdown_sha256", "char_count", "converter"), reps)
        await copy(conn, "chunks", ("chunk_id", "space_id", "doc_id", "version_id", "representation_id", "ordinal",
                                    "block_start", "block_end", "char_start", "char_end", "token_count", "chunk_text",
                                    "content_hash", "embedding", "embedding_dim", "embedding_model"), chunk_rows)
        # A generated chunk is one unit: its vector is its unit's (the semantic chunk leg searches units).
        await conn.execute("INSERT INTO chunk_units (chunk_id, ordinal, space_id, embedding, embedding_dim, "
                           "embedding_model) SELECT chunk_id, 0, space_id, embedding, embedding_dim, embedding_model "
                           "FROM chunks WHERE space_id = $1", space)
        await copy(conn, "claims", ("claim_id", "space_id", "doc_id", "version_id", "representation_id", "chunk_id",
                                    "ordinal", "claim_text", "source_span", "char_start", "char_end",
                                    "extractor_version", "asserted_at", "embedding", "embedding_dim",
                                    "embedding_model"), claim_rows)
        await copy(conn, "entities", ("entity_id", "space_id", "canonical_name", "normalized_name", "profile_summary",
                                      "profile_embedding", "profile_dim", "profile_model"),
                   [(e, space, corpus.entities[e], normalize_name(corpus.entities[e]), profiles[i], entity_vec[i],
                     DIM, model) for i, e in enumerate(entity_ids)])
        await copy(conn, "entity_aliases", ("space_id", "entity_id", "alias_text", "normalized_alias"),
                   [(space, e, name, normalize_name(name)) for e, name in corpus.entities.items()])
        await conn.execute(
            """UPDATE entity_aliases SET phonetic = coalesce(daitch_mokotoff(split_part(normalized_alias, ' ', 1)),
                                                             '{}') WHERE space_id = $1""", space)
        await copy(conn, "mentions", ("mention_id", "space_id", "doc_id", "version_id", "claim_id", "surface_form",
                                      "normalized_lemma", "resolved_entity_id", "resolution_method",
                                      "resolution_confidence"), mentions)
        await copy(conn, "facts", ("fact_id", "space_id", "kind", "subject_entity_id", "predicate",
                                   "object_entity_id", "label", "valid_from", "valid_until", "valid_precision",
                                   "invalidated_at", "evidence_count", "embedding", "embedding_dim",
                                   "embedding_model"),
                   [(f.fact_id, space, "relation", f.subject, f.predicate, f.obj, f.label,
                     f.window[0] if f.window else None, f.window[1] if f.window else None,
                     "day" if f.window else "unknown", past if f.invalidated else None,
                     len(fact_docs[f.fact_id]), fact_vec[i], DIM, model) for i, f in enumerate(corpus.facts)])
        await copy(conn, "fact_evidence", ("fact_id", "claim_id", "stance", "space_id", "doc_id"), evidence)
        if with_postings:
            await copy(conn, "bm25_docs", ("space_id", "target_kind", "target_id", "doc_id", "length"), bm25_docs)
            await copy(conn, "bm25_postings", ("space_id", "target_kind", "term", "target_id", "tf", "length"),
                       postings)
            # The counters' triggers did not run under the replica role: count once.
            await conn.execute("SELECT bm25_recount($1)", space)
    log(f"space {space}: {len(postings) if with_postings else 0:,} postings; COPY took "
        f"{time.perf_counter() - started:.1f}s")


async def new_space(conn: asyncpg.Connection, slug: str) -> uuid.UUID:
    return await conn.fetchval("INSERT INTO spaces (slug, name) VALUES ($1, $1) RETURNING space_id", slug)


# --------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------

def negative_kind(result: Any) -> str:
    envelopes = [result.claims_and_sources, result.facts] if hasattr(result, "claims_and_sources") else [result]
    kinds = [e.negative.kind for e in envelopes if e.HasField("negative") and e.negative.kind]
    return "negative" if kinds else "answered"


# Statement prefixes of the claim legs (to read PostgreSQL's plan cache for them).
CLAIM_LEGS = ("SELECT c.claim_id AS id, 1 - (c.embedding <=> $3)", "WITH hits AS MATERIALIZED (SELECT c.claim_id",
              "WITH stats AS")


async def plan_cache(db: Database, prefixes: Sequence[str] = CLAIM_LEGS) -> Counter[str]:
    """Generic and custom plans PostgreSQL has run so far for these prepared statements, over
    every pooled connection. A prepared statement switches to a generic plan after five
    executions when the generic plan's estimate is no worse."""
    conns = []
    counts: Counter[str] = Counter()
    try:
        for _ in range(db.pool.get_max_size()):
            conns.append(await db.pool.acquire())
        for conn in conns:
            for row in await conn.fetch("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                                        "WHERE statement ^@ ANY($1::text[])", list(prefixes)):
                counts["generic"] += row[0]
                counts["custom"] += row[1]
    finally:
        for conn in conns:
            await db.pool.release(conn)
    return counts


def cache_note(before: Counter[str], after: Counter[str]) -> str:
    delta = after - before
    return f"PostgreSQL plans: generic {delta['generic']}, custom {delta['custom']}"


async def measure(items: Sequence[Any], call: Callable[[Any], Awaitable[Any]]) -> tuple[list[float], list[Any]]:
    """WARMUP calls, then one timed call per remaining item."""
    for item in items[:WARMUP]:
        await call(item)
    samples, results = [], []
    for item in items[WARMUP:]:
        started = time.perf_counter()
        results.append(await call(item))
        samples.append(time.perf_counter() - started)
    return samples, results


async def latency(retrieval: Retrieval, primitives: Primitives, corpus: Corpus, vocab: Vocabulary, size: int,
                  baseline: dict[str, float]) -> list[Row]:
    caller = Caller(corpus.space, Scope.READ, None)  # a trusted key: every document of the space
    questions, names = latency_queries(corpus, vocab, QUERIES + WARMUP, seed=size)
    ops: list[tuple[str, Sequence[str], Callable[[str], Awaitable[Any]]]] = [
        ("resolve_entity", names, lambda n: retrieval.run_operation(caller, "resolve_entity", {"name": n})),
        ("facts_context", questions, lambda q: retrieval.run_operation(caller, "facts_context", {"query": q})),
        ("claims_and_sources_context", questions,
         lambda q: retrieval.run_operation(caller, "claims_and_sources_context", {"query": q})),
        ("combined_context", questions, lambda q: retrieval.run_operation(caller, "combined_context", {"query": q})),
        ("search_claims semantic k=10", questions, lambda q: primitives.search(caller, "claim", q, K, "semantic")),
        ("search_claims bm25 k=10", questions, lambda q: primitives.search(caller, "claim", q, K, "bm25")),
    ]
    rows = []
    for name, items, call in ops:
        retrieval.legs.plans.clear()
        cached = await plan_cache(retrieval.database)
        samples, results = await measure(items, call)
        cached_after = await plan_cache(retrieval.database)
        p50, p95 = percentiles(samples)
        outcomes = Counter(negative_kind(r) for r in results)
        notes = [f"{outcomes['answered']}/{len(results)} answered"]
        if name == "resolve_entity":
            tiers = Counter(r.entities[0].tier for r in results if r.entities)
            notes.append("tiers " + " ".join(f"T{t - 1}:{n}" for t, n in sorted(tiers.items())))
        if name in ("facts_context", "combined_context"):
            facts = [r.facts if hasattr(r, "claims_and_sources") else r for r in results]
            notes.append(f"avg {statistics.mean(len(f.facts) for f in facts):.1f} facts, "
                         f"{statistics.mean(f.dropped_by_hydration for f in facts):.1f} dropped by hydration")
        plans = Counter(retrieval.legs.plans)
        if plans:
            notes.append("vector plans " + " ".join(f"{p}:{n}" for p, n in sorted(plans.items())))
        if name.startswith("search_claims"):
            notes.append(cache_note(cached, cached_after))
        if size == SIZES[0]:
            baseline[name] = p50
        rows.append(Row("retrieval", f"{name} @ {size // 1000}k claims", len(samples), p50, p95,
                        extra="; ".join(notes), baseline_p50_ms=baseline.get(name) if size != SIZES[0] else None))
        log(f"{name} @ {size}: p50 {p50:.1f} ms")
    return rows


# --- recall under clustered ACLs -------------------------------------------------------

NAIVE = f"""SELECT c.claim_id FROM claims c
             WHERE c.space_id = $1 AND c.embedding_dim = {DIM} AND c.is_current_testimony AND {CLAIM_VISIBLE}
             ORDER BY c.embedding::halfvec({DIM}) <=> $3::vector({DIM})::halfvec({DIM}) LIMIT $4"""
ORACLE = f"""SELECT c.claim_id FROM claims c
              WHERE c.space_id = $1 AND c.embedding_dim = {DIM} AND c.is_current_testimony AND {CLAIM_VISIBLE}
              ORDER BY c.embedding <=> $3, c.claim_id LIMIT $4"""  # no cast: the index cannot serve it; ties by id


class Recorder:
    """Wraps a connection and keeps the statements a search leg sent (to EXPLAIN them)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.calls: list[tuple[str, str, tuple[Any, ...]]] = []

    async def execute(self, sql: str, *args: Any) -> Any:
        self.calls.append(("execute", sql, args))
        return await self.conn.execute(sql, *args)

    async def fetch(self, sql: str, *args: Any) -> Any:
        self.calls.append(("fetch", sql, args))
        return await self.conn.fetch(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        self.calls.append(("fetchval", sql, args))
        return await self.conn.fetchval(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        self.calls.append(("fetchrow", sql, args))
        return await self.conn.fetchrow(sql, *args)


def plan_nodes(plan: Any) -> list[str]:
    out: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        label = node["Node Type"]
        if "Index Name" in node:
            label += f" {node['Index Name']}"
        elif "Relation Name" in node:
            label += f" {node['Relation Name']}"
        if any(word in label for word in ("Scan", "Sort", "Join", "Loop", "Gather")):
            out.append(label)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return out


def used_hnsw(nodes: list[str]) -> str:
    return "HNSW index scan" if any("hnsw" in n for n in nodes) else "exact: " + " > ".join(nodes)


async def explain(conn: asyncpg.Connection, sql: str, args: Sequence[Any]) -> list[str]:
    value = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *args)
    return plan_nodes(value if isinstance(value, list) else json.loads(value))


async def naive_search(conn: asyncpg.Connection, caller: Caller, vector: np.ndarray, *, plan: bool = False) -> Any:
    """What most stacks do: walk the HNSW index (ef_search 40, no iterative scan) and apply
    the space and ACL as a WHERE post-filter."""
    async with conn.transaction():
        await conn.execute("SET LOCAL hnsw.iterative_scan = 'off'")
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        args = (caller.space_id, adapters.principals(caller), vector, K)
        if plan:
            return await explain(conn, NAIVE, args)
        return [r[0] for r in await conn.fetch(NAIVE, *args)]


def recall(found: Sequence[uuid.UUID], truth: Sequence[uuid.UUID]) -> float:
    return len(set(found) & set(truth)) / len(truth) if truth else 1.0


async def acl_recall(db: Database, retrieval: Retrieval, corpus: Corpus, vocab: Vocabulary) -> list[Row]:
    rng = random.Random(17)
    texts = []
    for _ in range(ACL_QUERIES):  # questions from every topic: most point away from the caller's region
        words = vocab.topics[rng.randrange(TOPICS)]
        tw = rng.sample(words, 4)
        texts.append(f"Who {rng.choice(PREDICATES)} the {tw[0]} {tw[1]} {rng.choice(vocab.general)} "
                     f"and {tw[2]} {tw[3]}?")
    vectors = [np.asarray(_HASH.embed_one(t), dtype=np.float32) for t in texts]
    callers = (("clustered 10% (topic:0)", frozenset({"topic:0"})),
               ("random 10% (shard:0), control", frozenset({"shard:0"})),
               ("clustered 30% (topic:0-2)", frozenset({"topic:0", "topic:1", "topic:2"})))
    rows: list[Row] = []
    indexed = await db.fetchval("SELECT count(*) FROM claims WHERE embedding_dim = $1", DIM)
    for label, principals in callers:
        caller = Caller(corpus.space, Scope.READ, principals)
        args = (caller.space_id, adapters.principals(caller))
        oracle_t, naive_t, plan_t, naive_r, plan_r, truths = [], [], [], [], [], []
        empty = 0
        plans: Counter[str] = Counter()
        async with db.acquire() as conn:
            eligible = await conn.fetchval(
                f"SELECT count(*) FROM claims c WHERE c.space_id = $1 AND c.is_current_testimony AND {CLAIM_VISIBLE}",
                *args)
            naive_plan = used_hnsw(await naive_search(conn, caller, vectors[0], plan=True))
            oracle_plan = used_hnsw(await explain(conn, ORACLE, (*args, vectors[0], K)))
            for vector in vectors:
                started = time.perf_counter()
                truth = [r[0] for r in await conn.fetch(ORACLE, *args, vector, K)]
                oracle_t.append(time.perf_counter() - started)
                truths.append(truth)
                started = time.perf_counter()
                found = await naive_search(conn, caller, vector)
                naive_t.append(time.perf_counter() - started)
                naive_r.append(recall(found, truth))
                empty += not found
        service_plan = ""
        cached = await plan_cache(db)
        for vector, truth in zip(vectors, truths, strict=True):
            started = time.perf_counter()
            async with retrieval.snapshot() as conn:
                recorder = Recorder(conn)
                hits = await retrieval.legs.semantic(recorder, "claim", caller, vector.tolist(), K)  # type: ignore
            plan_t.append(time.perf_counter() - started)
            plans[retrieval.legs.plans[-1]] += 1
            plan_r.append(recall([h for h, _ in hits], truth))
            if not service_plan:  # which plan PostgreSQL actually ran for the service's statement
                async with db.transaction() as conn:
                    for kind, sql, params in recorder.calls:
                        if kind == "execute":
                            await conn.execute(sql, *params)
                    _, sql, params = recorder.calls[-1]
                    service_plan = used_hnsw(await explain(conn, sql, params))
        cached_after = await plan_cache(db)
        base = percentiles(oracle_t)
        rows.append(Row("retrieval-acl", f"exact oracle, {label}", len(vectors), *base,
                        extra=f"{eligible:,} of {indexed:,} indexed claims visible ({eligible / indexed:.1%}); "
                              f"EXPLAIN: {oracle_plan}"))
        rows.append(Row("retrieval-acl", f"naive post-filtered HNSW, {label}", len(vectors), *percentiles(naive_t),
                        baseline_p50_ms=base[0],
                        extra=f"recall@10 {statistics.mean(naive_r):.3f}, {empty}/{len(vectors)} empty; "
                              f"ef_search 40, iterative scan off; EXPLAIN: {naive_plan}"))
        rows.append(Row("retrieval-acl", f"service plan, {label}", len(vectors), *percentiles(plan_t),
                        baseline_p50_ms=base[0],
                        extra=f"recall@10 {statistics.mean(plan_r):.3f}; SearchLegs chose "
                              + " ".join(f"{p}:{n}" for p, n in sorted(plans.items()))
                              + f" (EXACT_SCAN_MAX {adapters.EXACT_SCAN_MAX:,}, "
                              f"restricted {adapters.RESTRICTED_EXACT_SCAN_MAX:,}); "
                              f"EXPLAIN: {service_plan}; {cache_note(cached, cached_after)}"))
        log(f"acl {label}: naive {statistics.mean(naive_r):.3f} plan {statistics.mean(plan_r):.3f}")
    return rows


# --- quality on the labelled set --------------------------------------------------------

async def quality(retrieval: Retrieval, space: uuid.UUID, questions: list[Question], model: str,
                  methods: Sequence[str] = ("bm25-only", "vector-only", "hybrid RRF"),
                  baseline: float | None = None) -> list[Row]:
    """recall@10 and MRR@10 of the gold claim, per question kind: BM25 alone, the vector leg
    alone (both SearchLegs, k=10), and the service's fusion (claims_and_sources_context, k=10,
    candidate_k 200, RRF constant 60)."""
    caller = Caller(space, Scope.READ, None)

    async def ranked(method: str, q: str) -> list[uuid.UUID]:
        if method == "hybrid RRF":
            env = await retrieval.run_operation(caller, "claims_and_sources_context", {"query": q, "k": K})
            return [uuid.UUID(i) for e in env.evidence for i in (e.claim_id, *e.grouped_claim_ids)][:K]
        vector = await retrieval.embed_query(q) if method == "vector-only" else None
        async with retrieval.snapshot() as conn:
            if vector is not None:
                hits = await retrieval.legs.semantic(conn, "claim", caller, vector, K)
            else:
                hits = await retrieval.legs.lexical(conn, "claim", caller, q, K)
        return [h for h, _ in hits]

    rows: list[Row] = []
    for method in methods:
        await ranked(method, questions[0].text)  # warm
        samples: list[float] = []
        reciprocal: dict[str, list[float]] = defaultdict(list)
        for question in questions:
            started = time.perf_counter()
            found = await ranked(method, question.text)
            samples.append(time.perf_counter() - started)
            rank = found.index(question.gold) + 1 if question.gold in found else 0
            reciprocal[question.kind].append(1 / rank if rank else 0.0)
        every = [x for xs in reciprocal.values() for x in xs]

        def summary(xs: list[float]) -> str:
            return f"{sum(1 for x in xs if x) / len(xs):.2f}/{statistics.mean(xs):.2f}"

        notes = f"R@10/MRR all {summary(every)} | " + ", ".join(f"{kind} {summary(xs)}"
                                                                  for kind, xs in reciprocal.items())
        rows.append(Row("retrieval-quality", f"{method} [{model}]", len(questions), *percentiles(samples),
                        extra=notes, baseline_p50_ms=baseline))
        if baseline is None:
            baseline = rows[0].p50_ms
        log(f"quality {method} [{model}]: {notes}")
    return rows


# --------------------------------------------------------------------------------------

async def drop_hnsw_indexes(conn: asyncpg.Connection) -> list[str]:
    """Bulk loads run without the HNSW indexes; their migration definitions, to rebuild them."""
    definitions = [await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = $1", name)
                   for name in HNSW_INDEXES]
    for name in HNSW_INDEXES:
        await conn.execute(f"DROP INDEX {name}")
    return definitions


async def rebuild_indexes(conn: asyncpg.Connection, definitions: list[str], memory: str = "1GB") -> float:
    """``memory`` should hold the largest HNSW graph (one built on disk is several times slower)."""
    started = time.perf_counter()
    await conn.execute(f"SET maintenance_work_mem = '{memory}'")
    await conn.execute("SET max_parallel_maintenance_workers = 1")
    for definition in definitions:
        await conn.execute(definition)
    await conn.execute("RESET maintenance_work_mem")
    await conn.execute("ANALYZE")
    return time.perf_counter() - started


@asynccontextmanager
async def postings_unindexed(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """Millions of postings load faster into an unindexed table; the migrations' primary key
    and indexes are put back afterwards, with the same definitions."""
    indexes = [r[0] for r in await conn.fetch(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'bm25_postings' AND indexname <> 'bm25_postings_pkey'")]
    key = await conn.fetchval("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = "
                              "'bm25_postings_pkey'")
    await conn.execute("ALTER TABLE bm25_postings DROP CONSTRAINT bm25_postings_pkey")
    for definition in indexes:
        await conn.execute(f"DROP INDEX {definition.split()[2]}")
    try:
        yield
    finally:
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(f"ALTER TABLE bm25_postings ADD CONSTRAINT bm25_postings_pkey {key}")
        for definition in indexes:
            await conn.execute(definition)
        await conn.execute("RESET maintenance_work_mem")


def minilm() -> Any | None:
    """The packaged all-MiniLM-L6-v2 provider (the default ``minilm`` one)."""
    try:
        from services.platform.embeddings import build_embedding_provider

        return build_embedding_provider("minilm")
    except Exception as exc:  # noqa: BLE001 - an optional contrast only
        log(f"no MiniLM contrast: {exc}")
        return None


async def run() -> list[Row]:
    rows: list[Row] = []
    vocab = vocabulary()
    began = time.perf_counter()
    async with running_stack() as (stack, _port):
        assert stack.dsn is not None
        conn = await asyncpg.connect(stack.dsn)
        await register_vector(conn)
        db = await Database.connect(stack.dsn, max_size=4, query_timeout_s=60)
        pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
        try:
            analyse = Analyser(pool)
            model = _HASH.model
            retrieval = Retrieval(db, HashEmbeddings(DIM), None)
            primitives = Primitives(retrieval)
            # The HNSW indexes are rebuilt after the bulk load. The 10k set is measured before
            # that: every one of its vector legs is an exact scan (≤ EXACT_SCAN_MAX eligible rows),
            # which no HNSW index can serve.
            definitions = await drop_hnsw_indexes(conn)

            small, large = SIZES
            started = time.perf_counter()
            corpora = {small: synthetic(await new_space(conn, "bench-10k"), small, vocab, 1 << 8, seed=small)}
            await load(conn, corpora[small], analyse, model)
            await conn.execute("ANALYZE")
            small_load = time.perf_counter() - started
            baseline: dict[str, float] = {}
            rows.extend(await latency(retrieval, primitives, corpora[small], vocab, small, baseline))

            # Retrieval quality, while the database is small (see the co-hosting row below).
            labelled_space = await new_space(conn, "bench-labelled")
            labelled_corpus, questions = labelled(labelled_space, vocab, 0xA0 << 8, seed=5)
            await load(conn, labelled_corpus, analyse, model)
            await conn.execute("ANALYZE")
            quality_rows = await quality(retrieval, labelled_space, questions, model)
            provider = minilm()
            if provider is not None:
                started = time.perf_counter()
                contrast_space = await new_space(conn, "bench-labelled-minilm")
                contrast, contrast_questions = labelled(contrast_space, vocab, 0xA0 << 8 | 0x10, seed=5)

                async def embed(texts: list[str]) -> np.ndarray:
                    return np.asarray(await provider.embed(texts), dtype=np.float32)

                await load(conn, contrast, analyse, provider.model, embed)
                await conn.execute("ANALYZE")
                log(f"MiniLM contrast set embedded and loaded in {time.perf_counter() - started:.1f}s")
                quality_rows += await quality(Retrieval(db, provider, None), contrast_space, contrast_questions,
                                              "all-MiniLM-L6-v2", methods=("vector-only", "hybrid RRF"),
                                              baseline=quality_rows[0].p50_ms)

            started = time.perf_counter()
            corpora[large] = synthetic(await new_space(conn, "bench-100k"), large, vocab, 2 << 8, seed=large)
            async with postings_unindexed(conn):
                await load(conn, corpora[large], analyse, model)
            large_load = time.perf_counter() - started
            pool.shutdown()  # no more analysis: free both cores for the measurements
            indexed = await rebuild_indexes(conn, definitions)
            log(f"100k set loaded in {large_load:.1f}s, HNSW indexes rebuilt in {indexed:.1f}s")
            rows.extend(await latency(retrieval, primitives, corpora[large], vocab, large, baseline))

            # The 10k space again, now sharing its tables with the 100k space.
            caller = Caller(corpora[small].space, Scope.READ, None)
            questions_10k, _ = latency_queries(corpora[small], vocab, QUERIES + WARMUP, seed=small)
            retrieval.legs.plans.clear()
            cached = await plan_cache(db)
            samples, _ = await measure(questions_10k, lambda q: primitives.search(caller, "claim", q, K, "semantic"))
            cached_after = await plan_cache(db)
            rows.append(Row("retrieval", "search_claims semantic k=10 @ 10k claims, 100k space co-hosted",
                            len(samples), *percentiles(samples),
                            baseline_p50_ms=baseline["search_claims semantic k=10"],
                            extra="same 10k space and questions; only other spaces' rows were added; vector plans "
                                  + " ".join(f"{p}:{n}" for p, n in sorted(Counter(retrieval.legs.plans).items()))
                                  + "; " + cache_note(cached, cached_after)))

            rows.extend(await acl_recall(db, retrieval, corpora[large], vocab))
            rows.extend(quality_rows)
            rows[0].extra += (
                f"; in-process use cases, trusted caller; loads {small_load:.0f}s + {large_load:.0f}s, "
                f"HNSW build {indexed:.0f}s; whole benchmark {time.perf_counter() - began:.0f}s")
        finally:
            pool.shutdown(cancel_futures=True)
            await db.close()
            await conn.close()
    return rows
