"""The change feed against a real PostgreSQL: replay, live follow, commit order, resume,
access control, overrun and cursor validation. Rows are written with plain SQL, as the
pipeline would, so the migration's triggers are what is under test."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import pytest
import pytest_asyncio

from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.errors import ValidationFailed
from services.retrieval.changefeed import Change, Overrun, decode_cursor, encode_cursor, prune, watch

QUIET_S = 0.3  # how long "nothing more arrives" is watched for


@pytest_asyncio.fixture(loop_scope="session")
async def db(fresh_dsn: str) -> AsyncIterator[Database]:
    database = await Database.connect(fresh_dsn, max_size=4)
    try:
        yield database
    finally:
        await database.close()


@pytest_asyncio.fixture(loop_scope="session")
async def conn(fresh_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(fresh_dsn)
    try:
        yield c
    finally:
        await c.close()


# --------------------------------------------------------------------------- data


@dataclass
class Space:
    """A space with helpers that write documents, claims and facts as the pipeline does."""

    conn: asyncpg.Connection
    space_id: uuid.UUID
    chunks: dict[uuid.UUID, tuple[uuid.UUID, uuid.UUID, uuid.UUID]] = field(default_factory=dict)
    ordinal: int = 0

    @classmethod
    async def create(cls, conn: asyncpg.Connection) -> Space:
        slug = "s" + uuid.uuid4().hex[:12]
        space_id = await conn.fetchval("INSERT INTO spaces (slug, name) VALUES ($1, $1) RETURNING space_id", slug)
        await conn.execute(
            "INSERT INTO content_objects (space_id, content_hash, byte_size, mime, object_key) "
            "VALUES ($1, $2, 1, 'text/markdown', 'k')", space_id, "0" * 64)
        return cls(conn, space_id)

    def caller(self, principals: set[str] | None = None) -> Caller:
        return Caller(self.space_id, Scope.READ, None if principals is None else frozenset(principals))

    async def document(self, acl: list[str] | None = None) -> uuid.UUID:
        doc, version, rep, chunk = (uuid.uuid4() for _ in range(4))
        c = self.conn
        await c.execute("INSERT INTO documents (doc_id, space_id, source_kind, source_ref, versioning_mode, acl) "
                        "VALUES ($1, $2, 'test', $3, 'snapshot', $4)", doc, self.space_id, str(doc), acl or [])
        await c.execute("INSERT INTO document_versions (version_id, doc_id, space_id, version_no, content_hash) "
                        "VALUES ($1, $2, $3, 1, $4)", version, doc, self.space_id, "0" * 64)
        await c.execute("INSERT INTO representations (representation_id, space_id, version_id, object_key, "
                        "markdown_sha256, char_count, converter) VALUES ($1, $2, $3, 'k', 'x', 10, 't')",
                        rep, self.space_id, version)
        await c.execute("INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, ordinal, "
                        "block_start, block_end, char_start, char_end, token_count, chunk_text, content_hash) "
                        "VALUES ($1, $2, $3, $4, $5, 0, 0, 1, 0, 10, 2, 'text', 'h')",
                        chunk, self.space_id, doc, version, rep)
        self.chunks[doc] = (version, rep, chunk)
        return doc

    async def claim(self, doc: uuid.UUID, text: str = "a claim", conn: asyncpg.Connection | None = None
                    ) -> uuid.UUID:
        version, rep, chunk = self.chunks[doc]
        self.ordinal += 1
        claim_id = uuid.uuid4()
        await (conn or self.conn).execute(
            "INSERT INTO claims (claim_id, space_id, doc_id, version_id, representation_id, chunk_id, ordinal, "
            "claim_text, source_span, char_start, char_end, extractor_version) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, 0, 5, 'test')",
            claim_id, self.space_id, doc, version, rep, chunk, self.ordinal, text)
        return claim_id

    async def fact(self, label: str, supported_by: list[tuple[uuid.UUID, uuid.UUID]],
                   kind: str = "observation") -> uuid.UUID:
        """A fact with its supporting evidence (claim, doc), written in one transaction."""
        fact_id, entity = uuid.uuid4(), uuid.uuid4()
        async with self.conn.transaction():
            await self.conn.execute("INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name) "
                                    "VALUES ($1, $2, 'e', 'e')", entity, self.space_id)
            if kind == "observation":
                await self.conn.execute("INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, statement, "
                                        "label) VALUES ($1, $2, 'observation', $3, $4, $4)",
                                        fact_id, self.space_id, entity, label)
            else:
                await self.conn.execute("INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, predicate, "
                                        "object_entity_id, label) VALUES ($1, $2, 'relation', $3, 'knows', $3, $4)",
                                        fact_id, self.space_id, entity, label)
            for claim_id, doc in supported_by:
                await self.conn.execute("INSERT INTO fact_evidence (fact_id, claim_id, stance, space_id, doc_id) "
                                        "VALUES ($1, $2, 'supports', $3, $4)", fact_id, claim_id, self.space_id, doc)
        return fact_id


# --------------------------------------------------------------------------- reading


class Reader:
    """Drives a feed from a task, the way the gRPC servicer does."""

    def __init__(self, feed: AsyncIterator[Change | Overrun]) -> None:
        self.feed = feed
        self.pending: asyncio.Task[Change | Overrun] | None = None

    def _next(self) -> asyncio.Task[Change | Overrun]:
        if self.pending is None:
            self.pending = asyncio.ensure_future(self.feed.__anext__())
        return self.pending

    async def start(self) -> Reader:
        """Begin reading (the feed takes its starting position) without consuming anything yet."""
        task = self._next()
        await asyncio.wait({task}, timeout=0.1)
        if task.done() and task.exception() is not None:
            self.pending = None
            raise task.exception()  # type: ignore[misc]
        return self

    async def take(self, n: int, within: float = 5.0) -> list[Change | Overrun]:
        out: list[Change | Overrun] = []
        for _ in range(n):
            task = self._next()
            async with asyncio.timeout(within):
                out.append(await asyncio.shield(task))
            self.pending = None
        return out

    async def quiet(self) -> bool:
        """True when nothing more arrives for a while."""
        task = self._next()
        done, _ = await asyncio.wait({task}, timeout=QUIET_S)
        return not done

    async def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await self.pending
        await self.feed.aclose()  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def reading(db: Database, dsn: str, caller: Caller, **kw: object) -> AsyncIterator[Reader]:
    kw.setdefault("cursor", None)
    kw.setdefault("poll_s", 5.0)  # NOTIFY must do the waking in these tests
    reader = await Reader(watch(db, dsn, caller, **kw)).start()  # type: ignore[arg-type]
    try:
        yield reader
    finally:
        await reader.close()


def ids(items: list[Change | Overrun]) -> list[tuple[str, str, uuid.UUID]]:
    return [(i.kind, i.change, i.id) for i in items if isinstance(i, Change)]


# --------------------------------------------------------------------------- tests


async def test_replay_after_a_cursor_then_follow_live(db: Database, conn: asyncpg.Connection,
                                                      fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    caller = s.caller()
    async with reading(db, fresh_dsn, caller) as r:
        first = await s.claim(doc, "first")
        (c1,) = await r.take(1)
        assert isinstance(c1, Change) and (c1.kind, c1.change, c1.id, c1.label) == ("claim", "new", first, "first")
        assert c1.at.tzinfo is not None and c1.at.utcoffset() == dt.timedelta(0)

    second = await s.claim(doc, "second")
    old = await s.fact("Ravi owns the exporter", [(second, doc)])
    new = await s.fact("Dana owns the exporter", [(second, doc)], kind="relation")
    await conn.execute("UPDATE facts SET superseded_by = $2 WHERE fact_id = $1", old, new)
    await conn.execute("UPDATE facts SET invalidated_at = clock_timestamp() WHERE fact_id = $1", new)
    await conn.execute("UPDATE facts SET confidence = 0.5 WHERE fact_id = $1", new)  # not a change

    expected = [("claim", "new", second), ("observation", "new", old), ("relation", "new", new),
                ("observation", "superseded", old), ("relation", "invalidated", new)]
    async with reading(db, fresh_dsn, caller, cursor=c1.cursor) as r:
        replay = await r.take(5)
        assert ids(replay) == expected
        assert replay[1].label == "Ravi owns the exporter"  # type: ignore[union-attr]
        assert await r.quiet()
        third = await s.claim(doc, "third")  # then live
        assert ids(await r.take(1)) == [("claim", "new", third)]
        assert await r.quiet()

    # A kinds filter skips the rest; cursors still resume exactly.
    async with reading(db, fresh_dsn, caller, cursor=c1.cursor, kinds={"relation"}) as r:
        assert ids(await r.take(2)) == [("relation", "new", new), ("relation", "invalidated", new)]
        assert await r.quiet()


async def test_out_of_sequence_commits_arrive_once_in_commit_order(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    other = await asyncpg.connect(fresh_dsn)
    try:
        async with reading(db, fresh_dsn, s.caller()) as r:
            # The transaction that writes first commits last.
            early = other.transaction()
            await early.start()
            held = await s.claim(doc, "held", conn=other)
            quick = await s.claim(doc, "quick")  # its own transaction, committed now
            assert ids(await r.take(1)) == [("claim", "new", quick)]
            assert await r.quiet()  # the open transaction is not visible, and not skipped later:
            await early.commit()
            assert ids(await r.take(1)) == [("claim", "new", held)]
            assert await r.quiet()

            # A transaction that took its position before committing (its deferred triggers
            # ran early) holds back later writers of the space until it is visible.
            first = other.transaction()
            await first.start()
            one = await s.claim(doc, "one", conn=other)
            await other.execute("SET CONSTRAINTS ALL IMMEDIATE")  # position assigned, lock held
            two_task = asyncio.ensure_future(s.claim(doc, "two"))
            await asyncio.sleep(0.3)
            assert not two_task.done()  # its commit waits for the position lock
            assert await r.quiet()
            await first.commit()
            async with asyncio.timeout(5):
                two = await two_task
            assert ids(await r.take(2)) == [("claim", "new", one), ("claim", "new", two)]
            assert await r.quiet()
    finally:
        await other.close()

    # Replaying the whole stretch gives the same order.
    async with reading(db, fresh_dsn, s.caller(), cursor=encode_cursor(s.space_id, 0)) as r:
        assert [i[2] for i in ids(await r.take(4))] == [quick, held, one, two]
        assert await r.quiet()


async def test_resuming_from_any_cursor_delivers_nothing_twice(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    start = encode_cursor(s.space_id, 0)
    made = [await s.claim(doc, f"c{i}") for i in range(6)]
    async with reading(db, fresh_dsn, s.caller(), cursor=start) as r:
        seen = await r.take(6)
    assert [c.id for c in seen] == made  # type: ignore[union-attr]
    for i, item in enumerate(seen):
        assert isinstance(item, Change)
        async with reading(db, fresh_dsn, s.caller(), cursor=item.cursor) as r:
            rest = await r.take(5 - i) if i < 5 else []
            assert [c.id for c in rest] == made[i + 1:]  # type: ignore[union-attr]
            assert await r.quiet()


async def test_space_and_acl_confinement(db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    s = await Space.create(conn)
    t = await Space.create(conn)
    public, hr, gone = await s.document([]), await s.document(["hr", "exec"]), await s.document()
    elsewhere = await t.document()
    start = encode_cursor(s.space_id, 0)

    c_public = await s.claim(public, "public")
    c_hr = await s.claim(hr, "salary")
    c_gone = await s.claim(gone, "forgotten")
    await t.claim(elsewhere, "other tenant")
    f_hr = await s.fact("hr only", [(c_hr, hr)])
    f_both = await s.fact("both", [(c_hr, hr), (c_public, public)])
    f_gone = await s.fact("deleted support", [(c_gone, gone)])
    await conn.execute("UPDATE documents SET deleted_at = now() WHERE doc_id = $1", gone)
    await conn.execute("UPDATE facts SET invalidated_at = now() WHERE fact_id = ANY($1)", [f_hr, f_both])
    assert f_gone

    async def seen(caller: Caller, cursor: str) -> list[tuple[str, str, uuid.UUID]]:
        async with reading(db, fresh_dsn, caller, cursor=cursor) as r:
            out: list[Change | Overrun] = []
            while not await r.quiet():
                out += await r.take(1)
            return ids(out)

    assert await seen(s.caller({"eng"}), start) == [
        ("claim", "new", c_public), ("observation", "new", f_both), ("observation", "invalidated", f_both)]
    assert await seen(s.caller({"hr"}), start) == [
        ("claim", "new", c_public), ("claim", "new", c_hr), ("observation", "new", f_hr),
        ("observation", "new", f_both), ("observation", "invalidated", f_hr), ("observation", "invalidated", f_both)]
    trusted = await seen(s.caller(None), start)  # sees every live document of its space only
    assert [i[2] for i in trusted] == [c_public, c_hr, f_hr, f_both, f_hr, f_both]
    assert await seen(t.caller(None), encode_cursor(t.space_id, 0)) != []
    assert all(i[2] not in (c_public, c_hr, c_gone) for i in await seen(t.caller(None), encode_cursor(t.space_id, 0)))
    with pytest.raises(ValidationFailed):  # a cursor of another space is refused, not honoured
        await seen(t.caller(None), start)


async def test_a_consumer_that_does_not_read_gets_an_overrun_naming_its_last_cursor(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    async with reading(db, fresh_dsn, s.caller(), buffer=3, stall_s=0.2) as r:
        async with conn.transaction():
            made = [await s.claim(doc, f"c{i}") for i in range(8)]
        (first,) = await r.take(1)  # then the consumer stops reading
        await asyncio.sleep(0.6)
        items = await r.take(4)
        assert [i.id for i in items[:3]] == made[1:4]  # type: ignore[union-attr]
        overrun = items[3]
        assert isinstance(overrun, Overrun)
        assert overrun.last_cursor == items[2].cursor  # type: ignore[union-attr]
        assert "behind" in overrun.explanation
        with pytest.raises(StopAsyncIteration):
            await r.take(1)
    assert isinstance(first, Change) and first.id == made[0]
    async with reading(db, fresh_dsn, s.caller(), cursor=overrun.last_cursor) as r:
        assert [i.id for i in await r.take(4)] == made[4:]  # type: ignore[union-attr]
        assert await r.quiet()


async def test_a_slow_but_reading_consumer_is_not_cut_off(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    async with conn.transaction():
        made = [await s.claim(doc, f"c{i}") for i in range(12)]
    async with reading(db, fresh_dsn, s.caller(), cursor=encode_cursor(s.space_id, 0), buffer=2, stall_s=1.0) as r:
        got = []
        for _ in range(12):
            got += await r.take(1)
            await asyncio.sleep(0.01)
        assert [i.id for i in got] == made  # type: ignore[union-attr]


async def test_invalid_cursors_and_kinds_are_refused(db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    await s.claim(doc)
    issued = await conn.fetchval("SELECT last_value FROM change_log_pos")
    for bad in ["", "garbage", "cf1_!!!!", "cf1_" + "A" * 16, encode_cursor(uuid.uuid4(), 1),
                encode_cursor(s.space_id, issued + 1000), encode_cursor(s.space_id, 1) + "x"]:
        with pytest.raises(ValidationFailed) as err:
            async with reading(db, fresh_dsn, s.caller(), cursor=bad):
                pass
        assert [v.field for v in err.value.violations] == ["cursor"], bad
    with pytest.raises(ValidationFailed) as err:
        async with reading(db, fresh_dsn, s.caller(), kinds={"page"}):
            pass
    assert [v.field for v in err.value.violations] == ["kinds"]
    assert decode_cursor(s.space_id, encode_cursor(s.space_id, 42)) == 42


async def test_a_cursor_behind_retention_gets_an_overrun(db: Database, conn: asyncpg.Connection,
                                                         fresh_dsn: str) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    await s.claim(doc)
    old = encode_cursor(s.space_id, 0)
    assert await prune(db, older_than=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)) >= 1
    async with reading(db, fresh_dsn, s.caller(), cursor=old) as r:
        (item,) = await r.take(1)
        assert isinstance(item, Overrun) and item.last_cursor == "" and "retain" in item.explanation
    kept = await s.claim(doc, "after pruning")
    tail = await conn.fetchval("SELECT max(pos) FROM change_log WHERE space_id = $1", s.space_id)
    async with reading(db, fresh_dsn, s.caller(), cursor=encode_cursor(s.space_id, tail - 1)) as r:
        assert [i.id for i in await r.take(1)] == [kept]  # type: ignore[union-attr]


async def test_without_notifications_the_feed_polls(db: Database, conn: asyncpg.Connection) -> None:
    s = await Space.create(conn)
    doc = await s.document()
    nowhere = "postgresql://postgres@127.0.0.1:9/none"  # the listener cannot connect
    async with reading(db, nowhere, s.caller(), poll_s=0.2) as r:
        made = await s.claim(doc)
        assert [i.id for i in await r.take(1, within=3.0)] == [made]  # type: ignore[union-attr]
