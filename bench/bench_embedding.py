"""Passages per second of the default embedder (MiniLM in NumPy) as the pipeline calls it:
four workers at once, each asking for the vectors of one small document (6 passages, the
labelled set's turns and blocks). Two configurations in the same run, each in a fresh
process (BLAS reads its thread count when NumPy loads):

* baseline: BLAS's own thread count and one forward pass at a time, 64 rows a pass (the
  provider as it was);
* separate calls: one BLAS thread, one forward pass per core, 16 rows a pass, each call
  its own pass and the default 5 ms GIL switch interval (the provider before calls were
  coalesced);
* default: the same, with calls that wait for a pass encoded together and a 0.5 ms GIL
  switch interval (what the services run, see ``services/platform/blas.py`` and
  ``MiniLMEmbeddings``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from bench._common import Row

CALLERS = 4
PER_CALL = 6

_PROBE = f"""
import asyncio, json, sys, time
from bench import labelled, quality
from services.platform import embeddings
from services.platform.embeddings import MiniLMEmbeddings
texts = [u.body for u in quality.all_units(labelled.load())]
old = sys.argv[1] == "baseline"
if sys.argv[1] == "separate":
    embeddings.COALESCE, embeddings.GIL_SWITCH_S = 1, sys.getswitchinterval()
provider = MiniLMEmbeddings(batch_size=64, parallel=1, memo_size=0) if old else MiniLMEmbeddings(memo_size=0)
async def main():
    await provider.warm_up()
    async def caller(part):
        for i in range(0, len(part), {PER_CALL}):
            await provider.embed(part[i:i + {PER_CALL}])
    started = time.perf_counter()
    await asyncio.gather(*(caller(texts[k::{CALLERS}]) for k in range({CALLERS})))
    print(json.dumps({{"n": len(texts), "s": time.perf_counter() - started}}))
asyncio.run(main())
"""


def _probe(mode: str) -> tuple[int, float]:
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(name, None)
    if mode != "baseline":
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env=env, check=True, capture_output=True, text=True,  # noqa: S603
                         cwd=Path(__file__).resolve().parent.parent).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["n"], result["s"]


async def run() -> list[Row]:
    rows = []
    n, base_s = await asyncio.to_thread(_probe, "baseline")
    rows.append(Row("embedding", "MiniLM, BLAS threads, one pass at a time (baseline)", n, base_s * 1000 / n,
                    base_s * 1000 / n, extra=f"{n / base_s:.1f} passages/s, {CALLERS} callers of {PER_CALL}"))
    n, separate_s = await asyncio.to_thread(_probe, "separate")
    rows.append(Row("embedding", "MiniLM, a pass per core, each call its own pass", n, separate_s * 1000 / n,
                    separate_s * 1000 / n, extra=f"{n / separate_s:.1f} passages/s, {CALLERS} callers of {PER_CALL}",
                    baseline_p50_ms=base_s * 1000 / n))
    n, new_s = await asyncio.to_thread(_probe, "default")
    rows.append(Row("embedding", "MiniLM, a pass per core, waiting calls coalesced (default)", n, new_s * 1000 / n,
                    new_s * 1000 / n, extra=f"{n / new_s:.1f} passages/s, {CALLERS} callers of {PER_CALL}",
                    baseline_p50_ms=base_s * 1000 / n))
    return rows
