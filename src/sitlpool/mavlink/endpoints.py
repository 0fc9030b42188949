"""MAVLink endpoint strings (no pymavlink needed)."""

from __future__ import annotations

import ipaddress

from ..errors import ConfigError
from ..instances import MAX_PORT, strict_int

PROTOS = ("tcp", "udp", "udpout")


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``tcp:HOST:PORT``, ``udp:HOST:PORT`` (listen there, as pymavlink's udpin: the vehicle
    sends to it) or ``udpout:HOST:PORT`` (send there first) -> (proto, host, port); ``HOST:PORT``
    is tcp. An IPv6 host is written as is after the protocol (``tcp:::1:5760``) or in brackets
    (``tcp:[::1]:5760``, ``[::1]:5760``)."""
    try:
        if not isinstance(endpoint, str):
            raise ValueError
        proto, _, rest = endpoint.partition(":")
        if proto not in PROTOS or ":" not in rest:  # no protocol: HOST:PORT is tcp
            proto, rest = "tcp", endpoint
        host, _, port_s = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
            ipaddress.IPv6Address(host.partition("%")[0])
        elif ":" in host:  # only an IPv6 address has colons
            ipaddress.IPv6Address(host.partition("%")[0])
        port = strict_int(port_s)  # ASCII digits only: int() also takes '١٠٠' and '5_760'
        if not host or port is None or not 0 < port <= MAX_PORT:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"endpoint {endpoint!r} is not tcp:HOST:PORT, udp:HOST:PORT or udpout:HOST:PORT (e.g. tcp:127.0.0.1:5760)"
        ) from None
    return proto, host, port
