"""``testament up``: the whole stack on one machine, in the foreground.

Starts the embedded PostgreSQL (unless a database URL is configured), applies
migrations, then the five services and the gateway, each as its own OS process
on its own port, and prints one line when all are healthy. SIGINT/SIGTERM stops
the services first (each drains), then the gateway, then PostgreSQL, and leaves
no process behind. A process that dies is started again on the same port, after a
pause that doubles with each crash in a row (1 s up to 30 s) and says so in the log;
meanwhile the gateway answers 503 for that service's routes and every other route
keeps working.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.platform.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError
from services.platform.migrations import MigrationError, migrate
from services.platform.procs import die_with_parent
from services.platform.server import free_ports
from services.platform.settings import SERVICE_NAMES, Settings

GATEWAY = "gateway"


@dataclass
class Child:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    crashes: int = 0  # in a row: reset once it has stayed up for a while
    restart_at: float | None = None
    started_at: float = 0.0


RESTART_BACKOFF_S = (1.0, 30.0)  # first pause, longest pause
STABLE_S = 60.0  # up this long after a restart: the crash streak is over


class Stack:
    def __init__(self, settings: Settings, *, data_dir: Path, gateway_port: int) -> None:
        self.settings = settings
        self.data_dir = data_dir.resolve()
        self.gateway_port = gateway_port
        self.pg: EmbeddedPostgres | None = None
        self.children: list[Child] = []
        self.dsn = settings.database_url

    # --- start ---------------------------------------------------------------------
    def _env(self, ports: dict[str, int]) -> dict[str, str]:
        env = dict(os.environ)
        assert self.dsn is not None
        env["TESTAMENT_DATABASE_URL"] = self.dsn
        env["TESTAMENT_DATA_DIR"] = str(self.data_dir)
        env.setdefault("TESTAMENT_OBJECTS_DIR", str(self.settings.objects_dir or self.data_dir / "objects"))
        env["TESTAMENT_HOST"] = self.settings.host
        env["TESTAMENT_TRACE_LOG"] = "true" if self.settings.trace_log else "false"
        for name, port in ports.items():
            key = "GATEWAY_GRPC" if name == GATEWAY else name.upper()
            env[f"TESTAMENT_{key}_PORT"] = str(port)
            if name != GATEWAY:
                env[f"TESTAMENT_{name.upper()}_ADDR"] = f"{self.settings.host}:{port}"
        env["TESTAMENT_GATEWAY_PORT"] = str(self.gateway_port)
        return env

    def _spawn(self, name: str, port: int, env: dict[str, str]) -> None:
        self.children.append(Child(name, port, self._popen(name, env), env, started_at=time.monotonic()))

    @staticmethod
    def _popen(name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        module = "services.gateway" if name == GATEWAY else f"services.{name}"
        return subprocess.Popen(  # noqa: S603
            die_with_parent([sys.executable, "-m", module]),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches only us; we stop children in order
        )

    def start(self) -> None:
        if self.dsn is None:
            self.pg = EmbeddedPostgres(self.data_dir / "postgres")
            self.pg.start()
            self.dsn = self.pg.dsn
        report = asyncio.run(migrate(self.dsn))
        if report.applied:
            print(f"testament: applied migrations {', '.join(report.applied)}", file=sys.stderr)
        wanted = {name: self.settings.port_for(name) for name in SERVICE_NAMES}
        wanted[GATEWAY] = self.settings.gateway_grpc_port
        spare = iter(free_ports(sum(1 for p in wanted.values() if p == 0), self.settings.host))
        ports = {name: (port or next(spare)) for name, port in wanted.items()}
        env = self._env(ports)
        for name in SERVICE_NAMES:
            self._spawn(name, ports[name], env)
        # More pipeline workers share the queue; the gateway talks to the first one.
        for port in free_ports(self.settings.pipeline_processes - 1, self.settings.host):
            self._spawn("pipeline", port, {**env, "TESTAMENT_PIPELINE_PORT": str(port)})
        self._spawn(GATEWAY, ports[GATEWAY], env)

    async def _healthy(self, child: Child) -> bool:
        async with grpc.aio.insecure_channel(f"{self.settings.host}:{child.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            except grpc.aio.AioRpcError:
                return False
            return reply.status == health_pb2.HealthCheckResponse.SERVING

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(self.children)
        while pending:
            for child in pending:
                if child.proc.poll() is not None:
                    raise RuntimeError(f"testament-{child.name} exited with code {child.proc.returncode}")
            pending = [c for c in pending if not asyncio.run(self._healthy(c))]
            if pending and time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                raise RuntimeError(f"not healthy after {timeout_s:.0f}s: {names}")
            if pending:
                time.sleep(0.2)

    # --- run and stop ----------------------------------------------------------------
    def watch(self, stop: list[int]) -> int:
        """Block until a signal arrives (0), restarting any child that dies."""
        while not stop:
            now = time.monotonic()
            for child in self.children:
                if child.proc.poll() is None:
                    if child.crashes and now - child.started_at > STABLE_S:
                        child.crashes = 0
                    continue
                if child.restart_at is None:
                    first, longest = RESTART_BACKOFF_S
                    pause = min(longest, first * 2 ** child.crashes)
                    child.crashes += 1
                    child.restart_at = now + pause
                    print(f"testament: {child.name} exited unexpectedly (code {child.proc.returncode}); "
                          f"restarting it in {pause:g} s (crash {child.crashes} in a row)", file=sys.stderr,
                          flush=True)
                elif now >= child.restart_at:
                    child.proc = self._popen(child.name, child.env)
                    child.restart_at, child.started_at = None, now
                    print(f"testament: {child.name} restarted on port {child.port}", file=sys.stderr, flush=True)
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        """Services first (each drains), then the gateway, then PostgreSQL. Idempotent."""
        grace = self.settings.shutdown_grace_s + 5
        services = [c for c in self.children if c.name != GATEWAY]
        gateway = [c for c in self.children if c.name == GATEWAY]
        for group in (gateway, services):
            for child in group:
                if child.proc.poll() is None:
                    child.proc.send_signal(signal.SIGTERM)
            for child in group:
                try:
                    child.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    child.proc.wait(5)
        self.children.clear()
        if self.pg is not None:
            self.pg.stop()
            self.pg = None


def up(settings: Settings, *, data_dir: Path, gateway_port: int) -> int:
    stack = Stack(settings, data_dir=data_dir, gateway_port=gateway_port)
    stop: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 0
    try:
        stack.start()
        stack.wait_healthy()
        internal = " ".join(f"{c.name}={settings.host}:{c.port}" for c in stack.children)
        print(
            f"Testament is up: http://{settings.host}:{gateway_port} ({internal}); Ctrl-C stops it",
            flush=True,
        )
        code = stack.watch(stop)
    except (EmbeddedPostgresError, MigrationError, RuntimeError, OSError) as exc:
        print(f"testament up: {exc}", file=sys.stderr)
        code = 1
    finally:
        with contextlib.suppress(Exception):
            stack.stop()
    return code
