"""Channels from one Testament service to another, spread over every replica.

An address setting (``TESTAMENT_<SERVICE>_ADDR``) is one of:

* ``host:port`` — one server;
* a gRPC target URI, ``dns:///name:port`` above all: every address the name resolves to
  (the pods behind a headless Kubernetes Service) is a replica;
* a comma list ``host:port,host:port`` — several replicas named by hand (local use); each
  host is resolved once, when the channel is made.

Every channel uses gRPC's ``round_robin`` policy: it connects to each resolved address and
sends successive calls to successive replicas, instead of pinning all calls to the first
connection's server. Servers end each connection after a while (server.py), so a client
re-resolves and finds replicas added since.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

import grpc

ROUND_ROBIN = ("grpc.lb_policy_name", "round_robin")


def _host_port(part: str) -> tuple[str, int]:
    host, sep, port = part.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{part!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)


def check_address(value: str) -> str:
    """The setting's shape, checked at start (a ValueError names what is wrong)."""
    if "://" in value or value.startswith(("dns:", "ipv4:", "ipv6:", "unix:")):
        return value
    parts = value.split(",")
    if any(not p.strip() for p in parts):
        raise ValueError(f"{value!r} has an empty entry")
    for part in parts:
        _host_port(part.strip())
    return value


def target(address: str) -> str:
    """The gRPC target of an address setting (a comma list becomes an ipv4:/ipv6: list)."""
    parts = [p.strip() for p in check_address(address).split(",")]
    if len(parts) == 1:
        return parts[0]
    resolved: list[str] = []
    for part in parts:
        host, port = _host_port(part)
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            try:
                ip = ipaddress.ip_address(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
            except OSError as exc:
                raise ValueError(f"{host!r} in {address!r} does not resolve: {exc}") from exc
        resolved.append(f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}")
    versions = {"ipv6" if r.startswith("[") else "ipv4" for r in resolved}
    if len(versions) > 1:
        raise ValueError(f"{address!r} mixes IPv4 and IPv6 addresses")
    return f"{versions.pop()}:{','.join(resolved)}"


def service_channel(address: str, *, options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
    """An insecure (in-cluster) channel to every replica behind ``address``, round-robin."""
    return grpc.aio.insecure_channel(target(address), options=[ROUND_ROBIN, *options])
