"""The README's five-minute tour runs as written, against a running stack, so it cannot
drift from what the commands do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import clone_database
from tests.support import REPO, gateway_stack


def block(tag: str) -> str:
    text = (REPO / "README.md").read_text()
    found = re.search(rf"```{tag}\n(.*?)```", text, re.S)
    assert found, f"the README has no ```{tag} block"
    return found.group(1)


def test_the_readme_tour_runs_as_written(pg, tmp_path: Path) -> None:
    (tmp_path / "stack").mkdir()
    with gateway_stack(clone_database(pg), tmp_path / "stack", ("ingest", "pipeline", "retrieval", "queryspace")
                       ) as (url, gateway, _):
        work = tmp_path / "work"
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
        env.update(TESTAMENT_API_URL=url, PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block("sh tour")], cwd=work, env=env,
                                capture_output=True, text=True, timeout=600)
        # the Python SDK example, pointed at this stack's gateway instead of make run's port
        sdk = subprocess.run([sys.executable, "-c", block("python sdk").replace("127.0.0.1:8001", gateway.address)],
                             cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert sdk.returncode == 0, sdk.stderr[-3000:]
    assert sdk.stdout.splitlines()[0] == "Ravi" and sdk.stdout.splitlines()[-1] == "ready", sdk.stdout
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "ready" in out  # ingest --wait
    assert "invoice exporter" in out and "Evidence" in out  # ask
    assert "Ravi" in out and "row(s)" in out  # resolve / graph / sql
    assert "Traceback" not in result.stderr
