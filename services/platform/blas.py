"""BLAS threads for the local models.

A multi-threaded OpenBLAS splits each matrix product over every core and spins while it
waits; on a small shared machine, with the pipeline's other stages and PostgreSQL busy on
the same cores, the spinning costs more than the split gains (MiniLM on 2 loaded cores:
about 500 tokens per CPU-second against 4,400 single-threaded). So the services that run a
local model ask for one BLAS thread, before NumPy is imported, and run one forward pass per
core side by side instead (NumPy releases the GIL inside its loops).
"""

from __future__ import annotations

import os

_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded() -> None:
    """Ask for one BLAS thread unless the operator chose a number. Must run before NumPy loads."""
    for name in _VARIABLES:
        os.environ.setdefault(name, "1")


def pass_per_core() -> int:
    """One forward pass per core, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


def forward_parallelism() -> int:
    """NumPy forward passes to run side by side: one per core when BLAS is single-threaded,
    else one."""
    return pass_per_core() if os.environ.get("OPENBLAS_NUM_THREADS") == "1" else 1
