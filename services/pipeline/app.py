"""Pipeline use cases: what each stage does, and the worker that runs claimed units.

A stage reads its inputs, does its work (conversion, parsing, model calls) outside any
transaction, and returns the writes to commit; the queue commits them together with the
unit's success and what comes next. Adapters are injected; nothing here imports a driver.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.pipeline.domain.claims import ClaimProvider, ExtractionInput, Passage
from services.pipeline.domain.facts import ParseRelationProvider, RelationProvider
from services.pipeline.domain.grounding import ground
from services.pipeline.domain.work import SPACE_WIDE, StageFailure, chunk_ordinal, generation_suffix
from services.platform import telemetry
from services.platform.ledger import is_model_call
from services.platform.structure import (
    build_sections,
    chunk,
    embedding_inputs,
    normalized_hash,
    parse_blocks,
    reuse_plan,
)

if TYPE_CHECKING:
    from services.pipeline.adapters.converters import Converter
    from services.pipeline.adapters.facts_writer import FactsWriter
    from services.pipeline.adapters.queue import Claimed, PgQueue, Wakeup
    from services.pipeline.adapters.store import PgStageStore, VersionSource
    from services.platform.embeddings import EmbeddingProvider
    from services.platform.objectstore import ObjectStore

Write = Callable[[Any], Awaitable[Any]]

# The unit a worker task is running, so provider calls land in the cost ledger with it.
current_unit: contextvars.ContextVar[Claimed | None] = contextvars.ContextVar("current_unit", default=None)


@dataclass(frozen=True)
class Done:
    write: Write | None = None
    skipped_note: str | None = None


@dataclass(frozen=True)
class Park:
    """The unit cannot run yet (no conversion route): back to pending, no attempt spent."""

    reason: str


def representation_key(sha256: str) -> str:
    return f"representations/sha256/{sha256[:2]}/{sha256}.md"


class Stages:
    def __init__(self, store: PgStageStore, objects: ObjectStore, converters: Mapping[str, Converter],
                 embeddings: EmbeddingProvider, claims: ClaimProvider, facts: FactsWriter, *,
                 chunk_token_budget: int, embed_batch_size: int, confidence_floor: float = 0.75,
                 redact_ingest: Callable[[str], str] | None = None,
                 relations: RelationProvider | None = None) -> None:
        self.facts = facts
        self.relations = relations or ParseRelationProvider()
        self.redact_ingest = redact_ingest
        self.confidence_floor = confidence_floor
        self.store = store
        self.objects = objects
        self.converters = converters
        self.embeddings = embeddings
        self.claims = claims
        self.chunk_token_budget = chunk_token_budget
        self.embed_batch_size = embed_batch_size
        self._markdown: OrderedDict[str, str] = OrderedDict()

    async def run(self, unit: Claimed) -> Done | Park:
        handler = getattr(self, f"_{unit.stage}")
        source = await self.store.version(unit.version_id)
        return await handler(unit, source)

    async def _markdown_of(self, source: VersionSource) -> str:
        key = source.representation_key
        if key is None:
            raise StageFailure("unknown", "the version has no representation yet", permanent=False)
        if key not in self._markdown:
            self._markdown[key] = (await self.objects.get_bytes(key)).decode("utf-8")
            if len(self._markdown) > 32:
                self._markdown.popitem(last=False)
        self._markdown.move_to_end(key)
        return self._markdown[key]

    # --- stages ------------------------------------------------------------------------

    async def _convert(self, unit: Claimed, source: VersionSource) -> Done | Park:
        from services.pipeline.adapters.converters import ConversionFailed

        converter = self.converters.get(source.mime)
        if converter is None:
            return Park("no_route")
        data = await self.objects.get_bytes(source.object_key)
        try:
            markdown = await converter.convert(data, source.mime, source.filename or "document")
        except ConversionFailed as exc:
            raise StageFailure("extraction_failed", f"{exc.reason}: {exc.detail}", permanent=exc.permanent) from exc
        if self.redact_ingest is not None:  # apply_at ingest: what is stored never held the value
            markdown = self.redact_ingest(markdown)
        encoded = markdown.encode("utf-8")
        sha = hashlib.sha256(encoded).hexdigest()
        key = representation_key(sha)
        if not await self.objects.exists(key):
            await self.objects.put_bytes(key, encoded, content_type="text/markdown")

        async def write(conn: Any) -> None:
            await self.store.save_representation(conn, source, key, sha, len(markdown), converter.name)

        return Done(write)

    async def _structure(self, unit: Claimed, source: VersionSource) -> Done:
        markdown = await self._markdown_of(source)
        sections = build_sections(parse_blocks(markdown), markdown)

        async def write(conn: Any) -> None:
            await self.store.save_sections(conn, source, sections)

        return Done(write)

    async def _chunk(self, unit: Claimed, source: VersionSource) -> Done:
        markdown = await self._markdown_of(source)
        blocks = parse_blocks(markdown)
        sections = build_sections(blocks, markdown)
        chunks = chunk(blocks, sections, markdown=markdown, token_budget=self.chunk_token_budget)
        old = await self.store.previous_chunks(source)
        plan = reuse_plan([(str(o.chunk_id), o.content_hash) for o in old], chunks)
        reuse = [old[i] if i is not None else None for i in plan]

        async def write(conn: Any) -> None:
            await self.store.save_chunks(conn, source, chunks, sections, reuse)

        return Done(write)

    async def _embed(self, unit: Claimed, source: VersionSource, table: str) -> Done:
        pending = await self.store.unembedded(table, source.version_id)
        fixed = await self.store.space_model(source.space_id)
        self._check_model(fixed)
        owned = [item for i, text in pending for item in embedding_inputs(table, i, text)]
        embedded: list[list[float]] = []
        for start in range(0, len(owned), self.embed_batch_size):
            texts = [text for _, _, text in owned[start:start + self.embed_batch_size]]
            embedded.extend(await self._call_embeddings(unit, source, texts))
        vectors = [(i, v) for (i, part, _), v in zip(owned, embedded, strict=True) if part is None]
        units = [(i, part, v) for (i, part, _), v in zip(owned, embedded, strict=True) if part is not None]

        async def write(conn: Any) -> None:
            if vectors:
                self._check_model(await self.store.fix_space_model(conn, source.space_id, self.embeddings.model,
                                                                   self.embeddings.dimension))
                await self.store.save_vectors(conn, table, vectors, self.embeddings.model)
                if table == "chunks":
                    await self.store.save_units(conn, source.space_id, units, self.embeddings.model)

        return Done(write)

    def _check_model(self, fixed: tuple[str, int] | None) -> None:
        if fixed is not None and fixed != (self.embeddings.model, self.embeddings.dimension):
            from services.platform.embeddings import provider_hint

            raise StageFailure(
                "provider_rejected",
                f"this space embeds with {fixed[0]} ({fixed[1]} dimensions); the configured model "
                f"{self.embeddings.model} ({self.embeddings.dimension}) is refused: re-embed the space with "
                f"`testament ops reembed`, then replay these units, or configure {fixed[0]} again "
                f"({provider_hint(fixed[0])})",
                permanent=True,
            )

    async def _call_embeddings(self, unit: Claimed, source: VersionSource, texts: list[str]) -> list[list[float]]:
        from services.platform.embeddings import EmbeddingUnavailable

        started = time.perf_counter()
        outcome = "ok"
        try:
            return await self.embeddings.embed(texts)
        except EmbeddingUnavailable as exc:
            outcome = getattr(exc, "outcome", "error")
            raise StageFailure("provider_unavailable" if exc.retryable else "provider_rejected", str(exc),
                               permanent=not exc.retryable, retry_after_s=exc.retry_after_s) from exc
        finally:
            if is_model_call(self.embeddings.model):
                await self.store.record_call(
                    space_id=source.space_id, work_id=unit.work_id, stage=unit.stage, attempt=unit.attempts,
                    provider="embeddings", model=self.embeddings.model, tokens_in=None, tokens_out=None,
                    latency_ms=(time.perf_counter() - started) * 1000, outcome=outcome)

    async def _embed_chunk(self, unit: Claimed, source: VersionSource) -> Done:
        return await self._embed(unit, source, "chunks")

    async def _embed_claim(self, unit: Claimed, source: VersionSource) -> Done:
        return await self._embed(unit, source, "claims")

    def _input(self, source: VersionSource, markdown: str, row: Any) -> ExtractionInput:
        return ExtractionInput(
            document=markdown,
            passage=Passage(str(row.chunk_id), row.char_start, row.char_end),
            asserted_at=source.source_modified_at or source.ingested_at,
            title=source.title,
        )

    async def _extract_claims(self, unit: Claimed, source: VersionSource) -> Done:
        from services.pipeline.adapters.store import draft_payload

        ordinal = chunk_ordinal(unit.unit_key)
        if ordinal is None:
            return Done()  # a version without passages
        row = await self.store.chunk(source.version_id, ordinal)
        if row is None:
            raise StageFailure("chunk_set_changed", f"chunk {unit.unit_key} is gone", permanent=True)
        if row.reused_from is not None and not generation_suffix(unit.unit_key):
            payload: dict[str, Any] = {"reused_from": str(row.reused_from)}
            provider = "reuse"
        else:
            markdown = await self._markdown_of(source)
            drafts, decisions, kept, calls = await self._read_passage(unit, source, markdown, row)
            payload, provider = draft_payload(drafts, decisions), self.claims.name
            payload["reused_claims"] = [str(c) for c in kept]
            payload["provider_calls"] = calls

        async def write(conn: Any) -> None:
            await self.store.save_drafts(conn, source, row.chunk_id, provider, payload)

        return Done(write)

    async def _read_passage(self, unit: Claimed, source: VersionSource, markdown: str, row: Any
                            ) -> tuple[list[Any], list[Any], list[uuid.UUID], int]:
        """Claims of a changed passage. When an earlier version exists, only the blocks whose
        text changed go to the provider; unchanged paragraphs keep their claims."""
        earlier = ({} if generation_suffix(unit.unit_key)
                   else await self.store.previous_claims_by_block(source, self.claims.version))
        if not earlier:
            drafts, decisions = await self.claims.extract(self._input(source, markdown, row))
            return drafts, decisions, [], 1
        drafts, decisions, kept, calls = [], [], [], 0
        for block in parse_blocks(row.chunk_text):
            known = earlier.get(normalized_hash(block.text))
            if known is not None:
                kept.extend(known)
                continue
            if block.kind == "heading":
                continue
            start = row.char_start + block.char_start
            item = ExtractionInput(markdown, Passage(str(row.chunk_id), start, start + len(block.text)),
                                   source.source_modified_at or source.ingested_at, source.title)
            calls += 1
            found, why = await self.claims.extract(item)
            drafts.extend(found)
            decisions.extend(why)
        return drafts, decisions, kept, calls

    async def _ground_claims(self, unit: Claimed, source: VersionSource) -> Done:
        from services.pipeline.adapters.store import load_payload

        ordinal = chunk_ordinal(unit.unit_key)
        if ordinal is None:
            return Done()
        row = await self.store.chunk(source.version_id, ordinal)
        stored = await self.store.drafts(row.chunk_id) if row else None
        if row is None or stored is None:
            raise StageFailure("chunk_set_changed", f"drafts of chunk {unit.unit_key} are gone", permanent=True)
        provider, payload = stored
        if "reused_from" in payload:
            old = uuid.UUID(payload["reused_from"])

            async def reuse(conn: Any) -> None:
                await self.store.reuse_claims(conn, source, row.chunk_id, old)

            return Done(reuse)
        markdown = await self._markdown_of(source)
        drafts, decisions = load_payload(payload)
        kept, all_decisions = ground(self._input(source, markdown, row), drafts, decisions)
        asserted = source.source_modified_at or source.ingested_at
        version = getattr(self.claims, "version", provider)

        reused = [uuid.UUID(c) for c in payload.get("reused_claims", [])]

        async def write(conn: Any) -> None:
            await self.store.save_claims(conn, source, row.chunk_id, kept, all_decisions, extractor=version,
                                         asserted_at=asserted)
            if reused:
                await self.store.attach_claims(conn, source, row.chunk_id, reused)

        return Done(write)


    # --- facts (Pipeline part 2) --------------------------------------------------------

    async def _normalize_relations(self, unit: Claimed, source: VersionSource) -> Done:
        # Names the memory does not know yet are embedded with their claim (outside the
        # transaction) so resolution can compare them with entity profiles (T3).
        drafted = await self.facts.drafts(source, self.relations)
        self._check_model(await self.store.space_model(source.space_id))
        texts = await self.facts.context_texts(source)
        vectors = dict(zip(texts, await self._call_embeddings(unit, source, list(texts.values())),
                           strict=True)) if texts else {}

        async def write(conn: Any) -> None:
            await self.facts.normalize(conn, source, drafted, context_vector=vectors, floor=self.confidence_floor)

        return Done(write)

    async def _adjudicate_observations(self, unit: Claimed, source: VersionSource) -> Done:
        async def write(conn: Any) -> None:
            await self.facts.adjudicate(conn, source, floor=self.confidence_floor)

        return Done(write)

    async def _adjudicate_supersession(self, unit: Claimed, source: VersionSource) -> Done:
        async def write(conn: Any) -> None:
            await self.facts.settle_counts(conn, source)

        return Done(write)

    async def _reconcile(self, unit: Claimed, source: VersionSource) -> Done:
        rerun = bool(generation_suffix(unit.unit_key))
        markdown = await self._markdown_of(source)

        async def write(conn: Any) -> None:
            await self.facts.reconcile(conn, source, reextracted_by=self.claims.version if rerun else None)
            await self.facts.link_citations(conn, source, markdown)  # what this document links to or cites

        return Done(write)

    async def _label_relation(self, unit: Claimed, source: VersionSource) -> Done:
        self._check_model(await self.store.space_model(source.space_id))
        labels = await self.facts.labels_to_embed(source, self.embeddings.model)
        fact_vectors = (await self._call_embeddings(unit, source, [f["label"] for f in labels.facts])
                        if labels.facts else [])
        entity_ids = list(labels.profiles)
        profile_vectors = (await self._call_embeddings(unit, source, [labels.profiles[e] for e in entity_ids])
                           if entity_ids else [])

        by_entity = dict(zip(entity_ids, profile_vectors, strict=True))
        neighbours = await self.facts.neighbourhood(source, labels, by_entity)

        async def write(conn: Any) -> None:
            await self.facts.save_labels(conn, source, labels, fact_vectors, by_entity, self.embeddings.model,
                                         neighbours)

        return Done(write)


class Worker:
    """Claims units and runs up to ``concurrency`` of them at once until told to stop, and
    as many again of the space-wide stages: those queue on their space's lock (one at a
    time per space), and a unit waiting there must not hold a slot that other work could use."""

    def __init__(self, queue: PgQueue, stages: Stages, wakeup: Wakeup, *, concurrency: int, poll_s: float) -> None:
        self.queue = queue
        self.stages = stages
        self.wakeup = wakeup
        self.concurrency = concurrency
        self.poll_s = poll_s
        self._inflight: set[asyncio.Task[None]] = set()
        self._wide: set[asyncio.Task[None]] = set()  # the space-wide ones among them

    async def run(self, stop: asyncio.Event) -> None:
        await self.wakeup.start()
        try:
            while not stop.is_set():
                wide_free = self.concurrency - len(self._wide)
                free = self.concurrency - (len(self._inflight) - len(self._wide))
                claimed = await self._claim(free, wide_free) if free > 0 or wide_free > 0 else []
                for unit in claimed:
                    task = asyncio.create_task(self._execute(unit))
                    self._inflight.add(task)
                    if unit.stage in SPACE_WIDE:
                        self._wide.add(task)
                    task.add_done_callback(self._finished)
                # Sleep until new work is announced, a slot frees up, the poll interval passes or we stop.
                stopping = asyncio.create_task(stop.wait())
                waking = asyncio.create_task(self.wakeup.wait(self.poll_s))
                await asyncio.wait({stopping, waking}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                waking.cancel()
        finally:
            if self._inflight:
                await asyncio.wait(self._inflight)
            await self.wakeup.close()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._wide.discard(task)
        self.wakeup.event.set()  # a slot is free

    async def _claim(self, free: int, wide_free: int) -> list[Claimed]:
        try:
            return await self.queue.claim(free, space_wide=wide_free)
        except Exception as exc:  # noqa: BLE001 - the database may be briefly away: retry later
            telemetry.access_log("worker.claim_failed", error=repr(exc))
            return []

    async def _execute(self, unit: Claimed) -> None:
        from services.pipeline.adapters.queue import LeaseLost

        started = time.perf_counter()
        current_unit.set(unit)
        heartbeat = asyncio.create_task(self._heartbeat(unit))
        outcome = "succeeded"
        error: str | None = None
        try:
            result = await self.stages.run(unit)
            if isinstance(result, Park):
                await self.queue.park(unit, result.reason)
                outcome = f"{result.reason}_parked"
            else:
                outcome = await self.queue.complete(unit, result.write, skipped_note=result.skipped_note)
        except LeaseLost as exc:
            outcome, error = "lease_lost", str(exc)
        except StageFailure as exc:
            error = str(exc)
            outcome = await self._fail(unit, exc.reason, error, exc.permanent, exc.retry_after_s)
        except Exception as exc:  # noqa: BLE001 - any defect is retried, then dead-lettered
            error = f"{type(exc).__name__}: {exc}"
            outcome = await self._fail(unit, "unknown", error, False, None)
        finally:
            heartbeat.cancel()
        telemetry.access_log(
            "worker.run", stage=unit.stage, unit=unit.unit_key, version_id=str(unit.version_id),
            attempt=unit.attempts, outcome=outcome, duration_ms=round((time.perf_counter() - started) * 1000, 2),
            **({"error": error} if error else {}),
        )

    async def _fail(self, unit: Claimed, reason: str, error: str, permanent: bool, retry_after: float | None) -> str:
        from services.pipeline.adapters.queue import LeaseLost

        try:
            return await self.queue.fail(unit, reason=reason, error=error, permanent=permanent,
                                         retry_after_s=retry_after)
        except LeaseLost:
            return "lease_lost"

    async def _heartbeat(self, unit: Claimed) -> None:
        interval = max(0.5, self.queue.lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                if not await self.queue.renew(unit):
                    return
            except Exception:  # noqa: BLE001 - a missed renewal only risks a re-run
                continue
