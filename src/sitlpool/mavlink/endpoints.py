"""MAVLink endpoint strings (no pymavlink needed)."""

from __future__ import annotations

from ..errors import ConfigError
from ..instances import MAX_PORT, strict_int


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``tcp:HOST:PORT``, ``udp:HOST:PORT`` (listen there, as pymavlink's udpin: the vehicle
    sends to it) or ``udpout:HOST:PORT`` (send there first) -> (proto, host, port)."""
    try:
        proto, host, port_s = endpoint.rsplit(":", 2) if endpoint.count(":") >= 2 else ("tcp", *endpoint.rsplit(":", 1))
        port = strict_int(port_s)  # ASCII digits only: int() also takes '١٠٠' and '5_760'
        if proto not in ("tcp", "udp", "udpout") or not host or port is None or not 0 < port <= MAX_PORT:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"endpoint {endpoint!r} is not tcp:HOST:PORT, udp:HOST:PORT or udpout:HOST:PORT (e.g. tcp:127.0.0.1:5760)"
        ) from None
    return proto, host, port
