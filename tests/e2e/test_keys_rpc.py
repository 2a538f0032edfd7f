"""Key administration over RPC (DeploymentService CreateKey / ListKeys / RevokeKey), through
the gateway's front door: confined to the caller's space, never wider than the caller."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from testament import Client, RPCError
from testament.common.v1 import deployment_pb2

from tests.conftest import clone_database
from tests.support import REPO, gateway_stack, service_env


@pytest.fixture(scope="module")
def door(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    dsn = clone_database(pg)
    with gateway_stack(dsn, tmp_path_factory.mktemp("keys"), ("ingest", "retrieval")) as (_, gateway, _):
        yield gateway.address, dsn


def _reason(error: RPCError) -> str | None:
    return error.reason


def test_keys_are_issued_listed_and_revoked_within_the_callers_space_only(door: tuple[str, str]) -> None:
    address, dsn = door
    with Client(address) as open_stack:  # no key exists yet: the caller is the default space's writer
        first = open_stack.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="write", trusted=True,
                                                                                label="admin"))
    time.sleep(2.5)  # the services cache "does any key exist" for two seconds
    with Client(address, api_key=first.key) as admin:
        reader = admin.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="read", principals=["team-a"]))
        scoped = admin.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="write", principals=["team-a"]))
        listed = admin.deployment.ListKeys(deployment_pb2.ListKeysRequest())
        assert {k.credential_id for k in listed.keys} == {first.credential_id, reader.credential_id,
                                                         scoped.credential_id}
        assert all(k.key_prefix and first.key not in str(k) for k in listed.keys)
        with pytest.raises(RPCError) as bad_scope:
            admin.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="owner"))
        assert bad_scope.value.code.name == "INVALID_ARGUMENT"

    with Client(address, api_key=reader.key) as read_only, pytest.raises(RPCError) as refused:
        read_only.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="read"))
    assert refused.value.code.name == "PERMISSION_DENIED"

    with Client(address, api_key=scoped.key) as team_a:
        for wider in (deployment_pb2.CreateKeyRequest(scope="read", trusted=True),
                      deployment_pb2.CreateKeyRequest(scope="read", principals=["team-b"])):
            with pytest.raises(RPCError) as escalation:
                team_a.deployment.CreateKey(wider)
            assert _reason(escalation.value) == "KEY_WIDER_THAN_CALLER"
        assert team_a.deployment.CreateKey(deployment_pb2.CreateKeyRequest(scope="read", principals=["team-a"])).key

    # spaces: only the operator (a trusted writer of the default space) creates them
    with Client(address, api_key=scoped.key) as team_a, pytest.raises(RPCError) as not_operator:
        team_a.deployment.CreateSpace(deployment_pb2.CreateSpaceRequest(slug="nope"))
    assert _reason(not_operator.value) == "OPERATOR_ONLY"
    with Client(address, api_key=first.key) as operator:
        made = operator.deployment.CreateSpace(deployment_pb2.CreateSpaceRequest(slug="other", name="Other team"))
        assert made.slug == "other"
        with pytest.raises(RPCError) as twice:
            operator.deployment.CreateSpace(deployment_pb2.CreateSpaceRequest(slug="other"))
        assert (twice.value.code.name, _reason(twice.value)) == ("ALREADY_EXISTS", "SPACE_EXISTS")
        with pytest.raises(RPCError) as bad_slug:
            operator.deployment.CreateSpace(deployment_pb2.CreateSpaceRequest(slug="Not A Slug"))
        assert _reason(bad_slug.value) == "INVALID_SLUG"
        assert {s.slug for s in operator.deployment.ListSpaces(deployment_pb2.ListSpacesRequest()).spaces} == {
            "default", "other"}

    # another space's writer sees none of these keys, cannot revoke them, and is told of no other space
    other = json.loads(subprocess.run([sys.executable, "-m", "services.cli", "keys", "create", "--scope", "write",
                                       "--space", "other", "--trusted"], cwd=REPO, env=service_env(dsn),
                                      capture_output=True, text=True, timeout=60).stdout)
    with Client(address, api_key=other["key"]) as stranger:
        assert [k.credential_id for k in stranger.deployment.ListKeys(deployment_pb2.ListKeysRequest()).keys] == [
            other["credential_id"]]
        with pytest.raises(RPCError) as hidden:
            stranger.deployment.RevokeKey(deployment_pb2.RevokeKeyRequest(credential_id=reader.credential_id))
        assert (hidden.value.code.name, _reason(hidden.value)) == ("NOT_FOUND", "KEY_NOT_FOUND")
        with pytest.raises(RPCError) as unknown:
            stranger.deployment.RevokeKey(deployment_pb2.RevokeKeyRequest(credential_id=str(uuid.uuid4())))
        assert _reason(unknown.value) == "KEY_NOT_FOUND"  # the same answer: nothing is learnt
        assert [s.slug for s in stranger.deployment.ListSpaces(deployment_pb2.ListSpacesRequest()).spaces] == [
            "other"]

    with Client(address, api_key=first.key) as admin:
        admin.deployment.RevokeKey(deployment_pb2.RevokeKeyRequest(credential_id=reader.credential_id))
    with Client(address, api_key=reader.key) as revoked, pytest.raises(RPCError) as gone:
        revoked.deployment.ListKeys(deployment_pb2.ListKeysRequest())
    assert gone.value.code.name == "UNAUTHENTICATED"


def test_the_first_key_step_registers_the_operators_key_once_and_never_prints_it(pg) -> None:  # type: ignore[no-untyped-def]
    """What the production overlay's first-key Job runs (deploy/kubernetes/overlays/production)."""
    import asyncio
    import secrets

    from services.platform.auth import hash_key
    from services.platform.credentials_pg import PgCredentials
    from services.platform.db import Database

    dsn = clone_database(pg)
    key = "tsk_" + secrets.token_urlsafe(32)
    argv = [sys.executable, "-m", "services.cli", "keys", "create", "--scope", "write", "--trusted", "--first",
            "--label", "first-start", "--key-env", "TESTAMENT_FIRST_KEY"]

    def run(first_key: str | None) -> subprocess.CompletedProcess[str]:
        env = service_env(dsn, **({"TESTAMENT_FIRST_KEY": first_key} if first_key is not None else {}))
        return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)

    unset = run(None)
    assert unset.returncode == 1 and "TESTAMENT_FIRST_KEY" in unset.stderr
    short = run("tsk_short")
    assert short.returncode == 1 and "at least 32" in short.stderr
    first = run(key)
    assert first.returncode == 0, first.stderr
    assert key not in first.stdout + first.stderr
    issued = json.loads(first.stdout)
    assert issued["key_prefix"] == key[:8] and issued["scope"] == "write"
    again = run("tsk_" + secrets.token_urlsafe(32))  # a rerun, even with another key: nothing changes
    assert again.returncode == 0 and json.loads(again.stdout)["issued"] is False

    async def registered() -> tuple[object, int]:
        db = await Database.connect(dsn, min_size=1, max_size=1)
        try:
            caller = await PgCredentials(db).find(hash_key(key))
            return caller, await db.fetchval("SELECT count(*) FROM credentials")
        finally:
            await db.close()
    caller, count = asyncio.run(registered())
    assert count == 1 and str(caller.credential_id) == issued["credential_id"]  # type: ignore[attr-defined]
