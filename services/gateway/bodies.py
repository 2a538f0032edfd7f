"""Reading request bodies at the front door: bounded in size, and never waiting forever
on a sender that went quiet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


async def idle_limited(chunks: AsyncIterator[bytes], idle_s: float) -> AsyncIterator[bytes]:
    """The body's chunks; a sender that sends nothing for ``idle_s`` is cut off."""
    iterator = chunks.__aiter__()
    while True:
        try:
            async with asyncio.timeout(idle_s):
                piece = await iterator.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise BodyTimeout(f"no body bytes for {idle_s:g} s") from None
        yield piece


async def read_body(request: Request, cap: int, idle_s: float) -> bytes:
    """The whole body; BodyTooLarge past ``cap`` bytes (before reading, when the length is
    declared), BodyTimeout when the sender goes quiet."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        raise BodyTooLarge
    parts, size = [], 0
    async for piece in idle_limited(request.stream(), idle_s):
        size += len(piece)
        if size > cap:
            raise BodyTooLarge
        parts.append(piece)
    return b"".join(parts)
