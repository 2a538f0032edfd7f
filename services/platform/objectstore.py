"""Create-only object storage for Testament: a local-directory backend and an S3 backend.

The contract (see :class:`ObjectStore`):

* Writes are **create-only**. ``put_stream`` / ``put_bytes`` return ``True`` when
  they created the object and ``False`` when an object with that key already
  existed; the existing object is never modified and the new bytes are
  discarded. The input stream is always consumed to its end before the
  decision is made, so callers that hash or count bytes while streaming see
  the whole input either way.
* A write that fails (the source iterator raises, the task is cancelled, the
  backend errors) leaves **no object and no partial data** behind: local temp
  files are unlinked, S3 multipart uploads are aborted. (A hard crash of the
  process can still leave a ``.tmp-*`` file or an incomplete multipart upload;
  configure an ``AbortIncompleteMultipartUpload`` lifecycle rule on the bucket.)
* Keys are validated on every call (:func:`validate_key`).
* Errors form a small hierarchy rooted at :class:`ObjectStoreError`.

Nothing here reads environment variables or keeps module-level state; all
configuration is passed to the constructors / :func:`build_object_store`.
(For ``S3Store`` with ``access_key``/``secret_key`` left as ``None`` botocore's
own default credential chain applies.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, Protocol, Self, TypeVar, runtime_checkable

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

__all__ = [
    "DEFAULT_READ_CHUNK_SIZE",
    "DEFAULT_S3_PART_SIZE",
    "MAX_KEY_BYTES",
    "MAX_SEGMENT_BYTES",
    "InvalidObjectKey",
    "LocalDirectoryStore",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "S3Store",
    "build_object_store",
    "validate_key",
]

_log = logging.getLogger(__name__)

MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255  # NAME_MAX of common filesystems; enforced on every backend for portability
DEFAULT_READ_CHUNK_SIZE = 1024 * 1024
DEFAULT_S3_PART_SIZE = 8 * 1024 * 1024
S3_MIN_PART_SIZE = 5 * 1024 * 1024  # S3 minimum for every part but the last
S3_MAX_PART_SIZE = 5 * 1024 * 1024 * 1024
S3_MAX_PARTS = 10_000

_TMP_PREFIX = ".tmp-"

_T = TypeVar("_T")


# --------------------------------------------------------------------------- errors


class ObjectStoreError(Exception):
    """Base class of every error raised by an object store."""


class ObjectNotFound(ObjectStoreError):
    """No object exists under ``key``."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"object not found: {self.key!r}"


class InvalidObjectKey(ObjectStoreError, ValueError):
    """The key is not acceptable (see :func:`validate_key`)."""

    def __init__(self, key: object, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason

    def __str__(self) -> str:
        shown = (
            self.key
            if not isinstance(self.key, str) or len(self.key) <= 80
            else self.key[:77] + "..."
        )
        return f"invalid object key {shown!r}: {self.reason}"


class ObjectStoreUnavailable(ObjectStoreError):
    """The backend cannot be reached or used (connection refused, timeout, missing bucket,
    unwritable root, store already closed, ...)."""


# --------------------------------------------------------------------------- keys


def validate_key(key: str) -> str:
    """Return ``key`` unchanged if it is a valid object key, else raise :class:`InvalidObjectKey`.

    Rules: a non-empty ``str`` of at most 1024 bytes in UTF-8 (S3's limit, which also bounds
    it to <= 1024 characters); no leading ``/``; no NUL or backslash; ``/``-separated segments
    that are neither empty (so no ``//`` and no trailing ``/``) nor ``.`` / ``..`` and at most
    255 UTF-8 bytes each. The segment rules keep keys portable between backends: on the local
    backend every key maps to exactly one valid path strictly inside the root.
    """
    if not isinstance(key, str):
        raise InvalidObjectKey(key, "key must be a str")
    if not key:
        raise InvalidObjectKey(key, "key is empty")
    try:
        encoded_len = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidObjectKey(key, "key is not valid unicode (lone surrogate)") from None
    if encoded_len > MAX_KEY_BYTES:
        raise InvalidObjectKey(key, f"key longer than {MAX_KEY_BYTES} bytes")
    if key.startswith("/"):
        raise InvalidObjectKey(key, "key starts with '/'")
    if "\x00" in key:
        raise InvalidObjectKey(key, "key contains NUL")
    if "\\" in key:
        raise InvalidObjectKey(key, "key contains a backslash")
    for segment in key.split("/"):
        if segment == "..":
            raise InvalidObjectKey(key, "key contains a '..' segment")
        if segment == ".":
            raise InvalidObjectKey(key, "key contains a '.' segment")
        if not segment:
            raise InvalidObjectKey(key, "key contains an empty segment ('//' or trailing '/')")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise InvalidObjectKey(key, f"a key segment is longer than {MAX_SEGMENT_BYTES} bytes")
    return key


# --------------------------------------------------------------------------- protocol


@runtime_checkable
class ObjectStore(Protocol):
    """Async, create-only object store."""

    async def put_stream(
        self, key: str, chunks: AsyncIterator[bytes], *, content_type: str | None = None
    ) -> bool:
        """Create ``key`` from a stream of chunks with bounded memory.

        Returns ``True`` if the object was created, ``False`` if it already existed (the existing
        object is untouched; the stream is still consumed and its bytes discarded). If the stream
        raises or the write fails, no object and no partial data remain, and the error propagates.
        """
        ...

    async def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> bool:
        """Same semantics as :meth:`put_stream` for an in-memory object."""
        ...

    async def exists(self, key: str) -> bool:
        """Whether an object exists under ``key``."""
        ...

    async def get_bytes(self, key: str) -> bytes:
        """The whole object; :class:`ObjectNotFound` if missing."""
        ...

    def open_stream(self, key: str) -> AsyncIterator[bytes]:
        """Chunked read. The key is validated immediately; :class:`ObjectNotFound` is raised by
        the first ``__anext__`` if the object is missing. Close the iterator (``aclose()``) if
        you stop early."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` if present (idempotent). Only for cleaning up an object this process
        just created when the surrounding transaction failed."""
        ...

    async def close(self) -> None:
        """Release resources (idempotent). Later calls raise :class:`ObjectStoreUnavailable`."""
        ...

    async def check(self) -> None:
        """Raise :class:`ObjectStoreUnavailable` unless the backend is usable (health checks)."""
        ...


async def _single_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data


# --------------------------------------------------------------------------- local directory


class LocalDirectoryStore:
    """Objects are files under ``root``; key ``a/b/c`` is the file ``root/a/b/c``.

    Create-only write: the data goes to ``.tmp-<random>`` in the destination directory, is
    fsynced, then ``os.link(tmp, final)`` publishes it atomically *only if ``final`` does not
    exist* (``FileExistsError`` -> ``False``); the temp name is unlinked in every case and the
    directory is fsynced. Readers therefore never see partial files, and concurrent writers of
    one key (threads, tasks or processes sharing the directory) get exactly one ``True``.
    Requires a filesystem with hard links (any local POSIX filesystem).

    Blocking file I/O runs in worker threads (``asyncio.to_thread``). Missing directories,
    including ``root`` itself, are created on demand. ``content_type`` is accepted but not
    stored. Local-only limitation: a key cannot be both an object and a "directory" of other
    keys (``a`` and ``a/b``); such a write raises :class:`ObjectStoreError`.
    """

    def __init__(self, root: Path, *, read_chunk_size: int = DEFAULT_READ_CHUNK_SIZE) -> None:
        if read_chunk_size <= 0:
            raise ValueError("read_chunk_size must be positive")
        self._root = Path(root)
        self._read_chunk_size = read_chunk_size
        self._closed = False

    @property
    def root(self) -> Path:
        return self._root

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- helpers

    def _ensure_open(self) -> None:
        if self._closed:
            raise ObjectStoreUnavailable("object store is closed")

    def _path(self, key: str) -> Path:
        validate_key(key)
        self._ensure_open()
        return self._root.joinpath(*key.split("/"))

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        try:
            fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass  # some filesystems refuse fsync on directories; the link itself is durable enough
        finally:
            os.close(fd)

    def _open_tmp(self, final: Path) -> tuple[Path, IO[bytes]]:
        parent = final.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            if not self._root.is_dir():
                raise ObjectStoreUnavailable(
                    f"object store root {self._root} is not a directory"
                ) from exc
            raise ObjectStoreError(
                f"cannot create {final.name!r}: a parent path component is an existing object"
            ) from exc
        except OSError as exc:
            raise ObjectStoreUnavailable(f"cannot create directory {parent}: {exc}") from exc
        tmp = parent / f"{_TMP_PREFIX}{secrets.token_hex(12)}"
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644
            )
        except OSError as exc:
            raise ObjectStoreUnavailable(
                f"cannot create temporary file in {parent}: {exc}"
            ) from exc
        return tmp, os.fdopen(fd, "wb")

    @staticmethod
    def _discard_tmp(tmp: Path, fh: IO[bytes]) -> None:
        # close() takes the buffered writer's lock, so it waits for a write still running in a
        # worker thread (possible after cancellation) instead of racing it.
        with contextlib.suppress(OSError):
            fh.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()

    @classmethod
    def _discard_opened(cls, fut: asyncio.Future[tuple[Path, IO[bytes]]]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            cls._discard_tmp(*fut.result())

    def _commit(self, tmp: Path, fh: IO[bytes], final: Path) -> bool:
        """fsync + close ``tmp`` and link it to ``final`` unless that exists. Always removes tmp."""
        try:
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            try:
                os.link(tmp, final)
            except FileExistsError:
                if final.is_dir():
                    raise ObjectStoreError(
                        f"cannot create {str(final)!r}: path is a prefix of other objects"
                    ) from None
                return False
        finally:
            self._discard_tmp(tmp, fh)
        self._fsync_dir(final.parent)
        return True

    def _write_all_sync(self, final: Path, data: bytes) -> bool:
        tmp, fh = self._open_tmp(final)
        try:
            fh.write(data)
        except BaseException:
            self._discard_tmp(tmp, fh)
            raise
        return self._commit(tmp, fh, final)

    # -- writes

    async def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> bool:
        final = self._path(key)
        try:
            return await asyncio.to_thread(self._write_all_sync, final, bytes(data))
        except ObjectStoreError:
            raise
        except OSError as exc:
            raise ObjectStoreUnavailable(f"write of {key!r} failed: {exc}") from exc

    async def put_stream(
        self, key: str, chunks: AsyncIterator[bytes], *, content_type: str | None = None
    ) -> bool:
        final = self._path(key)
        opener = asyncio.ensure_future(asyncio.to_thread(self._open_tmp, final))
        try:
            tmp, fh = await asyncio.shield(opener)
        except asyncio.CancelledError:
            # the thread may still create the temp file; remove it once it has
            opener.add_done_callback(self._discard_opened)
            raise
        try:
            async for chunk in chunks:
                if chunk:
                    await asyncio.to_thread(fh.write, chunk)
        except BaseException as exc:
            # includes CancelledError: unlink synchronously (cheap) so nothing is left behind
            self._discard_tmp(tmp, fh)
            if isinstance(exc, OSError):
                raise ObjectStoreUnavailable(f"write of {key!r} failed: {exc}") from exc
            raise
        # Point of no return: the commit runs to completion in its thread even if this task is
        # cancelled meanwhile (it always removes the temp file itself); a put cancelled during
        # the commit may therefore still have created the object.
        committer = asyncio.ensure_future(asyncio.to_thread(self._commit, tmp, fh, final))
        try:
            return await asyncio.shield(committer)
        except OSError as exc:
            raise ObjectStoreUnavailable(f"write of {key!r} failed: {exc}") from exc

    # -- reads

    async def exists(self, key: str) -> bool:
        path = self._path(key)
        return await asyncio.to_thread(path.is_file)

    async def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            raise ObjectStoreUnavailable(f"read of {key!r} failed: {exc}") from exc

    def open_stream(self, key: str) -> AsyncIterator[bytes]:
        path = self._path(key)
        return self._iter_file(key, path)

    async def _iter_file(self, key: str, path: Path) -> AsyncIterator[bytes]:
        def _open() -> IO[bytes]:
            fh = path.open("rb")
            if not path.is_file():
                fh.close()
                raise IsADirectoryError(str(path))
            return fh

        try:
            fh = await asyncio.to_thread(_open)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as exc:
            raise ObjectStoreUnavailable(f"read of {key!r} failed: {exc}") from exc
        try:
            while True:
                try:
                    chunk = await asyncio.to_thread(fh.read, self._read_chunk_size)
                except OSError as exc:
                    raise ObjectStoreUnavailable(f"read of {key!r} failed: {exc}") from exc
                if not chunk:
                    return
                yield chunk
        finally:
            fh.close()

    # -- maintenance

    async def delete(self, key: str) -> None:
        path = self._path(key)

        def _unlink() -> None:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                if not path.is_dir():
                    path.unlink()

        try:
            await asyncio.to_thread(_unlink)
        except OSError as exc:
            raise ObjectStoreUnavailable(f"delete of {key!r} failed: {exc}") from exc

    async def close(self) -> None:
        self._closed = True

    async def check(self) -> None:
        """Create ``root`` if missing and verify it is writable (write + unlink a probe file)."""
        self._ensure_open()

        def _probe() -> None:
            self._root.mkdir(parents=True, exist_ok=True)
            probe = self._root / f"{_TMP_PREFIX}check-{secrets.token_hex(8)}"
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"ok")
            finally:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    probe.unlink()

        try:
            await asyncio.to_thread(_probe)
        except OSError as exc:
            raise ObjectStoreUnavailable(
                f"object store root {self._root} is not usable: {exc}"
            ) from exc


# --------------------------------------------------------------------------- S3


_PRECONDITION_FAILED = "PreconditionFailed"  # 412: the key already exists
_CONDITIONAL_CONFLICT = "ConditionalRequestConflict"  # 409: concurrent conditional write in flight
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_UNAVAILABLE_CODES = frozenset(
    {
        "NoSuchBucket",
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
    }
)
_CONFLICT_RETRIES = 3


class _KeyedLocks:
    """Per-key asyncio locks that disappear when unused (instance state, not global)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _http_status(exc: ClientError) -> int:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return int(status or 0)


def _is_precondition_failed(exc: ClientError) -> bool:
    return _error_code(exc) == _PRECONDITION_FAILED or _http_status(exc) == 412


def _is_conditional_conflict(exc: ClientError) -> bool:
    return _error_code(exc) == _CONDITIONAL_CONFLICT or _http_status(exc) == 409


def _is_not_found(exc: ClientError) -> bool:
    return _error_code(exc) in _NOT_FOUND_CODES or (
        _http_status(exc) == 404 and _error_code(exc) != "NoSuchBucket"
    )


def _translate(exc: BaseException, what: str) -> ObjectStoreError:
    """Map a botocore/aiohttp error to this module's hierarchy (never returns ObjectNotFound)."""
    if isinstance(exc, ObjectStoreError):
        return exc
    if isinstance(exc, ClientError):
        code, status = _error_code(exc), _http_status(exc)
        message = f"{what}: S3 error {code or status}: {exc}"
        if code in _UNAVAILABLE_CODES or status >= 500 or status in (401, 403):
            return ObjectStoreUnavailable(message)
        return ObjectStoreError(message)
    if isinstance(
        exc,
        (
            BotoConnectionError,
            HTTPClientError,
            NoCredentialsError,
            PartialCredentialsError,
            CredentialRetrievalError,
            aiohttp.ClientError,
            TimeoutError,
            OSError,
        ),
    ):
        return ObjectStoreUnavailable(f"{what}: S3 endpoint unavailable: {exc}")
    if isinstance(exc, BotoCoreError):
        return ObjectStoreError(f"{what}: {exc}")
    return ObjectStoreError(f"{what}: unexpected error: {exc!r}")


_TRANSLATABLE: tuple[type[BaseException], ...] = (
    ClientError,
    BotoCoreError,
    aiohttp.ClientError,
    TimeoutError,
    OSError,
)


class S3Store:
    """Objects in one S3 bucket (AWS S3 or any S3-compatible server with conditional writes).

    **Lifecycle.** The aiobotocore client lives in an :class:`~contextlib.AsyncExitStack` held by
    the instance. It is opened lazily by the first operation, or eagerly with ``await start()``
    (or ``async with S3Store(...)``), and released by :meth:`close` (idempotent; afterwards every
    call raises :class:`ObjectStoreUnavailable`). The client is bound to the event loop that
    opened it. With ``create_bucket=True`` the bucket is created on start if missing.

    **Create-only.** ``PutObject`` with ``IfNoneMatch="*"``; streams of at least ``part_size``
    bytes use a multipart upload of ``part_size`` parts (one part buffered at a time) whose
    ``CompleteMultipartUpload`` also carries ``IfNoneMatch="*"``. ``412 PreconditionFailed``
    means the key exists -> ``False`` (a multipart upload is aborted). ``409
    ConditionalRequestConflict`` (a concurrent operation on the key) is retried a few times for
    PutObject; for CompleteMultipartUpload (not retryable per AWS) and for persistent 409s a
    HEAD decides: exists -> ``False``, else :class:`ObjectStoreError`. Any failure or ``False``
    aborts the multipart upload.

    Measured against the moto 5.2 server: it honours ``IfNoneMatch`` on both PutObject and
    CompleteMultipartUpload (412), so no HEAD-before-complete fallback is used; the 412 leaves
    the upload in place, hence the explicit abort. moto's check is not atomic, though: racing
    CompleteMultipartUploads of one key from separate clients usually all succeed there (a HEAD
    would not close that race either). Conditional commits of one key are therefore serialized
    per instance; cross-process exclusivity relies on the server (atomic on AWS S3).

    Caveat: if the transport retries a PutObject whose first attempt actually succeeded, the
    retry sees 412 and ``False`` is returned for an object this call created (harmless for
    content-addressed keys; such an object is simply not cleaned up by the caller).

    **Client config.** connect timeout 5 s, read timeout 30 s, ``retries={"mode": "standard",
    "max_attempts": 3}``; path-style addressing when ``endpoint_url`` is given (MinIO, moto, ...).
    """

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        bucket: str,
        region: str,
        access_key: str | None,
        secret_key: str | None,
        create_bucket: bool = False,
        part_size: int = DEFAULT_S3_PART_SIZE,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_attempts: int = 3,
        read_chunk_size: int = DEFAULT_READ_CHUNK_SIZE,
        max_pool_connections: int = 10,
    ) -> None:
        if not bucket:
            raise ValueError("bucket is required")
        if not region:
            raise ValueError("region is required")
        if (access_key is None) != (secret_key is None):
            raise ValueError("access_key and secret_key must be given together")
        if not S3_MIN_PART_SIZE <= part_size <= S3_MAX_PART_SIZE:
            raise ValueError(
                f"part_size must be between {S3_MIN_PART_SIZE} and {S3_MAX_PART_SIZE} bytes"
            )
        if read_chunk_size <= 0:
            raise ValueError("read_chunk_size must be positive")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self._endpoint_url = endpoint_url
        self._bucket = bucket
        self._region = region
        self._access_key = access_key
        self._secret_key = secret_key
        self._create_bucket = create_bucket
        self._part_size = part_size
        self._read_chunk_size = read_chunk_size
        s3_options: dict[str, Any] = {"addressing_style": "path"} if endpoint_url else {}
        self._config = AioConfig(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "max_attempts": max_attempts},
            max_pool_connections=max_pool_connections,
            s3=s3_options or None,
        )
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._start_lock = asyncio.Lock()
        self._commit_locks = _KeyedLocks()
        self._closed = False

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def part_size(self) -> int:
        return self._part_size

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- lifecycle

    async def start(self) -> None:
        """Open the client now (otherwise the first operation does). Creates the bucket if
        ``create_bucket``. Raises :class:`ObjectStoreUnavailable` if that fails."""
        await self._get_client()

    async def _get_client(self) -> Any:
        if self._closed:
            raise ObjectStoreUnavailable("object store is closed")
        if self._client is not None:
            return self._client
        async with self._start_lock:
            if self._closed:
                raise ObjectStoreUnavailable("object store is closed")
            if self._client is None:
                stack = AsyncExitStack()
                try:
                    client = await stack.enter_async_context(
                        get_session().create_client(
                            "s3",
                            endpoint_url=self._endpoint_url,
                            region_name=self._region,
                            aws_access_key_id=self._access_key,
                            aws_secret_access_key=self._secret_key,
                            config=self._config,
                        )
                    )
                    if self._create_bucket:
                        await self._ensure_bucket(client)
                except BaseException as exc:
                    await stack.aclose()
                    if isinstance(exc, _TRANSLATABLE):
                        raise _translate(exc, "S3 client start") from exc
                    raise
                self._stack, self._client = stack, client
        return self._client

    async def _ensure_bucket(self, client: Any) -> None:
        try:
            await client.head_bucket(Bucket=self._bucket)
            return
        except ClientError as exc:
            if _http_status(exc) != 404 and _error_code(exc) not in (
                "404",
                "NoSuchBucket",
                "NotFound",
            ):
                raise
        kwargs: dict[str, Any] = {"Bucket": self._bucket}
        if self._region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self._region}
        try:
            await client.create_bucket(**kwargs)
        except ClientError as exc:
            if _error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    async def close(self) -> None:
        self._closed = True
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def check(self) -> None:
        try:
            client = await self._get_client()
            await client.head_bucket(Bucket=self._bucket)
        except ObjectStoreUnavailable:
            raise
        except ObjectStoreError as exc:
            raise ObjectStoreUnavailable(str(exc)) from exc
        except _TRANSLATABLE as exc:
            if isinstance(exc, ClientError) and _http_status(exc) == 404:
                raise ObjectStoreUnavailable(
                    f"the bucket {self._bucket!r} does not exist (TESTAMENT_S3_BUCKET): create it, or set "
                    "TESTAMENT_S3_CREATE_BUCKET=true") from exc
            raise ObjectStoreUnavailable(str(_translate(exc, f"bucket {self._bucket!r}"))) from exc

    # -- helpers

    async def _call(
        self,
        what: str,
        fn: Callable[..., Awaitable[_T]],
        /,
        *,
        conditional: bool = False,
        not_found_key: str | None = None,
        **kwargs: Any,
    ) -> _T:
        """Run one client call on this bucket, translating errors into this module's hierarchy.

        ``conditional``: 412/409 are re-raised as the original ``ClientError`` for
        :meth:`_conditional`. ``not_found_key``: a 404 becomes ``ObjectNotFound(not_found_key)``.
        """
        try:
            return await fn(Bucket=self._bucket, **kwargs)
        except ClientError as exc:
            if conditional and (_is_precondition_failed(exc) or _is_conditional_conflict(exc)):
                raise
            if not_found_key is not None and _is_not_found(exc):
                raise ObjectNotFound(not_found_key) from None
            raise _translate(exc, what) from exc
        except _TRANSLATABLE as exc:
            raise _translate(exc, what) from exc

    async def _conditional(
        self, key: str, attempt: Callable[[], Awaitable[object]], *, conflict_retries: int
    ) -> bool:
        """Run a conditional create (PutObject / CompleteMultipartUpload with IfNoneMatch='*').

        True: created. False: 412, the key exists. 409 ConditionalRequestConflict is retried
        ``conflict_retries`` times with a short backoff (0 for CompleteMultipartUpload: AWS says
        a 409 there requires a new multipart upload, which is impossible once the stream is
        consumed). If it persists, a HEAD decides: the key exists -> False, otherwise
        :class:`ObjectStoreError` (the caller may retry the whole write).

        Conditional commits of the same key are serialized within this instance. Across
        processes atomicity is the server's job (AWS S3 guarantees it); moto's server checks
        If-None-Match and then completes non-atomically, and concurrent
        CompleteMultipartUploads of one key all succeeded there in testing, so the in-process
        lock also keeps single-process deployments on such servers correct.
        """
        async with self._commit_locks.hold(key):
            return await self._conditional_unlocked(key, attempt, conflict_retries)

    async def _conditional_unlocked(
        self, key: str, attempt: Callable[[], Awaitable[object]], conflict_retries: int
    ) -> bool:
        for retry in range(conflict_retries + 1):
            try:
                await attempt()
                return True
            except ClientError as exc:
                if _is_precondition_failed(exc):
                    return False
                if not _is_conditional_conflict(exc):  # pragma: no cover - _call translates others
                    raise _translate(exc, f"write of {key!r}") from exc
                if retry < conflict_retries:
                    await asyncio.sleep(0.1 * 2**retry)
        if await self.exists(key):
            return False
        raise ObjectStoreError(
            f"write of {key!r}: conflicting concurrent operation (409); retry the write"
        )

    # -- writes

    async def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> bool:
        validate_key(key)
        if len(data) >= self._part_size:
            return await self.put_stream(key, _single_chunk(bytes(data)), content_type=content_type)
        client = await self._get_client()
        return await self._put_object(client, key, bytes(data), content_type)

    async def _put_object(
        self, client: Any, key: str, data: bytes, content_type: str | None
    ) -> bool:
        extra: dict[str, Any] = {"ContentType": content_type} if content_type else {}
        return await self._conditional(
            key,
            lambda: self._call(
                f"put of {key!r}",
                client.put_object,
                conditional=True,
                Key=key,
                Body=data,
                IfNoneMatch="*",
                **extra,
            ),
            conflict_retries=_CONFLICT_RETRIES,
        )

    async def put_stream(
        self, key: str, chunks: AsyncIterator[bytes], *, content_type: str | None = None
    ) -> bool:
        validate_key(key)
        client = await self._get_client()
        part_size = self._part_size
        buf = bytearray()
        upload_id: str | None = None
        parts: list[dict[str, Any]] = []
        finished = False

        async def upload(part: bytes) -> None:
            nonlocal upload_id
            if upload_id is None:
                extra: dict[str, Any] = {"ContentType": content_type} if content_type else {}
                created = await self._call(
                    f"multipart create of {key!r}", client.create_multipart_upload, Key=key, **extra
                )
                upload_id = str(created["UploadId"])
            number = len(parts) + 1
            if number > S3_MAX_PARTS:
                raise ObjectStoreError(
                    f"write of {key!r}: more than {S3_MAX_PARTS} parts; increase part_size"
                )
            resp = await self._call(
                f"part {number} of {key!r}",
                client.upload_part,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=part,
            )
            parts.append({"PartNumber": number, "ETag": resp["ETag"]})

        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                buf += chunk
                while len(buf) >= part_size:
                    part = bytes(buf[:part_size])
                    del buf[:part_size]
                    await upload(part)
            if upload_id is None:  # whole object smaller than one part
                data = bytes(buf)
                buf.clear()
                finished = True
                return await self._put_object(client, key, data, content_type)
            if buf:
                last = bytes(buf)
                buf.clear()
                await upload(last)
            created = await self._conditional(
                key,
                lambda: self._call(
                    f"multipart complete of {key!r}",
                    client.complete_multipart_upload,
                    conditional=True,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    IfNoneMatch="*",
                ),
                conflict_retries=0,
            )
            # On 412 the upload still exists and must be aborted (falls through to finally).
            finished = created
            return created
        finally:
            if upload_id is not None and not finished:
                await self._abort(client, key, upload_id)

    async def _abort(self, client: Any, key: str, upload_id: str) -> None:
        try:
            await client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
        except ClientError as exc:
            if _error_code(exc) != "NoSuchUpload":
                _log.warning("abort of multipart upload %s for %r failed: %s", upload_id, key, exc)
        except Exception as exc:  # never mask the original error
            _log.warning("abort of multipart upload %s for %r failed: %s", upload_id, key, exc)

    # -- reads

    async def exists(self, key: str) -> bool:
        validate_key(key)
        client = await self._get_client()
        try:
            await self._call(f"head of {key!r}", client.head_object, not_found_key=key, Key=key)
        except ObjectNotFound:
            return False
        return True

    async def get_bytes(self, key: str) -> bytes:
        validate_key(key)
        client = await self._get_client()
        resp = await self._call(f"get of {key!r}", client.get_object, not_found_key=key, Key=key)
        try:
            async with resp["Body"] as body:
                return bytes(await body.read())
        except _TRANSLATABLE as exc:
            raise _translate(exc, f"read of {key!r}") from exc

    def open_stream(self, key: str) -> AsyncIterator[bytes]:
        validate_key(key)
        return self._iter_object(key)

    async def _iter_object(self, key: str) -> AsyncIterator[bytes]:
        client = await self._get_client()
        resp = await self._call(f"get of {key!r}", client.get_object, not_found_key=key, Key=key)
        async with resp["Body"] as body:
            while True:
                try:
                    chunk = await body.read(self._read_chunk_size)
                except _TRANSLATABLE as exc:
                    raise _translate(exc, f"read of {key!r}") from exc
                if not chunk:
                    return
                yield bytes(chunk)

    async def delete(self, key: str) -> None:
        validate_key(key)
        client = await self._get_client()
        with contextlib.suppress(ObjectNotFound):  # S3 deletes are idempotent anyway
            await self._call(f"delete of {key!r}", client.delete_object, not_found_key=key, Key=key)


# --------------------------------------------------------------------------- factory


def build_object_store(
    *,
    backend: Literal["local", "s3"],
    local_root: Path | None,
    s3_endpoint_url: str | None,
    s3_bucket: str | None,
    s3_region: str | None,
    s3_access_key: str | None,
    s3_secret_key: str | None,
    s3_create_bucket: bool = False,
    s3_part_size: int = DEFAULT_S3_PART_SIZE,
) -> ObjectStore:
    """Build the configured backend. Nothing is opened here (S3 connects lazily / on start())."""
    if backend == "local":
        if local_root is None:
            raise ValueError("backend 'local' requires local_root")
        return LocalDirectoryStore(Path(local_root))
    if backend == "s3":
        if not s3_bucket:
            raise ValueError("backend 's3' requires s3_bucket")
        if not s3_region:
            raise ValueError("backend 's3' requires s3_region")
        return S3Store(
            endpoint_url=s3_endpoint_url or None,
            bucket=s3_bucket,
            region=s3_region,
            access_key=s3_access_key or None,
            secret_key=s3_secret_key or None,
            create_bucket=s3_create_bucket,
            part_size=s3_part_size,
        )
    raise ValueError(f"unknown object store backend: {backend!r}")
