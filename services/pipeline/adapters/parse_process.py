"""The English parse in a child process of its own.

Reading claims from their parse (:func:`claims.extract_parsed_claims`,
:func:`facts.read_claims`) is pure CPU: tens of milliseconds a passage, most of it spaCy.
Run on the pipeline's event loop it held up every other unit, and above all the fact
stages' transactions, which hold the space lock while they wait for their turn on the loop:
under ingest the lock was held twice as long as its statements needed. In one child
process the parse runs on the machine's other core and the loop only waits for it.

One child, so that the claim texts extraction parsed are still in its parse cache when the
normaliser reads the same claims. The child loads the English pipeline before the service
reports SERVING, and is told by the kernel to exit when the service dies. If it does die
(killed, out of memory), the call fails as retryable and the next call starts a new child.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from services.pipeline.domain.claims import (
    ClaimDraft,
    Decision,
    ExtractionInput,
    ParsedClaimProvider,
    extract_parsed_claims,
)
from services.pipeline.domain.facts import AssertionDraft, ClaimView, ParseRelationProvider, read_claims

__all__ = ["ParseProcess", "ParseProcessDied", "ProcessClaims", "ProcessRelations"]

T = TypeVar("T")


class ParseProcessDied(RuntimeError):
    """The parse process ended under a call; the unit is retried (a new process starts)."""


def _start_child() -> None:
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: exit with the service
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the service's to handle


def _warm() -> None:
    from services.pipeline.domain import nlp

    nlp.english()


class ParseProcess:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the service has gRPC and ONNX threads a forked child would inherit mid-state
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_child)
        return self._pool

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        pool = self._executor()
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        except BrokenProcessPool as exc:
            if self._pool is pool:
                self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise ParseProcessDied("the parse process ended; the unit will be retried") from exc

    async def warm(self) -> None:
        """Start the child and load the English pipeline in it (before SERVING)."""
        await self.call(_warm)

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, lambda: pool.shutdown(cancel_futures=True))


class ProcessClaims(ParsedClaimProvider):
    """:class:`ParsedClaimProvider`, run in the parse process (same name and version: the
    same function gives the same claims wherever it runs)."""

    def __init__(self, process: ParseProcess) -> None:
        self.process = process

    async def extract(self, item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]:
        return await self.process.call(extract_parsed_claims, item)


class ProcessRelations(ParseRelationProvider):
    """:class:`ParseRelationProvider`, run in the parse process."""

    def __init__(self, process: ParseProcess) -> None:
        self.process = process

    async def normalize(self, claims: Sequence[ClaimView], known_aliases: frozenset[str]
                        ) -> list[tuple[list[AssertionDraft], str | None]]:
        return await self.process.call(read_claims, list(claims), known_aliases)
