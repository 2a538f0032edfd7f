"""`testament up` (what `make run` calls): the whole stack, then Ctrl-C leaves nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from services.platform.server import free_ports
from tests.support import REPO


def test_up_serves_healthz_and_ctrl_c_leaves_no_process(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_") and k != "DATABASE_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path / "data"),
         "--gateway-port", str(port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("Testament is up") or proc.poll() is not None:
                break
        assert line.startswith(f"Testament is up: http://127.0.0.1:{port}"), line
        names = dict(re.findall(r"(\w+)=127\.0\.0\.1:(\d+)", line))
        assert set(names) == {"ingest", "pipeline", "retrieval", "graph", "queryspace", "gateway"}

        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json() == {"status": "ok"}
        family = psutil.Process(proc.pid).children(recursive=True)
        assert len(family) >= 7  # six processes and PostgreSQL (plus its workers)
        assert (tmp_path / "data" / "postgres" / "PG_VERSION").exists()

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        gone, alive = psutil.wait_procs(family, timeout=10)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
