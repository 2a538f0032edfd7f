"""Each service killed in turn (kill -9) under load, with `testament up` supervising.

A client keeps ingesting documents and reading through the gateway while every process —
ingest, pipeline, retrieval, graph, queryspace, then the gateway itself — is killed in
turn. The launcher restarts each; meanwhile the gateway answers 503 with Retry-After for
that service's routes (never a 500), and every document the gateway accepted (a 200 with a version id)
is processed in the end: nothing accepted is lost.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from services.platform.server import free_ports
from tests.support import REPO, pid_listening

KILL_ORDER = ("ingest", "pipeline", "retrieval", "graph", "queryspace", "gateway")


class Load(threading.Thread):
    """Ingest and read in a loop (bounded in count and time) and record every answer."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.stop = threading.Event()
        self.accepted: list[str] = []
        self.statuses: Counter[tuple[str, int | str]] = Counter()
        self.bad: list[str] = []

    def run(self) -> None:
        deadline = time.monotonic() + 600
        i = 0
        with httpx.Client(base_url=self.base, timeout=30) as client:
            while not self.stop.is_set() and time.monotonic() < deadline and i < 5000:
                i += 1
                for route, send in (
                    ("ingest", lambda i=i: client.post("/ingest", params={"filename": f"load-{i}.md",
                                                                      "mime": "text/markdown"},
                                                   content=f"# Note {i}\n\nPerson{i} owns module {i}.\n".encode())),
                    ("resolve", lambda: client.get("/resolve", params={"name": "Person1"})),
                    ("sql", lambda: client.post("/query/sql", json={"sql": "SELECT 1 AS one"})),
                ):
                    try:
                        reply = send()
                    except httpx.TransportError as exc:  # the gateway itself is down
                        self.statuses[(route, type(exc).__name__)] += 1
                        continue
                    self.statuses[(route, reply.status_code)] += 1
                    if reply.status_code >= 500 and reply.status_code != 503:
                        self.bad.append(f"{route} {reply.status_code} {reply.text[:200]}")
                    if reply.status_code == 503 and "retry-after" not in reply.headers:
                        self.bad.append(f"{route} 503 without Retry-After")
                    if route == "ingest" and reply.status_code == 200:
                        self.accepted.append(reply.json()["version_id"])
                time.sleep(0.05)


def test_each_service_killed_in_turn_under_load_loses_nothing_accepted(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_") and k != "DATABASE_URL"}
    env.update(TESTAMENT_EMBEDDING_PROVIDER="hash", TESTAMENT_WORKER_POLL_S="0.5", TESTAMENT_WORKER_LEASE_S="10")
    log = tmp_path / "up.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path / "data"),
             "--gateway-port", str(port)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    base = f"http://127.0.0.1:{port}"
    load = Load(base)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and not line.startswith("Testament is up") and proc.poll() is None:
            line = proc.stdout.readline()
        assert line.startswith("Testament is up"), log.read_text()[-3000:]
        ports = dict(re.findall(r"(\w+)=127\.0\.0\.1:(\d+)", line))

        def pid_on(port_number: int) -> int:
            return pid_listening(proc.pid, port_number)

        load.start()
        time.sleep(2)
        for service in KILL_ORDER:
            before = len(load.accepted)
            victim = pid_on(int(ports[service]))
            os.kill(victim, signal.SIGKILL)
            back = time.monotonic() + 90
            while time.monotonic() < back:  # restarted: a new process listens on the same port
                try:
                    if pid_on(int(ports[service])) != victim and f"{service} restarted" in log.read_text():
                        break
                except AssertionError:
                    pass
                time.sleep(0.3)
            else:
                raise AssertionError(f"{service} was not restarted: {log.read_text()[-2000:]}")
            settle = time.monotonic() + 60
            while len(load.accepted) <= before + 2 and time.monotonic() < settle:
                time.sleep(0.3)  # the load goes on being accepted after the restart
            assert len(load.accepted) > before, f"nothing accepted after {service} came back"
        load.stop.set()
        load.join(60)

        assert load.bad == [], load.bad[:10]
        assert load.accepted, load.statuses
        # every accepted document is processed in the end
        ids = sorted(set(load.accepted))
        with httpx.Client(base_url=base, timeout=30) as client:
            done = time.monotonic() + 300
            report: dict = {}
            while time.monotonic() < done:
                report = client.post("/readiness", json={"version_ids": ids[:1000], "require": {
                    "pipeline": True, "p1": False, "live_graph": False, "p3": False}}).json()
                if report.get("ready"):
                    break
                time.sleep(1)
            assert report.get("ready"), report
        text = log.read_text()
        for service in KILL_ORDER:
            assert f"{service} exited unexpectedly" in text and f"{service} restarted on port" in text, service
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0
    finally:
        load.stop.set()
        if proc.poll() is None:
            proc.kill()
