"""The stack exactly as deploy/compose/compose.yaml starts it, without a container engine.

Each Testament service of the compose file runs as a process with the compose file's own
command (after the Dockerfile's ENTRYPOINT) and the environment a container would get:
the Dockerfile's ENV, the compose `environment` (interpolated from `.env`, made from
`.env.example` as the compose file says) and the `env_file`. What has to change without
containers is only where things are: PostgreSQL is the embedded package's server (with
the compose file's user, password and database), S3 is a moto server (its bucket made as
the `bucket` one-shot makes it), and each `host:port` of the compose network becomes a
free loopback port. Order and conditions follow `depends_on`: the one-shot migrate first,
then the services once healthy by their own healthcheck command, the gateway last. Then
the README tour runs against it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import asyncpg
import botocore.session
import pytest
import yaml

from services.platform.embedded_pg import EmbeddedPostgres
from services.platform.migrations import _ADVISORY_LOCK_KEY
from services.platform.server import free_ports
from tests.e2e.test_readme import block
from tests.integration.s3server import run_moto_server
from tests.support import REPO

COMPOSE_DIR = REPO / "deploy" / "compose"
TESTAMENT = str(Path(sys.executable).parent / "testament")


def dotenv(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            found[match[1]] = match[2]
    return found


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR:-default} and ${VAR}, and $$ for a literal dollar."""
    def one(match: re.Match[str]) -> str:
        name, default = match[1], match[3]
        return variables.get(name) or (default or "")
    value = re.sub(r"(?<!\$)\$\{([A-Z0-9_]+)(:-([^}]*))?\}", one, value)
    return value.replace("$$", "$")


def dockerfile() -> tuple[list[str], dict[str, str]]:
    """The final stage's ENTRYPOINT and ENV."""
    final = (REPO / "deploy" / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", final, re.M)[1])
    env_text = re.search(r"^ENV ((?:.*\\\n)*.*)$", final, re.M)[1].replace("\\\n", " ")
    return entrypoint, dict(pair.split("=", 1) for pair in env_text.split())


class ComposeStack:
    def __init__(self, root: Path, pg: EmbeddedPostgres, s3_url: str, dotenv_text: str) -> None:
        self.root = root
        self.pg = pg
        self.s3_url = s3_url
        (root / ".env").write_text(dotenv_text)
        self.variables = dotenv(dotenv_text)
        self.doc = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text())
        self.entrypoint, self.image_env = dockerfile()
        assert self.entrypoint == ["testament"]
        services = [n for n, s in self.doc["services"].items() if "build" in s]
        ports = {int(v) for s in services for k, v in self.doc["services"][s]["environment"].items()
                 if k.endswith("_PORT")}
        # every host:port of the compose network, and where it is on this machine
        self.port_map = dict(zip(sorted(ports), free_ports(len(ports)), strict=True))
        self.where = {"postgres:5432": f"{pg.host}:{pg.port}", "minio:9000": s3_url.removeprefix("http://"),
                      **{f"{name}:{port}": f"127.0.0.1:{local}" for name in services
                         for port, local in self.port_map.items()}}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def relocate(self, value: str) -> str:
        for compose_addr, local in self.where.items():
            value = value.replace(compose_addr, local)
        # a healthcheck asks its own container's loopback port
        value = re.sub(r"^127\.0\.0\.1:(\d+)$", lambda m: f"127.0.0.1:{self.port_map.get(int(m[1]), m[1])}", value)
        if value == "0.0.0.0":  # a container's wildcard bind: loopback on a shared machine
            return "127.0.0.1"
        if value.startswith("/var/lib/testament"):
            return str(self.root / "data") + value.removeprefix("/var/lib/testament")
        return value

    def env_of(self, name: str) -> dict[str, str]:
        spec = self.doc["services"][name]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_") and k != "DATABASE_URL"}
        env.update(self.image_env)
        env.update(dotenv((self.root / spec["env_file"]).read_text()))
        env.update({k: interpolate(str(v), self.variables) for k, v in spec["environment"].items()})
        for key, value in list(env.items()):
            if key.startswith("TESTAMENT_"):
                env[key] = self.relocate(value)
                if key.endswith("_PORT"):
                    env[key] = str(self.port_map.get(int(value), int(value)))
        return env

    def argv(self, name: str, command: list[str]) -> list[str]:
        argv = [*self.entrypoint, *command]
        return [TESTAMENT if argv[0] == "testament" else argv[0], *(self.relocate(a) for a in argv[1:])]

    def run_once(self, name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(name, self.doc["services"][name]["command"]), env=self.env_of(name),
                              cwd=self.root, capture_output=True, text=True, timeout=300)

    def start(self, name: str) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(self.argv(name, self.doc["services"][name]["command"]),
                                            env=self.env_of(name), cwd=self.root, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_healthy(self, name: str, timeout_s: float = 120.0) -> None:
        test = self.doc["services"][name]["healthcheck"]["test"]
        assert test[0] == "CMD"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise AssertionError(f"{name} exited: {(self.root / f'{name}.log').read_text()[-3000:]}")
            probe = subprocess.run(self.argv(name, test[2:]) if test[1] == "testament" else test[1:],
                                   env=self.env_of(name), capture_output=True, timeout=30)
            if probe.returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"{name} never passed its healthcheck")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def infra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedPostgres, str]]:
    """PostgreSQL as the compose file's `postgres` service makes it (its user, password and
    database), and a moto S3 server in place of MinIO."""
    variables = dotenv((COMPOSE_DIR / ".env.example").read_text())
    with ExitStack() as stack:
        pg = EmbeddedPostgres(tmp_path_factory.mktemp("compose-pg") / "data", fast=True,
                              database=variables["POSTGRES_DB"])
        pg.start()
        stack.callback(pg.stop)
        pg._psql("postgres", f"CREATE ROLE \"{variables['POSTGRES_USER']}\" LOGIN SUPERUSER "
                             f"PASSWORD '{variables['POSTGRES_PASSWORD']}'")
        yield pg, stack.enter_context(run_moto_server())


def make_bucket(s3_url: str, bucket: str) -> None:
    """What the compose file's `bucket` one-shot does."""
    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=s3_url, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    client.create_bucket(Bucket=bucket)


@contextmanager
def compose_stack(root: Path, pg: EmbeddedPostgres, s3_url: str, extra_env: str = "") -> Iterator[ComposeStack]:
    root.mkdir(parents=True, exist_ok=True)
    stack = ComposeStack(root, pg, s3_url, (COMPOSE_DIR / ".env.example").read_text() + extra_env)
    try:
        yield stack
    finally:
        stack.stop()


def test_the_compose_stack_passes_the_readme_tour(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pg, s3_url = infra
    # a user's .env: the documented example, with the instant `hash` embedder as the tests use
    with compose_stack(tmp_path / "stack", pg, s3_url, "TESTAMENT_EMBEDDING_PROVIDER=hash\n") as stack:
        make_bucket(s3_url, stack.variables["TESTAMENT_S3_BUCKET"])
        migrated = stack.run_once("migrate")
        assert migrated.returncode == 0, migrated.stderr
        assert json.loads(migrated.stdout)["applied"], "the one-shot migrate found nothing to do"
        services = stack.doc["services"]
        order = [n for n in services if services[n].get("command", [""])[0] == "serve" and n != "gateway"]
        assert sorted(order) == ["graph", "ingest", "pipeline", "queryspace", "retrieval"]
        for name in order:
            stack.start(name)
        for name in order:
            stack.wait_healthy(name)
        assert set(services["gateway"]["depends_on"]) >= set(order)
        stack.start("gateway")
        stack.wait_healthy("gateway")

        gateway_http = stack.port_map[8000]
        work = tmp_path / "work"
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
        env.update(TESTAMENT_API_URL=f"http://127.0.0.1:{gateway_http}",
                   PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
        tour = subprocess.run(["bash", "-euo", "pipefail", "-c", block("sh tour")], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)
        assert tour.returncode == 0, tour.stdout[-3000:] + tour.stderr[-3000:]
        assert "invoice exporter" in tour.stdout and "Evidence" in tour.stdout
        assert "Ravi" in tour.stdout and "row(s)" in tour.stdout
        # the objects went to S3, not to a local directory
        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=s3_url, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        listed = client.list_objects_v2(Bucket=stack.variables["TESTAMENT_S3_BUCKET"])
        assert listed.get("KeyCount", 0) >= 1


def test_bad_configuration_fails_fast_naming_it(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pg, s3_url = infra
    with compose_stack(tmp_path / "bad", pg, s3_url, "TESTAMENT_EMBEDDING_PROVIDER=hash\n") as stack:
        def refused(name: str, **env: str) -> str:
            argv = stack.argv(name, stack.doc["services"][name]["command"])
            proc = subprocess.run(argv, env={**stack.env_of(name), **env}, capture_output=True, text=True,
                                  timeout=120)
            assert proc.returncode != 0, proc.stdout + proc.stderr
            return proc.stderr

        # a migration not applied: an empty database
        pg._psql("postgres", "CREATE DATABASE unmigrated")
        said = refused("graph", TESTAMENT_DATABASE_URL=stack.env_of("graph")["TESTAMENT_DATABASE_URL"].rsplit(
            "/", 1)[0] + "/unmigrated")
        assert "lacks migration 0001_foundation" in said and "testament migrate" in said, said
        assert stack.run_once("migrate").returncode == 0
        # a missing bucket: the ingest service names it and does not start
        said = refused("ingest", TESTAMENT_S3_BUCKET="no-such-bucket")
        assert "no-such-bucket" in said and "TESTAMENT_S3_BUCKET" in said, said
        # two migrators at once: the second is refused while the first holds the lock
        async def hold_and_try() -> str:
            conn = await asyncpg.connect(stack.env_of("migrate")["TESTAMENT_DATABASE_URL"],
                                         server_settings={"application_name": "first-migrator"})
            try:
                await conn.execute("SELECT pg_advisory_lock($1)", _ADVISORY_LOCK_KEY)
                proc = await asyncio.create_subprocess_exec(
                    *stack.argv("migrate", ["migrate"]), env=stack.env_of("migrate"),
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                _, err = await proc.communicate()
                assert proc.returncode == 1
                return err.decode()
            finally:
                await conn.close()

        said = asyncio.run(hold_and_try())
        assert "another `testament migrate` is running" in said and "first-migrator" in said, said
