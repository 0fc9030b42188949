"""MAVLink endpoint strings (no pymavlink needed)."""

from __future__ import annotations


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``tcp:HOST:PORT`` / ``udp:HOST:PORT`` -> (proto, host, port); a clear ValueError otherwise."""
    try:
        proto, host, port_s = endpoint.rsplit(":", 2) if endpoint.count(":") >= 2 else ("tcp", *endpoint.rsplit(":", 1))
        port = int(port_s)
        if proto not in ("tcp", "udp") or not host or not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise ValueError(f"endpoint {endpoint!r} is not tcp:HOST:PORT or udp:HOST:PORT (e.g. tcp:127.0.0.1:5760)") from None
    return proto, host, port
