"""Reads from a streaming standby within the staleness bound (TESTAMENT_READ_DATABASE_URL).

A primary and a hot standby both come from the embedded PostgreSQL on this machine: the
standby is a `pg_basebackup -R` copy that streams the primary's WAL. Replay is paused with
`pg_wal_replay_pause()` to make the standby lag for real.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from testament.graph.v1 import graph_pb2, graph_pb2_grpc

from services.platform.db import Database
from services.platform.embedded_pg import EmbeddedPostgres, bin_dir
from services.platform.migrations import migrate
from services.platform.replica import ReplicaMisconfigured, RoutedReads, check_standby, fresh_as_of
from tests.support import REPO, run_service, service_env


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedPostgres, EmbeddedPostgres]]:
    root = tmp_path_factory.mktemp("replication")
    primary = EmbeddedPostgres(root / "primary", fast=True)
    primary.start()
    standby: EmbeddedPostgres | None = None
    try:
        asyncio.run(migrate(primary.dsn))
        subprocess.run([str(bin_dir() / "pg_basebackup"), "-h", primary.host, "-p", str(primary.port),
                        "-U", "postgres", "-D", str(root / "standby"), "-R", "-X", "stream", "--no-sync",
                        "--checkpoint=fast"],
                       check=True, capture_output=True, timeout=120)
        standby = EmbeddedPostgres(root / "standby")
        standby.start()
        yield primary, standby
    finally:
        if standby is not None:
            standby.stop()
        primary.stop()


async def _pair(servers: tuple[EmbeddedPostgres, EmbeddedPostgres], max_lag_s: float) -> RoutedReads:
    primary, standby = servers
    reads = RoutedReads(await Database.connect(primary.dsn), await Database.connect(standby.dsn),
                        max_lag_s=max_lag_s, probe_s=0.1)
    await check_standby(reads.primary, reads.replica)
    await reads.start()
    # start() takes two probes back to back; under load (or after a test that paused and
    # resumed replay) the standby may not have replayed their positions yet, and until it has
    # there is no replay point and every read safely goes to the primary. Wait for the first.

    async def fresh() -> bool:
        return reads.fresh()
    await _until(fresh)
    return reads


async def _add_space(reads: RoutedReads, slug: str) -> None:
    await reads.primary.execute("INSERT INTO spaces (slug, name) VALUES ($1, $1)", slug)


async def _until(predicate, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


async def test_reads_go_to_a_fresh_replica_and_see_the_primarys_writes(servers) -> None:  # type: ignore[no-untyped-def]
    reads = await _pair(servers, max_lag_s=5.0)
    try:
        assert reads.fresh()
        before = reads.routed["replica"]
        await _add_space(reads, "replicated-1")

        async def visible() -> bool:
            return await reads.fetchval("SELECT count(*) FROM spaces WHERE slug = 'replicated-1'") == 1
        await _until(visible)
        assert reads.routed["replica"] > before
        assert await reads.replica.fetchval("SELECT pg_is_in_recovery()")
    finally:
        await reads.close()
        await reads.primary.close()


async def test_a_replica_beyond_the_bound_is_not_read_and_reads_see_every_write(servers) -> None:  # type: ignore[no-untyped-def]
    reads = await _pair(servers, max_lag_s=0.5)
    try:
        await reads.replica.execute("SELECT pg_wal_replay_pause()")
        await _add_space(reads, "while-paused")

        async def stale() -> bool:
            return not reads.fresh()
        await _until(stale)
        # the standby really is behind, and a read through the router still sees the write
        assert await reads.replica.fetchval("SELECT count(*) FROM spaces WHERE slug = 'while-paused'") == 0
        assert await reads.fetchval("SELECT count(*) FROM spaces WHERE slug = 'while-paused'") == 1
        assert reads.target() is reads.primary

        await reads.replica.execute("SELECT pg_wal_replay_resume()")

        async def fresh_again() -> bool:
            return reads.fresh()
        await _until(fresh_again)
        assert reads.target() is reads.replica
        assert await reads.fetchval("SELECT count(*) FROM spaces WHERE slug = 'while-paused'") == 1
    finally:
        await reads.replica.execute("SELECT pg_wal_replay_resume()")
        await reads.close()
        await reads.primary.close()


async def test_a_belief_time_later_than_the_replay_point_reads_the_primary(servers) -> None:  # type: ignore[no-untyped-def]
    reads = await _pair(servers, max_lag_s=60.0)
    try:
        assert reads.replay_point is not None and reads.fresh()
        with fresh_as_of(reads.replay_point - dt.timedelta(seconds=1)):
            assert reads.target() is reads.replica
        with fresh_as_of(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)):
            assert reads.target() is reads.primary
        with fresh_as_of("not a time"):  # left to the caller's own validation
            assert reads.target() is reads.replica
        # writes never go to the replica
        async with reads.transaction() as conn:
            assert not await conn.fetchval("SELECT pg_is_in_recovery()")
    finally:
        await reads.close()
        await reads.primary.close()


async def test_a_replica_url_that_names_the_primary_is_refused(servers) -> None:  # type: ignore[no-untyped-def]
    primary, _ = servers
    a, b = await Database.connect(primary.dsn), await Database.connect(primary.dsn)
    try:
        with pytest.raises(ReplicaMisconfigured, match="points at a primary"):
            await check_standby(a, b)
    finally:
        await a.close()
        await b.close()


def test_a_service_refuses_to_start_with_the_primary_as_its_replica(servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    primary, _ = servers
    for replica_url, said in [(primary.dsn, "is TESTAMENT_DATABASE_URL"),
                              (primary.dsn + "?application_name=sneaky", "points at a primary")]:
        proc = subprocess.run([sys.executable, "-m", "services.graph"], cwd=REPO, capture_output=True, text=True,
                              timeout=60, env=service_env(primary.dsn, TESTAMENT_READ_DATABASE_URL=replica_url,
                                                          TESTAMENT_GRAPH_PORT="0"))
        assert proc.returncode == 1
        assert "TESTAMENT_READ_DATABASE_URL" in proc.stderr and said in proc.stderr, proc.stderr


def test_graph_retrieval_and_queryspace_read_from_the_standby(servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    primary, standby = servers
    for name in ("graph", "retrieval", "queryspace"):
        with run_service(name, primary.dsn, tmp_path, TESTAMENT_READ_DATABASE_URL=standby.dsn) as proc:
            if name == "graph":
                with grpc.insecure_channel(proc.address) as channel:
                    reply = graph_pb2_grpc.GraphServiceStub(channel).Neighborhood(graph_pb2.NeighborhoodRequest(
                        entity_id="00000000-0000-4000-8000-000000000000"), timeout=10)
                    assert reply.envelope.negative.explanation  # no such entity, said in the envelope
            apps = asyncio.run(_applications(standby.dsn))
            assert f"testament-{name}-reads" in apps, apps


async def _applications(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {r[0] for r in await conn.fetch("SELECT DISTINCT application_name FROM pg_stat_activity")}
    finally:
        await conn.close()


def test_the_settings_name_the_replica_and_its_bound() -> None:
    from services.platform.settings import load_settings

    with pytest.raises(SystemExit):
        load_settings(read_database_url="mysql://x")
    assert load_settings(read_database_url="postgresql://r/db", replica_max_lag_s=2).replica_max_lag_s == 2


async def test_the_query_space_runs_on_the_replica_and_a_later_belief_time_on_the_primary(servers) -> None:  # type: ignore[no-untyped-def]
    from services.platform.auth import Caller, Scope
    from services.platform.embeddings import HashEmbeddings
    from services.queryspace.adapters import PgQuerySpace, PgSavedQueries
    from services.queryspace.app import QuerySpace, Request
    from services.queryspace.functions import Evaluator
    from services.retrieval.adapters import SearchLegs

    reads = await _pair(servers, max_lag_s=60.0)
    try:
        service = QuerySpace(PgQuerySpace(reads), PgSavedQueries(reads.primary),  # type: ignore[arg-type]
                             Evaluator(SearchLegs(), HashEmbeddings(dimension=384)))
        await service.start()
        space = await reads.primary.fetchval("SELECT space_id FROM spaces WHERE is_default")
        caller = Caller(space, Scope.READ, None, credential_id=None)
        before = dict(reads.routed)
        result = await service.run(caller, Request("SELECT count(*) AS n FROM facts_current", []))
        assert result["termination_reason"] == "completed", result
        assert reads.routed["replica"] > before["replica"] and reads.routed["primary"] == before["primary"]
        later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)).isoformat()
        result = await service.run(caller, Request("SELECT count(*) AS n FROM facts_as_of($1, $2)", [later, later]))
        assert result["termination_reason"] == "completed", result
        assert reads.routed["primary"] > before["primary"]
    finally:
        await reads.close()
        await reads.primary.close()
