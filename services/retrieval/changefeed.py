"""The change feed behind ``WatchChanges``: facts added, invalidated and superseded and
claims ingested, replayed after a resume cursor and then followed live.

Ordering. Migration ``0004_change_feed`` gives every change a position as its
transaction commits, under a per-space lock held until the commit is visible, so
positions of a space become visible in increasing order (see the migration for the
argument). The feed reads ``pos > last ORDER BY pos``: commit order, each change once,
never skipping a transaction that committed after the reader moved on.

Visibility. Only the caller's space is read, and a change is delivered only if the caller
may see its object *now*: a claim from a live document whose ACL is empty or shares a
principal with the caller; a fact with at least one supporting claim from such a
document. Anything else is skipped silently (its position is passed, never named).
Deleted or forgotten material therefore emits no events.

Flow. A producer task reads the log (waking on ``NOTIFY testament_changes`` from a
shared per-process listener, polling every ``poll_s`` as a fallback) into a buffer of
at most ``buffer`` changes. When the buffer is full, another visible change is waiting
and the consumer takes nothing for ``stall_s``, the producer stops: the consumer gets
what the buffer holds, then one terminal :class:`Overrun` naming the last delivered
cursor, and the stream ends. A cursor behind the retention horizon gets an immediate
:class:`Overrun`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import logging
import struct
import uuid
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.platform.auth import Caller
from services.platform.db import Database
from services.platform.errors import FieldViolation, ValidationFailed

log = logging.getLogger(__name__)

KINDS = frozenset({"relation", "observation", "claim"})
CHANGES = frozenset({"new", "invalidated", "superseded"})
CHANNEL = "testament_changes"
DEFAULT_BUFFER = 1000
PAGE = 500

EXPLAIN_SLOW = ("the subscriber fell too far behind: {n} changes were waiting undelivered; "
                "resume from last_cursor")
EXPLAIN_RETENTION = "the cursor is older than the change feed retains; re-read state and resubscribe"


@dataclass(frozen=True)
class Change:
    """One change (-> ``ChangeEvent``)."""

    cursor: str
    kind: str  # relation | observation | claim
    change: str  # new | invalidated | superseded
    id: uuid.UUID
    label: str | None  # the fact's label or the claim's text; redact before sending
    at: dt.datetime  # UTC


@dataclass(frozen=True)
class Overrun:
    """Terminal: the feed cannot continue (-> ``ChangeFeedOverrun``)."""

    last_cursor: str  # "" if nothing was delivered on this stream
    explanation: str


# --------------------------------------------------------------------------------------
# cursors
# --------------------------------------------------------------------------------------

_CURSOR_PREFIX = "cf1_"
_CURSOR = struct.Struct(">Q4s")  # position, space tag


def _space_tag(space_id: uuid.UUID) -> bytes:
    return hashlib.sha256(b"testament.change_feed:" + space_id.bytes).digest()[:4]


def encode_cursor(space_id: uuid.UUID, pos: int) -> str:
    raw = _CURSOR.pack(pos, _space_tag(space_id))
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _invalid(value: object) -> ValidationFailed:
    return ValidationFailed([FieldViolation(
        "cursor", "Input should be a cursor this feed handed out to this space", "value_error",
        value if isinstance(value, str) else None)])


def decode_cursor(space_id: uuid.UUID, cursor: str) -> int:
    """The position a cursor stands for. Raises ValidationFailed (field ``cursor``) for
    anything this feed did not hand out to this space."""
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX) or len(cursor) > 64:
        raise _invalid(cursor)
    body = cursor[len(_CURSOR_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise _invalid(cursor) from None
    if len(raw) != _CURSOR.size or encode_cursor(space_id, _CURSOR.unpack(raw)[0]) != cursor:
        raise _invalid(cursor)
    pos, tag = _CURSOR.unpack(raw)
    if tag != _space_tag(space_id) or pos >= 2**63:
        raise _invalid(cursor)
    return int(pos)


def parse_kinds(kinds: Collection[str] | None) -> frozenset[str]:
    """The kinds to send; empty = all. Raises ValidationFailed (field ``kinds``)."""
    wanted = frozenset(kinds or ())
    unknown = sorted(wanted - KINDS)
    if unknown:
        raise ValidationFailed([FieldViolation(
            "kinds", "Input should be 'relation', 'observation' or 'claim'", "enum", unknown[0])])
    return wanted or KINDS


# --------------------------------------------------------------------------------------
# reading the log
# --------------------------------------------------------------------------------------

_VISIBLE_DOC = """d.space_id = $1 AND d.deleted_at IS NULL
                  AND ($5::text[] IS NULL OR d.acl = '{}' OR d.acl && $5::text[])"""

# One window of the space's log after a position, with the retention horizon (always one
# row, even for an empty window). Invisible entries come back with only their position.
_WINDOW = f"""
SELECT h.pruned_through AS horizon, w.pos, w.kind, w.change, w.at,
       v.label IS NOT NULL AS visible, v.object_id, v.label
  FROM change_log_horizon h
  LEFT JOIN LATERAL (
        SELECT l.pos, l.kind, l.change, l.object_id, l.at
          FROM change_log l
         WHERE l.space_id = $1 AND l.pos > $2
         ORDER BY l.pos
         LIMIT $3) w ON true
  LEFT JOIN LATERAL (
        SELECT c.claim_id AS object_id, c.claim_text AS label
          FROM claims c JOIN documents d ON d.doc_id = c.doc_id AND d.space_id = c.space_id
         WHERE w.kind = 'claim' AND w.kind = ANY($4::text[]) AND c.claim_id = w.object_id
           AND c.space_id = $1 AND {_VISIBLE_DOC}
        UNION ALL
        SELECT f.fact_id, f.label
          FROM facts f
         WHERE w.kind <> 'claim' AND w.kind = ANY($4::text[]) AND f.fact_id = w.object_id AND f.space_id = $1
           AND EXISTS (SELECT 1 FROM fact_evidence e JOIN documents d ON d.doc_id = e.doc_id AND d.space_id = e.space_id
                        WHERE e.fact_id = f.fact_id AND e.stance = 'supports' AND {_VISIBLE_DOC})
        LIMIT 1) v ON true
 ORDER BY w.pos
"""

_START = """
SELECT (SELECT pruned_through FROM change_log_horizon) AS horizon,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM change_log_pos) AS issued,
       (SELECT coalesce(max(pos), 0) FROM change_log WHERE space_id = $1) AS tail
"""


async def prune(db: Database, *, older_than: dt.datetime) -> int:
    """Retention: delete entries positioned before ``older_than``; returns how many. A
    cursor behind the new horizon then gets an overrun instead of a silent gap."""
    async with db.transaction() as conn:
        through = await conn.fetchval(
            "SELECT max(pos) FROM change_log WHERE recorded_at < $1", older_than, timeout=db.timeout())
        if through is None:
            return 0
        await conn.execute(
            "UPDATE change_log_horizon SET pruned_through = greatest(pruned_through, $1)", through,
            timeout=db.timeout())
        status = await conn.execute("DELETE FROM change_log WHERE pos <= $1", through, timeout=db.timeout())
    return int(status.split()[-1])


# --------------------------------------------------------------------------------------
# live wake-ups: one LISTEN connection per process (per event loop and DSN)
# --------------------------------------------------------------------------------------

class _Notifier:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.refs = 0
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.task: asyncio.Task[None] | None = None

    def subscribe(self, space_id: uuid.UUID) -> asyncio.Event:
        event = asyncio.Event()
        self.waiters.setdefault(str(space_id), set()).add(event)
        return event

    def unsubscribe(self, space_id: uuid.UUID, event: asyncio.Event) -> None:
        events = self.waiters.get(str(space_id))
        if events is not None:
            events.discard(event)
            if not events:
                del self.waiters[str(space_id)]

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for event in self.waiters.get(payload, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self.waiters.values():
            for event in events:
                event.set()

    async def run(self) -> None:
        backoff = 0.5
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5.0)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._on_notify)
                self._wake_all()  # anything committed while not listening
                backoff = 0.5
                await lost.wait()
                log.warning("change feed listener lost its connection; polling until it is back")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                log.warning("change feed listener cannot connect (%s); polling meanwhile", exc)
            finally:
                if conn is not None and not conn.is_closed():
                    try:
                        async with asyncio.timeout(2.0):
                            await conn.close()
                    except BaseException:  # noqa: BLE001 - closing is best effort, even when cancelled
                        conn.terminate()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)


_notifiers: dict[tuple[int, str], _Notifier] = {}


def _acquire_notifier(dsn: str) -> _Notifier:
    key = (id(asyncio.get_running_loop()), dsn)
    notifier = _notifiers.get(key)
    if notifier is None:
        notifier = _notifiers[key] = _Notifier(dsn)
    notifier.refs += 1
    if notifier.task is None:
        notifier.task = asyncio.create_task(notifier.run(), name="change-feed-listener")
    return notifier


async def _release_notifier(dsn: str, notifier: _Notifier) -> None:
    notifier.refs -= 1
    if notifier.refs > 0:
        return
    _notifiers.pop((id(asyncio.get_running_loop()), dsn), None)
    if notifier.task is not None:
        notifier.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await notifier.task


# --------------------------------------------------------------------------------------
# the feed
# --------------------------------------------------------------------------------------

class _Buffer:
    """At most ``size`` changes between the producer and the consumer, then an end marker."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: deque[Change] = deque()
        self.end: Overrun | BaseException | None = None
        self.readable = asyncio.Event()
        self.room = asyncio.Event()

    async def put(self, item: Change, stall_s: float) -> bool:
        """False when the buffer stayed full for ``stall_s``."""
        while len(self.items) >= self.size:
            self.room.clear()
            try:
                async with asyncio.timeout(stall_s):
                    await self.room.wait()
            except TimeoutError:
                return False
        self.items.append(item)
        self.readable.set()
        return True

    def finish(self, end: Overrun | BaseException) -> None:
        self.end = end
        self.readable.set()

    async def get(self) -> Change | Overrun | BaseException:
        while not self.items:
            if self.end is not None:
                return self.end
            self.readable.clear()
            await self.readable.wait()
        self.room.set()
        return self.items.popleft()


async def _produce(db: Database, caller: Caller, wanted: frozenset[str], after: int, buf: _Buffer,
                   wake: asyncio.Event, *, poll_s: float, stall_s: float) -> None:
    space = caller.space_id
    principals = None if caller.principals is None else sorted(caller.principals)
    kinds = sorted(wanted)
    try:
        while True:
            wake.clear()  # before reading: a NOTIFY during the read triggers another read
            rows = await db.fetch(_WINDOW, space, after, PAGE, kinds, principals)
            if rows[0]["horizon"] > after:
                buf.finish(Overrun("", EXPLAIN_RETENTION))
                return
            for row in rows:
                if row["pos"] is None:  # an empty window
                    break
                if row["visible"]:
                    change = Change(encode_cursor(space, row["pos"]), row["kind"], row["change"],
                                    row["object_id"], row["label"], row["at"].astimezone(dt.UTC))
                    if not await buf.put(change, stall_s):
                        buf.finish(Overrun("", EXPLAIN_SLOW.format(n=buf.size)))
                        return
                after = row["pos"]
            if len(rows) < PAGE:  # caught up: sleep until woken or the next poll
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_s):
                        await wake.wait()
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # surfaced to the consumer, which re-raises it
        buf.finish(exc)


async def watch(db: Database, dsn: str, caller: Caller, *, cursor: str | None,
                kinds: Collection[str] = (), buffer: int = DEFAULT_BUFFER, poll_s: float = 1.0,
                stall_s: float = 1.0) -> AsyncGenerator[Change | Overrun, None]:
    """Changes the caller may see, strictly after ``cursor`` (absent = the live tail), in
    commit order, until the consumer stops iterating or an :class:`Overrun` (always the
    last item). Raises ValidationFailed for a bad ``cursor`` or ``kinds`` before
    yielding anything. Close it (``aclose``/``aclosing``) to stop the producer promptly.
    """
    wanted = parse_kinds(kinds)
    start = None if cursor is None else decode_cursor(caller.space_id, cursor)
    if buffer < 1:
        raise ValueError("buffer must be at least 1")
    row = await db.fetchrow(_START, caller.space_id)
    assert row is not None
    if start is None:
        start = int(row["tail"])
    elif start > row["issued"]:
        raise _invalid(cursor)  # a well-formed cursor this feed never handed out
    if start < row["horizon"]:
        yield Overrun("", EXPLAIN_RETENTION)
        return

    notifier = _acquire_notifier(dsn)
    wake = notifier.subscribe(caller.space_id)
    buf = _Buffer(buffer)
    producer = asyncio.create_task(
        _produce(db, caller, wanted, start, buf, wake, poll_s=poll_s, stall_s=stall_s),
        name="change-feed-producer")
    last = ""
    try:
        while True:
            item = await buf.get()
            if isinstance(item, Overrun):
                yield Overrun(last, item.explanation)
                return
            if isinstance(item, BaseException):
                raise item
            last = item.cursor
            yield item
    finally:
        producer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await producer
        notifier.unsubscribe(caller.space_id, wake)
        await _release_notifier(dsn, notifier)


class ChangeFeed:
    """The servicer's view of the feed: proto messages, labels redacted for the caller."""

    def __init__(self, db: Database, dsn: str, redact: Callable[[str, Caller], str]) -> None:
        self._db = db
        self._dsn = dsn
        self._redact = redact

    async def __call__(self, caller: Caller, cursor: str | None, kinds: Sequence[int]) -> AsyncIterator[Any]:
        from contextlib import aclosing

        from testament.retrieval.v1 import retrieval_pb2 as r

        from services.platform.wire import enum_wire_names, timestamp

        to_wire, _ = enum_wire_names(r.ChangeFeedKind.DESCRIPTOR)
        _, change_value = enum_wire_names(r.ChangeFeedChange.DESCRIPTOR)
        _, kind_value = enum_wire_names(r.ChangeFeedKind.DESCRIPTOR)
        wanted = [to_wire.get(k, "unspecified") for k in kinds]
        async with aclosing(watch(self._db, self._dsn, caller, cursor=cursor, kinds=wanted)) as stream:
            async for item in stream:
                if isinstance(item, Change):
                    event = r.ChangeEvent(cursor=item.cursor, kind=r.ChangeFeedKind.ValueType(kind_value[item.kind]),
                                          change=r.ChangeFeedChange.ValueType(change_value[item.change]),
                                          id=str(item.id), at=timestamp(item.at))
                    if item.label is not None:
                        event.label = self._redact(item.label, caller)
                    yield r.WatchChangesResponse(change=event)
                else:
                    yield r.WatchChangesResponse(overrun=r.ChangeFeedOverrun(last_cursor=item.last_cursor,
                                                                             explanation=item.explanation))
