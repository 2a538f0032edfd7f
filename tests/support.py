"""Helpers for tests that run real processes against a real PostgreSQL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.platform.server import free_ports

REPO = Path(__file__).resolve().parent.parent


def service_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
    env["TESTAMENT_DATABASE_URL"] = dsn
    env["PYTHONUNBUFFERED"] = "1"
    # Tests embed with the deterministic, instant `hash` provider unless they say otherwise.
    env["TESTAMENT_EMBEDDING_PROVIDER"] = "hash"
    env.update(extra)
    return env


def wait_serving(address: str, timeout_s: float = 90.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    # A service loads spaCy (and, by default, its embedder) before SERVING: ~14 s idle, over
    # 30 s on this 2-core machine at load 10. Waiting longer costs nothing when it starts.
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process exited with {proc.returncode}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise TimeoutError(f"{address} did not become SERVING")


def pid_listening(parent_pid: int, port: int) -> int:
    """The process under ``parent_pid`` that listens on ``port`` (AssertionError: none does)."""
    import psutil

    for child in psutil.Process(parent_pid).children(recursive=True):
        try:
            if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in child.net_connections(kind="tcp")):
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError(f"nothing listens on {port}")


@dataclass
class Proc:
    proc: subprocess.Popen[bytes]
    address: str
    log_path: Path
    extra: dict[str, int] = field(default_factory=dict)

    def log_lines(self) -> list[dict[str, object]]:
        lines = []
        for raw in self.log_path.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    pass
        return lines

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@contextmanager
def run_service(name: str, dsn: str, tmp: Path, **env: str) -> Iterator[Proc]:
    """One service as its own OS process on a free port; stopped (drained) afterwards."""
    (port,) = free_ports(1)
    log_path = tmp / f"{name}-{port}.log"
    module = "services.gateway" if name == "gateway" else f"services.{name}"
    environment = service_env(dsn, **{f"TESTAMENT_{name.upper()}_PORT": str(port), **env})
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module], cwd=REPO, env=environment,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    handle = Proc(proc, f"127.0.0.1:{port}", log_path)
    try:
        wait_serving(handle.address, proc=proc)
        yield handle
    finally:
        handle.stop()


@contextmanager
def run_gateway(dsn: str, tmp: Path, *, extra_env: dict[str, str] | None = None, **addrs: str) -> Iterator[Proc]:
    """The gateway process, pointed at already running services (``ingest="host:port"``)."""
    http_port, grpc_port = free_ports(2)
    env = {f"TESTAMENT_{k.upper()}_ADDR": v for k, v in addrs.items()}
    env.update(extra_env or {})
    env.update(TESTAMENT_GATEWAY_PORT=str(http_port), TESTAMENT_GATEWAY_GRPC_PORT=str(grpc_port))
    log_path = tmp / f"gateway-{http_port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.gateway"], cwd=REPO, env=service_env(dsn, **env),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    handle = Proc(proc, f"127.0.0.1:{grpc_port}", log_path, {"http": http_port})
    try:
        wait_serving(handle.address, proc=proc)
        yield handle
    finally:
        handle.stop()


# A small cast and set of things that many generated documents share, so fact stages of
# different documents resolve to the same entities and touch the same facts.
PEOPLE = ("Ravi Shanker", "Dana Kim", "Priya Nair", "Tomas Berg", "Lena Park", "Kofi Mensah")
THINGS = ("the exporter module", "the billing dashboard", "the ledger service", "the search index",
          "the payments project", "the release checklist")
MONTHS = ("January", "February", "March", "April", "May", "June")


def shared_entity_document(rng: random.Random) -> str:
    """A short Markdown note of statements about the shared cast (shapes the rules
    extractor reads), different on every call."""
    lines = [f"# Notes {rng.randrange(10_000)}", ""]
    for _ in range(rng.randint(2, 5)):
        person, other, thing = rng.choice(PEOPLE), rng.choice(PEOPLE), rng.choice(THINGS)
        lines.append(rng.choice((
            f"{person} owns {thing}.",
            f"{person} reports to {other}." if person != other else f"{person} uses {thing}.",
            f"{person} uses {thing}.",
            f"{person} has been on {thing} since {rng.choice(MONTHS)} 2026.",
        )))
        lines.append("")
    return "\n".join(lines)


@contextmanager
def gateway_stack(dsn: str, tmp: Path, services: Sequence[str] = ("ingest", "pipeline", "retrieval"),
                  **env: str) -> Iterator[tuple[str, Proc, dict[str, Proc]]]:
    """The graph service, the named services (pointed at it) and the gateway in front of
    them all, as real processes. Yields the gateway's base URL, its process and the rest."""
    from contextlib import ExitStack

    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.3", **env}
    with ExitStack() as stack:
        graph = stack.enter_context(run_service("graph", dsn, tmp, **env))
        procs = {"graph": graph}
        for name in services:
            procs[name] = stack.enter_context(run_service(name, dsn, tmp, TESTAMENT_GRAPH_ADDR=graph.address, **env))
        gateway = stack.enter_context(run_gateway(dsn, tmp, **{n: p.address for n, p in procs.items()}))
        yield f"http://127.0.0.1:{gateway.extra['http']}", gateway, procs
