"""Passages per second of the MiniLM runners as the pipeline calls them: four workers at
once, each asking for the vectors of one small document (6 passages, the labelled set's
turns and blocks), with waiting calls coalesced into shared passes. Each configuration runs
in a fresh process (BLAS reads its thread count when NumPy loads), three times; the medians
are printed, with passages per CPU-second (steadier than wall time on a shared machine):

* baseline: the float32 NumPy runner (``minilm-f32``), one BLAS thread, a pass per core;
* onnxruntime over the packaged graph as it is (weights stored int8, products in float32);
* onnxruntime over the derived int8 graph, single-threaded passes, one per core (the
  default ``minilm``), and the same graph one pass at a time over a thread per core.

Each row also says how close its vectors are to the float32 reference (cosine, median and
lowest over the labelled set's passages).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench._common import Row

CALLERS = 4
PER_CALL = 6
REPEATS = 3

_PROBE = f"""
import asyncio, json, sys, time
import numpy as np
from bench import labelled, quality
from services.platform.bert import OnnxEncoder, cached_quantized_graph
from services.platform.embeddings import (GRAPH_SHA256, MiniLMEmbeddings, packaged_graph, packaged_model_zip,
                                          unpack_model)
from services.platform.settings import default_model_cache
texts = [u.body for u in quality.all_units(labelled.load())]
mode = sys.argv[1]
provider = MiniLMEmbeddings(runtime="numpy" if mode == "f32" else "onnx-int8", memo_size=0,
                            parallel=1 if mode == "int8-2threads" else None)
async def main():
    await provider.warm_up()
    model_dir = unpack_model(packaged_model_zip(), default_model_cache())
    if mode == "graph-as-is":
        provider._encoder = OnnxEncoder(model_dir, packaged_graph(), threads=2)
    elif mode == "int8-2threads":
        graph = cached_quantized_graph(packaged_graph(), GRAPH_SHA256, default_model_cache())
        provider._encoder = OnnxEncoder(model_dir, graph, threads=2)
    await provider.embed(texts[:32])
    provider._memo.clear()
    async def caller(part):
        for i in range(0, len(part), {PER_CALL}):
            await provider.embed(part[i:i + {PER_CALL}])
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller(texts[k::{CALLERS}]) for k in range({CALLERS})))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    vectors = np.asarray(await provider.embed(texts), dtype=np.float32)
    np.save(sys.argv[2], vectors)
    print(json.dumps({{"n": len(texts), "s": wall, "cpu": cpu}}))
asyncio.run(main())
"""

MODES = {
    "f32": "MiniLM float32 in NumPy, a pass per core (baseline, minilm-f32)",
    "graph-as-is": "onnxruntime, packaged graph as is (float32 products)",
    "int8": "onnxruntime int8, 1 thread a pass, a pass per core (default)",
    "int8-2threads": "onnxruntime int8, one pass at a time over 2 threads",
}


def _probe(mode: str, out: Path) -> dict[str, float]:
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    stdout = subprocess.run([sys.executable, "-c", _PROBE, mode, str(out)], env=env, check=True,  # noqa: S603
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


async def run() -> list[Row]:
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as scratch:
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        for _ in range(REPEATS):  # interleaved, so that a burst of load falls on every mode
            for mode in MODES:
                runs[mode].append(await asyncio.to_thread(_probe, mode, Path(scratch) / f"{mode}.npy"))
        reference = np.load(Path(scratch) / "f32.npy")
        rows = []
        base_ms = None
        for mode, title in MODES.items():
            n = int(runs[mode][0]["n"])
            wall = statistics.median(r["s"] for r in runs[mode])
            cpu = statistics.median(r["cpu"] for r in runs[mode])
            cosine = (np.load(Path(scratch) / f"{mode}.npy") * reference).sum(axis=1)
            ms = wall * 1000 / n
            rows.append(Row("embedding", title, n, ms, ms, baseline_p50_ms=base_ms,
                            extra=f"{n / wall:.1f} passages/s, {n / cpu:.1f} per CPU-s, cosine to f32 median "
                                  f"{np.median(cosine):.4f} min {cosine.min():.4f}"))
            base_ms = base_ms or ms
        return rows
