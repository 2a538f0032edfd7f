"""The five-byte message envelope of gRPC-Web and Connect streams, in one place for the
gateway that writes it and the clients (the console, the MCP server) that read it."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

ENVELOPE = struct.Struct(">BI")
COMPRESSED = 0x01
END_STREAM = 0x02  # Connect: the last message, a JSON end-of-stream object
TRAILER = 0x80  # gRPC-Web: the trailers frame


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return ENVELOPE.pack(flags, len(payload)) + payload


class EnvelopeReader:
    """Splits a byte stream that arrives in arbitrary chunks into (flags, payload) frames."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> Iterator[tuple[int, bytes]]:
        self._buffer += chunk
        while len(self._buffer) >= ENVELOPE.size:
            flags, size = ENVELOPE.unpack_from(self._buffer)
            if len(self._buffer) < ENVELOPE.size + size:
                return
            payload = self._buffer[ENVELOPE.size:ENVELOPE.size + size]
            self._buffer = self._buffer[ENVELOPE.size + size:]
            yield flags, payload


def read_frames(chunks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    reader = EnvelopeReader()
    for chunk in chunks:
        yield from reader.feed(chunk)


async def aread_frames(chunks: AsyncIterable[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    reader = EnvelopeReader()
    async for chunk in chunks:
        for frame in reader.feed(chunk):
            yield frame


def end_stream_error(payload: bytes) -> dict[str, Any] | None:
    """The error a Connect end-of-stream frame carries, if any. A stream the server ended
    at the caller's own deadline is a normal end for a follower, not an error."""
    error = json.loads(payload or b"{}").get("error")
    if not error or error.get("code") == "deadline_exceeded":
        return None
    return error
