"""`testament ops` through real processes: the command calls PipelineService over the
gateway's gRPC port with an API key, and every subcommand is exercised here (dead letters,
replay, resume-no-route, inspect, reextract, reembed, merges list/apply/revert), with the
contract's refusals (a field rule, a domain refusal, a scope too narrow)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from testament import Client
from testament.ingest.v1 import ingest_pb2

from tests.conftest import clone_database
from tests.support import REPO, gateway_stack, service_env

NOTE = "# Ops note\n\nRavi owns the invoice exporter.\n\nDana Kim leads the finance team.\n"
REQUIRE = ingest_pb2.ReadinessRequirements(pipeline=True, p1=True, live_graph=False, p3=False)


@dataclass
class Ops:
    dsn: str
    grpc: str
    write_key: str
    read_key: str

    def run(self, *argv: str, key: str | None = None) -> tuple[int, Any]:
        done = subprocess.run([sys.executable, "-m", "services.cli", "ops", *argv, "--grpc-addr", self.grpc,
                               "--key", key or self.write_key], cwd=REPO, env=service_env(self.dsn),
                              capture_output=True, text=True, timeout=120)
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout)

    def upload(self, body: bytes, filename: str) -> ingest_pb2.UploadResponse:
        with Client(self.grpc, api_key=self.write_key) as client:
            return client.upload(body, filename=filename)

    def wait(self, version_id: str, timeout_s: float = 60) -> ingest_pb2.PipelineReadinessReport:
        deadline = time.monotonic() + timeout_s
        with Client(self.grpc, api_key=self.write_key) as client:
            while True:
                report = client.ingest.GetReadiness(
                    ingest_pb2.GetReadinessRequest(version_ids=[version_id], require=REQUIRE)).report
                if report.ready or 6 in {s.status for s in report.versions[0].stages} or time.monotonic() > deadline:
                    return report
                time.sleep(0.2)

    def sql(self, query: str, *args: object) -> list[asyncpg.Record]:
        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.dsn)
            try:
                return await conn.fetch(query, *args)
            finally:
                await conn.close()

        return asyncio.run(run())


def _key(dsn: str, scope: str) -> str:
    done = subprocess.run([sys.executable, "-m", "services.cli", "keys", "create", "--scope", scope],
                          cwd=REPO, env=service_env(dsn), capture_output=True, text=True, timeout=60, check=True)
    return str(json.loads(done.stdout)["key"])


@pytest.fixture(scope="module")
def ops(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    dsn = clone_database(pg)
    write_key, read_key = _key(dsn, "write"), _key(dsn, "read")
    tmp: Path = tmp_path_factory.mktemp("ops")
    with gateway_stack(dsn, tmp, services=("ingest", "pipeline"), TESTAMENT_WORK_RETRY_BACKOFF_BASE_S="0.1") as (
            _, gateway, _procs):
        yield Ops(dsn, gateway.address, write_key, read_key)


def test_dead_letters_list_and_replay(ops: Ops) -> None:
    version = ops.upload(b"\xff not utf-8 " + uuid.uuid4().hex.encode(), "bad.md")
    ops.wait(version.version_id)
    code, listed = ops.run("dead-letters", "--version-id", version.version_id, key=ops.read_key)
    assert code == 0
    (dead,) = listed["dead_letters"]
    assert dead["stage"] == "convert" and dead["version_id"] == version.version_id
    code, replayed = ops.run("replay", dead["work_unit_id"], "--attempts", "2")
    assert code == 0 and replayed["status"] == "STAGE_STATUS_PENDING" and replayed["attempts"] == 2
    # the contract's refusals, as JSON with exit 1: a field rule, a domain refusal, the scope
    code, refused = ops.run("dead-letters", "--limit", "0")
    assert code == 1 and refused["reason"] == "VALIDATION_FAILED"
    assert refused["violations"][0]["field"] == "limit" and refused["violations"][0]["type"] == "greater_than_equal"
    code, refused = ops.run("replay", str(uuid.uuid4()))
    assert (code, refused["code"], refused["reason"]) == (1, "NOT_FOUND", "WORK_UNIT_NOT_FOUND")
    code, refused = ops.run("replay", dead["work_unit_id"], key=ops.read_key)
    assert (code, refused["code"]) == (1, "PERMISSION_DENIED")


def test_inspect_and_resume_no_route(ops: Ops) -> None:
    version = ops.upload(b"\x00\x01binary" + uuid.uuid4().hex.encode(), "blob.bin")
    ops.wait(version.version_id, timeout_s=10)
    code, counts = ops.run("inspect", key=ops.read_key)
    assert code == 0 and counts["counts"] and "observed_at" in counts
    code, convert_only = ops.run("inspect", "--stage", "convert", key=ops.read_key)
    assert code == 0 and {c["stage"] for c in convert_only["counts"]} == {"convert"}
    code, released = ops.run("resume-no-route")
    # nothing parked has gained a route: nothing is released, and the command says so
    assert code == 0 and version.version_id not in released.get("released_version_ids", [])


def test_reembed_then_reextract(ops: Ops) -> None:
    version = ops.upload((NOTE + uuid.uuid4().hex + "\n").encode(), "note.md")
    assert ops.wait(version.version_id).ready
    code, reembedded = ops.run("reembed")
    assert code == 0, reembedded
    assert reembedded["model"] and int(reembedded["reembedded"]["chunks"]) >= 1
    code, started = ops.run("reextract", version.version_id)
    assert code == 0 and started == {"version_id": version.version_id, "generation": "#1"}
    code, refused = ops.run("reextract", str(uuid.uuid4()))
    assert (code, refused["reason"]) == (1, "NOTHING_TO_REEXTRACT")
    code, refused = ops.run("reextract", "not-a-uuid")
    assert code == 1 and refused["violations"][0]["field"] == "version_id"


def test_merges_list_apply_revert(ops: Ops) -> None:
    version = ops.upload((NOTE + uuid.uuid4().hex + "\n").encode(), "people.md")
    assert ops.wait(version.version_id).ready
    rows = ops.sql("""SELECT e.space_id, e.entity_id FROM entities e WHERE e.merged_into IS NULL
                        AND NOT EXISTS (SELECT 1 FROM merge_proposals p
                                         WHERE e.entity_id IN (p.survivor_id, p.absorbed_id))
                      ORDER BY e.created_at LIMIT 2""")
    assert len(rows) == 2
    proposal = ops.sql("INSERT INTO merge_proposals (space_id, survivor_id, absorbed_id, score) "
                       "VALUES ($1, $2, $3, 0.8) RETURNING proposal_id", rows[0][0], rows[0][1], rows[1][1])[0][0]
    code, listed = ops.run("merges", "list", "--status", "proposed", key=ops.read_key)
    assert code == 0 and str(proposal) in {p["proposal_id"] for p in listed["proposals"]}
    code, applied = ops.run("merges", "apply", str(proposal))
    assert code == 0 and applied["change"]["status"] == "MERGE_STATUS_APPLIED"
    assert applied["change"]["absorbed_id"] == str(rows[1][1])
    code, refused = ops.run("merges", "apply", str(proposal))
    assert (code, refused["code"], refused["reason"]) == (1, "FAILED_PRECONDITION", "MERGE_NOT_APPLICABLE")
    code, reverted = ops.run("merges", "revert", str(proposal))
    assert code == 0 and reverted["change"]["status"] == "MERGE_STATUS_REVERTED"
    code, refused = ops.run("merges", "revert", str(uuid.uuid4()))
    assert (code, refused["reason"]) == (1, "MERGE_PROPOSAL_NOT_FOUND")
