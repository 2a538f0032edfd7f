"""`make bench`: run every bench/bench_*.py and print one table.

Each benchmark compares against a baseline measured in the same run; the machine is
shared and noisy, so read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import uvloop

import bench
from bench._common import Row, print_table

# Run only when named: `make bench-scale` (hours at its default million claims).
ONLY_BY_NAME = {"bench_scale"}


def main(selected: list[str]) -> None:
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no fork() notices from the launcher's subprocesses
    rows: list[Row] = []
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if not info.name.startswith("bench_"):
            continue
        if selected and info.name.removeprefix("bench_") not in selected:
            continue
        if not selected and info.name in ONLY_BY_NAME:
            continue
        module = importlib.import_module(f"bench.{info.name}")
        print(f"running {info.name} …", file=sys.stderr, flush=True)
        rows.extend(uvloop.run(module.run()))
    print_table(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
