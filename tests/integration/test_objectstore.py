"""Integration tests for services.platform.objectstore.

Every test taking the ``store`` fixture runs against both backends: a LocalDirectoryStore in a
temp dir, and an S3Store talking over TCP to a real moto S3 server subprocess (see s3server.py;
no in-process mocking). Backend-specific checks follow at the end.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import pytest_asyncio
from aiobotocore.session import get_session

from services.platform.objectstore import (
    InvalidObjectKey,
    LocalDirectoryStore,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailable,
    S3Store,
    build_object_store,
)


def _load_helper() -> ModuleType:
    """Import the sibling s3server.py by path, independent of rootdir / import mode."""
    name = "_testament_it_s3server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("s3server.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


s3server = _load_helper()

pytestmark = pytest.mark.asyncio(loop_scope="session")

MiB = 1024 * 1024
PART_SIZE = 5 * MiB
REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with s3server.run_moto_server() as url:
        yield url


def _s3_store(endpoint: str, bucket: str, **kwargs: Any) -> S3Store:
    return S3Store(
        endpoint_url=endpoint,
        bucket=bucket,
        region=REGION,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        **kwargs,
    )


@pytest_asyncio.fixture(params=["local", "s3"], loop_scope="session")
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    if request.param == "local":
        s: ObjectStore = LocalDirectoryStore(tmp_path / "objects")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")  # moto starts only if S3 tests run
        s = _s3_store(
            endpoint, f"it-{uuid.uuid4().hex[:16]}", create_bucket=True, part_size=PART_SIZE
        )
    try:
        yield s
    finally:
        await s.close()


def _raw_s3(endpoint: str) -> Any:
    """An independent aiobotocore client context for inspecting the bucket behind the store."""
    return get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


async def _chunks(total: int, chunk: int, *, seed: bytes = b"seed") -> AsyncIterator[bytes]:
    """Deterministic pseudo-random bytes, generated lazily chunk by chunk."""
    counter = 0
    sent = 0
    while sent < total:
        n = min(chunk, total - sent)
        block = bytearray()
        while len(block) < n:
            block += hashlib.sha512(seed + counter.to_bytes(8, "big")).digest()
            counter += 1
        yield bytes(block[:n])
        sent += n
        await asyncio.sleep(0)


async def _sha_of_stream(it: AsyncIterator[bytes]) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    async for c in it:
        h.update(c)
        n += len(c)
    return h.hexdigest(), n


class Boom(RuntimeError):
    pass


async def _failing(after_bytes: int, chunk: int = MiB) -> AsyncIterator[bytes]:
    async for c in _chunks(after_bytes, chunk):
        yield c
    raise Boom("source failed mid-stream")


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".tmp-")] if root.exists() else []


async def _multipart_uploads(store: S3Store, endpoint: str) -> list[Any]:
    async with _raw_s3(endpoint) as c:
        resp = await c.list_multipart_uploads(Bucket=store.bucket)
        return list(resp.get("Uploads", []))


# --------------------------------------------------------------------------- both backends


async def test_protocol_and_check(store: ObjectStore) -> None:
    assert isinstance(store, ObjectStore)
    await store.check()


async def test_put_get_round_trip(store: ObjectStore) -> None:
    key = "docs/ünïcode dir/obj-1.bin"
    data = b"hello \x00 world" * 100
    assert not await store.exists(key)
    assert await store.put_bytes(key, data, content_type="application/octet-stream") is True
    assert await store.exists(key)
    assert await store.get_bytes(key) == data
    got = b"".join([c async for c in store.open_stream(key)])
    assert got == data
    # empty object
    assert await store.put_bytes("empty", b"") is True
    assert await store.get_bytes("empty") == b""
    assert await store.exists("empty")


async def test_create_only_never_overwrites(store: ObjectStore) -> None:
    assert await store.put_bytes("k/one", b"first") is True
    assert await store.put_bytes("k/one", b"second, different") is False
    assert await store.get_bytes("k/one") == b"first"

    async def stream() -> AsyncIterator[bytes]:
        yield b"third "
        yield b"attempt"

    assert await store.put_stream("k/one", stream()) is False
    assert await store.get_bytes("k/one") == b"first"


async def test_concurrent_create_exactly_one_wins(store: ObjectStore) -> None:
    for round_ in range(3):
        key = f"race/{round_}"
        payloads = [f"writer-{i}-".encode() * 2000 for i in range(5)]
        results = await asyncio.gather(*(store.put_bytes(key, p) for p in payloads))
        assert sum(results) == 1, results
        assert await store.get_bytes(key) == payloads[results.index(True)]


async def test_streaming_put_30mb(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    total = 30 * MiB
    expected, _ = await _sha_of_stream(_chunks(total, MiB))
    assert (
        await store.put_stream("big/blob", _chunks(total, MiB), content_type="application/x-test")
        is True
    )
    digest, size = await _sha_of_stream(store.open_stream("big/blob"))
    assert (digest, size) == (expected, total)
    assert hashlib.sha256(await store.get_bytes("big/blob")).hexdigest() == expected
    # a second streamed create of the same key is rejected and leaves the object alone
    assert await store.put_stream("big/blob", _chunks(total, MiB, seed=b"other")) is False
    assert (await _sha_of_stream(store.open_stream("big/blob")))[0] == expected

    if isinstance(store, S3Store):
        endpoint = request.getfixturevalue("s3_endpoint")
        async with _raw_s3(endpoint) as c:
            head = await c.head_object(Bucket=store.bucket, Key="big/blob")
        assert head["ETag"].strip('"').endswith("-6")  # 30 MiB / 5 MiB parts: multipart path
        assert head["ContentType"] == "application/x-test"
        assert await _multipart_uploads(store, endpoint) == []  # the rejected upload was aborted
    elif isinstance(store, LocalDirectoryStore):
        assert _leftovers(store.root) == []


@pytest.mark.parametrize(
    "fail_after", [0, 2 * MiB, 7 * MiB], ids=["at-start", "small", "multipart"]
)
async def test_failing_stream_leaves_nothing(
    store: ObjectStore, request: pytest.FixtureRequest, fail_after: int
) -> None:
    key = f"broken/{fail_after}"
    with pytest.raises(Boom):
        await store.put_stream(key, _failing(fail_after))
    assert not await store.exists(key)
    with pytest.raises(ObjectNotFound):
        await store.get_bytes(key)
    if isinstance(store, LocalDirectoryStore):
        assert _leftovers(store.root) == []
    elif isinstance(store, S3Store):
        assert await _multipart_uploads(store, request.getfixturevalue("s3_endpoint")) == []
    # the key is still free for a proper write afterwards
    assert await store.put_bytes(key, b"ok") is True
    assert await store.get_bytes(key) == b"ok"


async def test_cancelled_stream_leaves_nothing(
    store: ObjectStore, request: pytest.FixtureRequest
) -> None:
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        async for c in _chunks(6 * MiB, MiB):
            yield c
        gate.set()
        await asyncio.sleep(3600)
        yield b"never"

    task = asyncio.create_task(store.put_stream("cancelled", slow()))
    async with asyncio.timeout(20):
        await gate.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await store.exists("cancelled")
    if isinstance(store, LocalDirectoryStore):
        assert _leftovers(store.root) == []
    elif isinstance(store, S3Store):
        assert await _multipart_uploads(store, request.getfixturevalue("s3_endpoint")) == []


async def test_missing_key(store: ObjectStore) -> None:
    assert await store.exists("nope/missing") is False
    with pytest.raises(ObjectNotFound) as info:
        await store.get_bytes("nope/missing")
    assert info.value.key == "nope/missing"
    assert isinstance(info.value, ObjectStoreError)
    stream = store.open_stream("nope/missing")
    with pytest.raises(ObjectNotFound):
        await stream.__anext__()


async def test_delete_is_idempotent(store: ObjectStore) -> None:
    assert await store.put_bytes("del/me", b"x") is True
    await store.delete("del/me")
    assert not await store.exists("del/me")
    await store.delete("del/me")
    await store.delete("del/never-existed")
    assert await store.put_bytes("del/me", b"y") is True  # key reusable after cleanup
    assert await store.get_bytes("del/me") == b"y"


async def test_stream_early_close_and_chunking(store: ObjectStore) -> None:
    total = 3 * MiB + 123
    assert await store.put_stream("chunked", _chunks(total, 64 * 1024)) is True
    it = store.open_stream("chunked")
    first = await it.__anext__()
    assert 0 < len(first) <= MiB
    await it.aclose()  # type: ignore[attr-defined]
    assert (await _sha_of_stream(store.open_stream("chunked")))[1] == total


BAD_KEYS = [
    "",
    "/abs",
    "a/../b",
    "..",
    "../x",
    "a/..",
    "a\\b",
    "nul\x00byte",
    "a//b",
    "trailing/",
    "./x",
    "x" * 1025,
    "é" * 513,  # 1026 bytes in UTF-8
    "seg/" + "s" * 256,  # a segment longer than 255 bytes
]


@pytest.mark.parametrize("bad", BAD_KEYS, ids=range(len(BAD_KEYS)))
async def test_invalid_keys_rejected(store: ObjectStore, bad: str) -> None:
    async def one() -> AsyncIterator[bytes]:
        yield b"x"

    with pytest.raises(InvalidObjectKey):
        await store.put_bytes(bad, b"x")
    with pytest.raises(InvalidObjectKey):
        await store.put_stream(bad, one())
    with pytest.raises(InvalidObjectKey):
        await store.exists(bad)
    with pytest.raises(InvalidObjectKey):
        await store.get_bytes(bad)
    with pytest.raises(InvalidObjectKey):
        store.open_stream(bad)  # validated eagerly
    with pytest.raises(InvalidObjectKey):
        await store.delete(bad)


async def test_longest_valid_key(store: ObjectStore) -> None:
    key = "/".join(["a" * 255, "b" * 255, "c" * 255, "d" * 254, "e"])
    assert len(key) == 1024
    assert await store.put_bytes(key, b"long") is True
    assert await store.get_bytes(key) == b"long"


async def test_close_is_idempotent(store: ObjectStore) -> None:
    await store.put_bytes("before-close", b"x")
    await store.close()
    await store.close()
    with pytest.raises(ObjectStoreUnavailable):
        await store.check()
    with pytest.raises(ObjectStoreUnavailable):
        await store.get_bytes("before-close")


# --------------------------------------------------------------------------- backend-specific


async def test_s3_check_unreachable_endpoint() -> None:
    port = s3server.free_loopback_port()  # nothing listens there
    s = _s3_store(f"http://127.0.0.1:{port}", "it-unreachable", max_attempts=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ObjectStoreUnavailable):
        await s.check()
    with pytest.raises(ObjectStoreUnavailable):
        await s.put_bytes("k", b"x")
    assert loop.time() - started < 10
    await s.close()


async def test_s3_check_missing_bucket(s3_endpoint: str) -> None:
    async with _s3_store(s3_endpoint, f"it-missing-{uuid.uuid4().hex[:12]}") as s:
        with pytest.raises(ObjectStoreUnavailable):
            await s.check()


async def test_s3_create_bucket_is_idempotent(s3_endpoint: str) -> None:
    bucket = f"it-twice-{uuid.uuid4().hex[:12]}"
    for _ in range(2):
        async with _s3_store(s3_endpoint, bucket, create_bucket=True) as s:
            await s.check()


async def test_s3_concurrent_multipart_create(s3_endpoint: str) -> None:
    async with _s3_store(
        s3_endpoint, f"it-mp-{uuid.uuid4().hex[:12]}", create_bucket=True, part_size=PART_SIZE
    ) as s:
        seeds = [b"a", b"b", b"c"]
        results = await asyncio.gather(
            *(s.put_stream("mp/race", _chunks(6 * MiB, MiB, seed=seed)) for seed in seeds)
        )
        assert sum(results) == 1, results
        winner = seeds[results.index(True)]
        expected, _ = await _sha_of_stream(_chunks(6 * MiB, MiB, seed=winner))
        assert (await _sha_of_stream(s.open_stream("mp/race")))[0] == expected
        assert await _multipart_uploads(s, s3_endpoint) == []


async def test_local_missing_root_is_created(tmp_path: Path) -> None:
    root = tmp_path / "does" / "not" / "exist"
    s = LocalDirectoryStore(root)
    await s.check()
    assert root.is_dir()
    assert _leftovers(root) == []  # the write probe is removed
    other = LocalDirectoryStore(tmp_path / "lazy")
    assert await other.put_bytes("a/b/c", b"x") is True  # put also creates the root
    assert (tmp_path / "lazy" / "a" / "b" / "c").read_bytes() == b"x"


async def test_local_unusable_root(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    s = LocalDirectoryStore(blocker / "root")
    with pytest.raises(ObjectStoreUnavailable):
        await s.check()
    with pytest.raises(ObjectStoreUnavailable):
        await s.put_bytes("k", b"x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
async def test_local_read_only_root(tmp_path: Path) -> None:
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(ObjectStoreUnavailable):
            await LocalDirectoryStore(root).check()
    finally:
        root.chmod(0o700)


async def test_local_key_prefix_conflicts(tmp_path: Path) -> None:
    s = LocalDirectoryStore(tmp_path)
    assert await s.put_bytes("a", b"file") is True
    with pytest.raises(ObjectStoreError):
        await s.put_bytes("a/b", b"nested")
    assert await s.put_bytes("d/e", b"nested") is True
    with pytest.raises(ObjectStoreError):
        await s.put_bytes("d", b"file")
    assert not await s.exists("d")
    with pytest.raises(ObjectNotFound):
        await s.get_bytes("d")
    assert _leftovers(tmp_path) == []


async def test_build_object_store(tmp_path: Path) -> None:
    common: dict[str, Any] = dict(
        local_root=None,
        s3_endpoint_url=None,
        s3_bucket=None,
        s3_region=None,
        s3_access_key=None,
        s3_secret_key=None,
    )
    local = build_object_store(backend="local", **{**common, "local_root": tmp_path})
    assert isinstance(local, LocalDirectoryStore) and local.root == tmp_path
    s3 = build_object_store(
        backend="s3",
        **{
            **common,
            "s3_endpoint_url": "http://127.0.0.1:1",
            "s3_bucket": "bkt",
            "s3_region": "eu-west-1",
        },
    )
    assert isinstance(s3, S3Store) and s3.bucket == "bkt"
    with pytest.raises(ValueError):
        build_object_store(backend="local", **common)
    with pytest.raises(ValueError):
        build_object_store(backend="s3", **common)
    with pytest.raises(ValueError):
        build_object_store(backend="gcs", **common)  # type: ignore[arg-type]


async def test_s3_conflict_409_is_decided_by_head(s3_endpoint: str) -> None:
    """409 ConditionalRequestConflict (not producible with moto) -> HEAD decides the outcome."""
    from botocore.exceptions import ClientError

    calls = 0

    async def conflict() -> None:
        nonlocal calls
        calls += 1
        raise ClientError(
            {
                "Error": {"Code": "ConditionalRequestConflict", "Message": "conflict"},
                "ResponseMetadata": {"HTTPStatusCode": 409},
            },
            "PutObject",
        )

    bucket = f"it-409-{uuid.uuid4().hex[:12]}"
    async with _s3_store(s3_endpoint, bucket, create_bucket=True) as s:
        with pytest.raises(ObjectStoreError):
            await s._conditional("c/free", conflict, conflict_retries=1)
        assert calls == 2
        assert await s.put_bytes("c/taken", b"x") is True
        assert await s._conditional("c/taken", conflict, conflict_retries=0) is False
