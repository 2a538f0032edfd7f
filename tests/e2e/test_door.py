"""The gateway's front door under real processes: the credential before routing,
admission limits, the global in-flight ceiling, header and body caps, slow bodies,
CORS, key revocation and spaces, and the loopback rule of an open stack."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.gateway.admission import Admission, CorsConfigError, Limits, parse_origins
from tests.conftest import clone_database
from tests.support import REPO, Proc, run_gateway, run_service, service_env

WATCH = "/testament.retrieval.v1.RetrievalService/WatchChanges"


@dataclass
class Services:
    dsn: str
    tmp: Path
    addrs: dict[str, str]

    @contextmanager
    def gateway(self, **env: str) -> Iterator[str]:
        with run_gateway(self.dsn, self.tmp, extra_env=env, **self.addrs) as gw:
            yield f"http://127.0.0.1:{gw.extra['http']}"

    def cli(self, *args: str) -> dict | list:
        result = subprocess.run([sys.executable, "-m", "services.cli", *args], cwd=REPO, env=service_env(self.dsn),
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def services(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("door")
    env = {"TESTAMENT_DATA_DIR": str(tmp)}
    with ExitStack() as stack:
        graph = stack.enter_context(run_service("graph", dsn, tmp, **env))
        procs: dict[str, Proc] = {name: stack.enter_context(run_service(name, dsn, tmp,
                                                                        TESTAMENT_GRAPH_ADDR=graph.address, **env))
                                  for name in ("ingest", "retrieval")}
        yield Services(dsn, tmp, {"graph": graph.address, **{n: p.address for n, p in procs.items()}})


def _hold_stream(base: str, seconds: float) -> httpx.Response:
    """A Connect server stream (the change feed) that stays open for ``seconds``."""
    payload = b"{}"
    return httpx.post(f"{base}{WATCH}", content=struct.pack(">BI", 0, len(payload)) + payload, timeout=30,
                      headers={"content-type": "application/connect+json",
                               "connect-timeout-ms": str(int(seconds * 1000))})


# --- pure parts ---------------------------------------------------------------------------


def test_token_buckets_refill_continuously_with_a_quarter_burst() -> None:
    now = [0.0]
    admission = Admission(Limits(key_per_minute=120), clock=lambda: now[0])
    admitted = [admission.admit("s", "k") for _ in range(31)]
    assert admitted[:30] == [None] * 30  # burst = 120/4
    refusal = admitted[30]
    assert refusal is not None and (refusal.code, refusal.retry_after_s) == ("rate_limited", 1)
    now[0] += 0.5  # one token per half second at 120/min
    assert admission.admit("s", "k") is None
    assert admission.admit("s", "other") is None  # per key


def test_in_flight_ceilings_and_refusals_count_against_nothing() -> None:
    admission = Admission(Limits(space_in_flight=2, key_per_minute=4))
    assert admission.admit("s", "a") is None and admission.admit("s", "b") is None
    refusal = admission.admit("s", "c")
    assert refusal is not None and (refusal.code, refusal.retry_after_s) == ("concurrency_limited", 1)
    admission.release("s", "a")
    assert admission.admit("s", "c") is None
    # key c was refused once without losing a token: its bucket still has its one-token burst
    admission.release("s", "c")
    admission.release("s", "b")
    assert admission.admit("s", "c") is not None  # burst of 4/min is 1, spent by the admitted call


@pytest.mark.parametrize("raw", ["*", "https://a.example/", "HTTPS://A.EXAMPLE", "http://a.example",
                                 "https://user@a.example", "https://a.example:443", "https://a.example,",
                                 "https://a.example,,https://b.example"])
def test_bad_cors_origins_are_refused(raw: str) -> None:
    with pytest.raises(CorsConfigError):
        parse_origins(raw)


def test_good_cors_origins() -> None:
    assert parse_origins("https://app.example, http://localhost:5173,http://127.0.0.1:8080") == {
        "https://app.example", "http://localhost:5173", "http://127.0.0.1:8080"}


# --- against the running services -----------------------------------------------------------


def test_caps_slow_bodies_cors_and_the_global_ceiling(services: Services) -> None:
    with services.gateway(TESTAMENT_HTTP_BODY_MAX_BYTES="2048", TESTAMENT_HTTP_BODY_TIMEOUT_S="0.5",
                          TESTAMENT_GATEWAY_MAX_IN_FLIGHT="1",
                          TESTAMENT_CORS_ORIGINS="http://localhost:5173") as base:
        assert httpx.get(f"{base}/resolve", params={"name": "x"}, headers={"x-pad": "a" * 20_000},
                         timeout=10).status_code == 431
        big = httpx.post(f"{base}/operations/facts_context", json={"query": "x" * 4000}, timeout=10)
        assert (big.status_code, big.json()) == (413, {"detail": "body_too_large"})

        def trickle():  # type: ignore[no-untyped-def]
            yield b'{"query": '
            time.sleep(2)
            yield b'"x"}'

        slow = httpx.post(f"{base}/operations/facts_context", content=trickle(), timeout=10,
                          headers={"content-type": "application/json"})
        assert (slow.status_code, slow.json()) == (408, {"detail": "request_timeout"})

        preflight = httpx.options(f"{base}/operations/facts_context", headers={
            "origin": "http://localhost:5173", "access-control-request-method": "POST"}, timeout=10)
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:5173"
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        foreign = httpx.options(f"{base}/operations/facts_context", headers={
            "origin": "https://evil.example", "access-control-request-method": "POST"}, timeout=10)
        assert "access-control-allow-origin" not in foreign.headers
        simple = httpx.get(f"{base}/resolve", params={"name": "x"}, headers={"origin": "http://localhost:5173"},
                           timeout=10)
        assert simple.headers["access-control-allow-origin"] == "http://localhost:5173"

        async def while_one_is_in_flight() -> tuple[int, str | None, int]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                held = asyncio.create_task(asyncio.to_thread(_hold_stream, base, 2.0))
                await asyncio.sleep(0.8)
                shed = await http.get("/resolve", params={"name": "x"})
                health = await http.get("/healthz")
                await held
                return shed.status_code, shed.headers.get("retry-after"), health.status_code

        assert asyncio.run(while_one_is_in_flight()) == (503, "1", 200)


def test_admission_per_key_and_per_space(services: Services) -> None:
    with services.gateway(TESTAMENT_ADMISSION_SPACE_PER_MINUTE="8") as base:
        codes = [httpx.get(f"{base}/resolve", params={"name": "x"}, timeout=10) for _ in range(3)]
        assert [c.status_code for c in codes[:2]] == [200, 200]  # burst 8/4 = 2
        assert codes[2].status_code == 429
        assert codes[2].json()["detail"]["code"] == "rate_limited" and int(codes[2].headers["retry-after"]) >= 1
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200  # exempt

    with services.gateway(TESTAMENT_ADMISSION_SPACE_IN_FLIGHT="1") as base:
        async def race() -> int:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                held = asyncio.create_task(asyncio.to_thread(_hold_stream, base, 2.0))
                await asyncio.sleep(0.8)
                refused = await http.get("/resolve", params={"name": "x"})
                await held
                assert refused.json()["detail"]["code"] == "concurrency_limited"
                assert refused.headers["retry-after"] == "1"
                return refused.status_code

        assert asyncio.run(race()) == 429


@pytest.mark.parametrize("grace_s, held_s, code", [("10", 2.0, 0), ("0.5", 4.0, 1)])
def test_sigterm_drains_what_was_accepted_and_sheds_the_rest(services: Services, grace_s: str, held_s: float,
                                                             code: int) -> None:
    import signal

    with run_gateway(services.dsn, services.tmp, extra_env={"TESTAMENT_SHUTDOWN_GRACE_S": grace_s},
                     **services.addrs) as gw:
        base = f"http://127.0.0.1:{gw.extra['http']}"

        async def drain() -> tuple[int, int, int]:
            held = asyncio.create_task(asyncio.to_thread(_hold_stream, base, held_s))
            await asyncio.sleep(0.8)
            gw.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                health = await http.get("/healthz")
                new = await http.get("/resolve", params={"name": "x"})
            try:
                finished = (await held).status_code
            except httpx.HTTPError:
                finished = -1
            return health.status_code, new.status_code, finished

        health, new, finished = asyncio.run(drain())
        assert (health, new) == (503, 503)
        if code == 0:
            assert finished == 200  # the accepted stream ran to its end
        assert gw.proc.wait(30) == code
        if code:
            assert "1 request(s) were still running" in gw.log_path.read_text()


LOAD_S = float(os.environ.get("TESTAMENT_LOAD_S", "60"))


def test_under_load_every_answer_is_a_result_or_a_documented_refusal_and_sigterm_drains(services: Services) -> None:
    """200 concurrent clients on loopback for LOAD_S seconds (60 by default), with admission
    and in-flight limits low enough to be hit: every
    request gets 200, 429 or 503, no connection is dropped; then SIGTERM under load ends
    with every accepted request answered and exit 0."""
    import signal
    from collections import Counter

    env = {"TESTAMENT_ADMISSION_SPACE_PER_MINUTE": "6000", "TESTAMENT_GATEWAY_MAX_IN_FLIGHT": "64",
           "TESTAMENT_SHUTDOWN_GRACE_S": "15"}
    with run_gateway(services.dsn, services.tmp, extra_env=env, **services.addrs) as gw:
        base = f"http://127.0.0.1:{gw.extra['http']}"

        async def load(seconds: float, stop_at: float | None) -> Counter[object]:
            seen: Counter[object] = Counter()
            deadline = time.monotonic() + seconds
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as http:
                async def client() -> None:
                    while time.monotonic() < deadline:
                        try:
                            reply = await http.get("/resolve", params={"name": "Ravi"})
                            seen[reply.status_code] += 1
                        except httpx.HTTPError as exc:
                            if stop_at is not None and time.monotonic() >= stop_at:
                                seen["closed after sigterm"] += 1
                                return  # the listener is gone once the drain finished
                            seen[type(exc).__name__] += 1

                async def terminate() -> None:
                    if stop_at is not None:
                        await asyncio.sleep(stop_at - time.monotonic())
                        gw.proc.send_signal(signal.SIGTERM)

                await asyncio.gather(terminate(), *(client() for _ in range(200)))
            return seen

        seen = asyncio.run(load(LOAD_S, None))
        print(f"\n200 clients for {LOAD_S:.0f} s: {dict(seen)}")
        assert set(seen) <= {200, 429, 503}, seen
        assert seen[200] > 0 and (seen[429] or seen[503])

        started = time.monotonic()
        drained = asyncio.run(load(8.0, started + 3.0))
        print(f"SIGTERM under load: {dict(drained)}")
        assert set(drained) <= {200, 429, 503, "closed after sigterm"}, drained
        assert gw.proc.wait(30) == 0


def test_the_credential_comes_before_routing_and_revocation_is_immediate(services: Services) -> None:
    # Last in this module: once a key exists the stack is closed.
    created = services.cli("keys", "create", "--scope", "read", "--trusted", "--label", "door")
    key = created["key"]
    time.sleep(2.5)  # services cache "does any key exist" for two seconds
    with services.gateway() as base:
        anonymous = httpx.get(f"{base}/no-such-route", timeout=10)
        assert (anonymous.status_code, anonymous.json()) == (401, {"detail": "a perimeter credential is required"})
        bad = httpx.get(f"{base}/no-such-route", headers={"authorization": "Bearer tsk_notavalidkeyatall00"},
                        timeout=10)
        assert bad.status_code == 401
        auth = {"authorization": f"Bearer {key}"}
        assert httpx.get(f"{base}/no-such-route", headers=auth, timeout=10).status_code == 404
        assert httpx.get(f"{base}/resolve", params={"name": "x"}, headers=auth, timeout=10).status_code == 200

        listed = services.cli("keys", "list")
        mine = next(k for k in listed if k["credential_id"] == created["credential_id"])
        assert mine["revoked_at"] is None and "key" not in mine and mine["key_prefix"] == key[:8]
        services.cli("keys", "revoke", created["credential_id"])
        refused = httpx.get(f"{base}/resolve", params={"name": "x"}, headers=auth, timeout=10)
        assert refused.status_code == 401  # the very next request
        time.sleep(2.5)  # and revoking the last key never opens the stack again
        assert httpx.get(f"{base}/resolve", params={"name": "x"}, timeout=10).status_code == 401

    spaces = services.cli("spaces", "create", "team-b", "--name", "Team B")
    assert spaces["slug"] == "team-b"
    assert {s["slug"] for s in services.cli("spaces", "list")} >= {"default", "team-b"}
    again = subprocess.run([sys.executable, "-m", "services.cli", "spaces", "create", "team-b"], cwd=REPO,
                           env=service_env(services.dsn), capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "exists already" in again.stderr


def test_an_idle_keep_alive_connection_outlives_the_clients_own_timeout(services: Services) -> None:
    """httpx (and most clients) give up an idle connection after 5 s; the gateway must not
    close it first, or a request sent as it closes is lost. One connection, 6 s idle, then a
    second request on it: answered on the same connection."""
    with services.gateway() as base:
        with httpx.Client(base_url=base, timeout=10,
                          limits=httpx.Limits(max_connections=1, keepalive_expiry=60)) as http:
            first = http.get("/healthz")
            assert first.status_code == 200 and first.headers.get("connection", "").lower() != "close"
            time.sleep(6)
            connections = http._transport._pool.connections  # noqa: SLF001 - the one connection, kept
            assert len(connections) == 1 and connections[0].is_idle() and not connections[0].has_expired()
            assert http.get("/healthz").status_code == 200
            assert http._transport._pool.connections == connections  # noqa: SLF001 - reused, not reopened


def test_an_open_stack_refuses_to_listen_beyond_loopback(pg, tmp_path: Path) -> None:
    dsn = clone_database(pg)
    env = service_env(dsn, TESTAMENT_HOST="0.0.0.0", TESTAMENT_DATA_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "services.ingest"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode != 0 and "not a loopback address and no API key exists" in result.stderr
