"""This process's one connection to Ray (Ray allows one): made by the first ``Fleet``,
shared by every ``Fleet`` of the process (the pytest plugin's, a server's and a user's),
and shut down by the last one to close when a ``Fleet`` made it (a connection the caller
made with ``ray.init`` is left alone)."""

from __future__ import annotations

import logging
import os
import socket
import threading

import ray

from . import _ray_loopback
from .errors import FleetError
from .resources import ray_resources

_lock = threading.Lock()
_state = {"started": False, "users": 0}


def connect(address: str | None, log_to_driver: bool = False) -> None:
    """Join the cluster at ``address`` (``HOST:PORT`` of its head), or start a Ray of this
    machine alone (``None``) with this machine's ``sitl`` resource, on loopback only."""
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise FleetError(
            f"Ray address {address!r} is blank; give the head's HOST:PORT (ray start --head prints it), "
            "or no address for a Ray of this machine alone"
        )
    with _lock:
        if ray.is_initialized():
            _same_cluster(address)
        else:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            try:
                # Ray swaps a loopback address for the routable one while it connects: not for a
                # cluster on loopback (its nodes listen on 127.0.0.1 only)
                with _ray_loopback.keep_loopback(address):
                    if address is None:  # a Ray of this machine alone: nothing else can reach it
                        ray.init(
                            resources=ray_resources(),
                            include_dashboard=False,
                            _node_ip_address="127.0.0.1",
                            logging_level=logging.WARNING,
                            log_to_driver=log_to_driver,
                            namespace="sitlpool",
                        )
                    else:
                        _reachable(address)
                        ray.init(
                            address=address,
                            logging_level=logging.WARNING,
                            log_to_driver=log_to_driver,
                            namespace="sitlpool",
                        )
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise FleetError(
                    f"cannot connect to the Ray cluster at {address}: {' '.join(str(e).split())[:300]}; "
                    "check the head's address (ray start --head prints it) and that it runs"
                ) from None
            _state["started"] = True
        _state["users"] += 1


def disconnect() -> None:
    """One user fewer; the last one stops the connection a ``Fleet`` started."""
    with _lock:
        _state["users"] -= 1
        if _state["users"] <= 0 and _state["started"]:
            _state.update(users=0, started=False)
            if ray.is_initialized():
                ray.shutdown()


def _same_cluster(address: str | None) -> None:
    """A process already connected to Ray can only reach that cluster: an address naming
    another one is an error, not a fleet silently placed elsewhere."""
    if address is None or address == "auto" or "://" in address:
        return
    gcs = ray.get_runtime_context().gcs_address or ""
    if _endpoint(address) != _endpoint(gcs):
        raise FleetError(
            f"this process is already connected to the Ray cluster at {gcs}, not {address}; Ray allows one "
            "cluster per process: use that address, or another process for the other cluster"
        )


def _endpoint(address: str) -> tuple[str, str]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        host = socket.gethostbyname(host)
    except OSError:
        pass
    return host, port


def _reachable(address: str, timeout: float = 5.0) -> None:
    """ray.init retries a head that refuses connections for ever: find out first (a plain
    HOST:PORT only; ``auto``, ``ray://`` and the like are left to Ray)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"nothing answers at {address} ({e.strerror or e})") from None
