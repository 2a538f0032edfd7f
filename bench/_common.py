"""Shared pieces of the benchmarks: timing, the result table, a running stack."""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from services.launcher import Stack
from services.platform.server import free_ports
from services.platform.settings import load_settings


@dataclass
class Row:
    bench: str
    case: str
    n: int
    p50_ms: float
    p95_ms: float
    extra: str = ""
    baseline_p50_ms: float | None = None

    @property
    def ratio(self) -> str:
        if self.baseline_p50_ms in (None, 0):
            return "baseline"
        return f"{self.p50_ms / self.baseline_p50_ms:.2f}x"


def cpu_seconds(stack: Stack, name: str = "pipeline") -> float:
    """CPU seconds (user + system) the stack's ``name`` processes have used so far, from
    /proc (NaN elsewhere): on a shared machine steadier than wall time, which another
    process's load stretches."""
    total = 0.0
    for child in stack.children:
        if child.name != name:
            continue
        try:
            fields = Path(f"/proc/{child.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return statistics.median(ordered) * 1000, p95 * 1000


async def timed(n: int, call: Callable[[], Awaitable[object]], warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


@asynccontextmanager
async def running_stack(*, embedding: str | None = None) -> AsyncIterator[tuple[Stack, int]]:
    """The whole stack (embedded PostgreSQL, six processes) in a temporary directory;
    ``embedding`` overrides TESTAMENT_EMBEDDING_PROVIDER for it (e.g. "hash")."""
    (port,) = free_ports(1)
    saved = os.environ.get("TESTAMENT_EMBEDDING_PROVIDER")
    with tempfile.TemporaryDirectory(prefix="testament-bench-") as tmp:
        if embedding is not None:  # the launcher hands its environment to the services it starts
            os.environ["TESTAMENT_EMBEDDING_PROVIDER"] = embedding
        try:
            settings = load_settings(data_dir=Path(tmp), gateway_port=port, trace_log=False)
            stack = Stack(settings, data_dir=Path(tmp), gateway_port=port)
            # The launcher is synchronous (it runs its own short event loops): keep it off ours.
            await asyncio.to_thread(stack.start)
        finally:
            if embedding is not None:
                if saved is None:
                    os.environ.pop("TESTAMENT_EMBEDDING_PROVIDER", None)
                else:
                    os.environ["TESTAMENT_EMBEDDING_PROVIDER"] = saved
        try:
            await asyncio.to_thread(stack.wait_healthy)
            yield stack, port
        finally:
            await asyncio.to_thread(stack.stop)


def print_table(rows: list[Row]) -> None:
    headers = ("benchmark", "case", "n", "p50 ms", "p95 ms", "vs baseline", "notes")
    body = [(r.bench, r.case, str(r.n), f"{r.p50_ms:.3f}", f"{r.p95_ms:.3f}", r.ratio, r.extra) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for b in body:
        print("  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)))
