"""Ingest throughput of the labelled set (tests/data/retrieval) through the whole stack with
each local embedder: the lexical ``hash`` (the baseline), the default int8 ``minilm`` and
the float32 ``minilm-f32``. The three alternate, twice over, each in a fresh stack, so that
a change of the machine's load falls on all of them; the medians are printed with the load
average each ran at (``bench quality``'s single hash run can meet another load entirely),
and the pipeline process's CPU-seconds, which another process's load does not stretch.
"""

from __future__ import annotations

import os
import statistics

from bench import labelled
from bench._common import Row, cpu_seconds, running_stack
from bench.bench_quality import ingest

EMBEDDERS = ("hash", "minilm", "minilm-f32")
ROUNDS = 2


async def _kb_per_min(kind: str, sets: list[labelled.LabelledSet]) -> tuple[float, float, float]:
    """KB/min, the load average and the pipeline's CPU-seconds of one ingest."""
    async with running_stack(embedding=kind) as (stack, _port):
        ingest_proc = next(c for c in stack.children if c.name == "ingest")
        cpu = cpu_seconds(stack)
        docs, wall, _ = await ingest(ingest_proc.port, stack.dsn, sets)
        cpu = cpu_seconds(stack) - cpu
    total = sum(len(d.markdown.encode()) for d in docs.values())
    return total / 1024 / wall * 60, os.getloadavg()[0], cpu


async def run() -> list[Row]:
    sets = labelled.load()
    rates: dict[str, list[float]] = {k: [] for k in EMBEDDERS}
    cpus: dict[str, list[float]] = {k: [] for k in EMBEDDERS}
    loads: list[float] = []
    for _ in range(ROUNDS):
        for kind in EMBEDDERS:
            rate, load, cpu = await _kb_per_min(kind, sets)
            rates[kind].append(rate)
            cpus[kind].append(cpu)
            loads.append(load)
    base = statistics.median(rates["hash"])
    base_cpu = statistics.median(cpus["hash"])
    rows = []
    for kind in EMBEDDERS:
        rate = statistics.median(rates[kind])
        ms_per_kb = 60_000 / rate
        rows.append(Row("ingest_embedders", f"labelled set, {kind}" + (" (baseline)" if kind == "hash" else ""),
                        ROUNDS, ms_per_kb, ms_per_kb, baseline_p50_ms=None if kind == "hash" else 60_000 / base,
                        extra=f"{rate:,.0f} KB/min median of {', '.join(f'{r:,.0f}' for r in rates[kind])}; "
                              f"{rate / base:.2f}x hash; pipeline {statistics.median(cpus[kind]):.1f} CPU-s, "
                              f"{statistics.median(cpus[kind]) / base_cpu:.2f}x hash's; "
                              f"load {min(loads):.1f}-{max(loads):.1f}"))
    return rows
