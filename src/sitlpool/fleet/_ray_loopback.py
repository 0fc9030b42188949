"""Keep a loopback Ray cluster on loopback: the one patch sitlpool makes to Ray.

Ray swaps a loopback address (``127.0.0.1``, ``localhost``) for the machine's routable
one (``ray._private.services.resolve_ip_for_localhost``) when a driver connects or a node
starts. A cluster whose nodes listen on 127.0.0.1 only (``ray start --node-ip-address
127.0.0.1``, and the Ray of this machine alone that ``Fleet()`` starts) then has no GCS at
the swapped address. ``keep_loopback()`` replaces that function with the identity while a
connection to such a cluster is being made, and puts it back when the last user leaves.

Ray's function is private: if a Ray release renames or removes it, ``keep_loopback``
raises ``RayIncompatible`` naming the Ray version, instead of silently doing nothing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections.abc import Iterator

import ray
import ray._private.services as services

from ..errors import SitlpoolError

NAME = "resolve_ip_for_localhost"
TESTED = "2.60"  # the Ray release the fleet tests ran on (pyproject pins ray to it)

_lock = threading.Lock()
_users = 0
_original = None


class RayIncompatible(SitlpoolError):
    """This Ray lacks what sitlpool's fleet relies on."""


def is_loopback(address: str | None) -> bool:
    """``HOST:PORT`` (or a bare host) names this machine's loopback (``None``: a Ray of this machine alone)."""
    if address is None:
        return True
    host = address.rsplit(":", 1)[0].strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _identity(host: str) -> str:
    return host


def apply() -> None:
    """Install the patch (counted: each ``apply`` is matched by one ``restore``)."""
    global _users, _original
    with _lock:
        if _users == 0:
            current = getattr(services, NAME, None)
            if not callable(current):
                raise RayIncompatible(
                    f"Ray {ray.__version__} has no ray._private.services.{NAME}, which sitlpool replaces to keep "
                    f"a loopback cluster on 127.0.0.1 (tested with Ray {TESTED}); install a Ray in that range "
                    "or give the cluster's routable address"
                )
            _original = current
            setattr(services, NAME, _identity)
        _users += 1


def restore() -> None:
    """Undo one ``apply``; the last one puts Ray's own function back."""
    global _users, _original
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0 and _original is not None:
            setattr(services, NAME, _original)
            _original = None


def active() -> bool:
    return getattr(services, NAME, None) is _identity


@contextlib.contextmanager
def keep_loopback(address: str | None = None) -> Iterator[None]:
    """While inside, a loopback ``address`` stays loopback (any other address: nothing done)."""
    if not is_loopback(address):
        yield
        return
    apply()
    try:
        yield
    finally:
        restore()
