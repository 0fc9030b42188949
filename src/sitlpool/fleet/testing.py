"""The pytest plugin's backend for ``--sitl-ray ADDRESS``: ``sitl`` / ``sitl_factory`` get
their SITLs from the fleet, so a suite larger than one machine spreads over the cluster.

``manager(address)`` stands in for the ``ManagedManager`` the fixtures use: ``start(name,
...)`` returns a ready ``RemoteSitl`` (its ``link`` forwards the ``VehicleLink`` calls, so
the plugin's ``Sitl`` helpers work unchanged) and ``close_all()`` closes them."""

from __future__ import annotations

from .fleet import Fleet
from .remote import RemoteSitl

_fleets: dict[str | None, Fleet] = {}  # one connection per address per process (each xdist worker has its own)


class FleetManager:
    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.processes: dict[str, RemoteSitl] = {}

    def start(
        self,
        name: str,
        *,
        model: str = "quad",
        speedup: float | None = None,
        wait: float | None = None,
        owner: str | None = None,
        params: dict | None = None,
        home: str | None = None,
        wipe: bool = True,
        param_files: list | None = None,
        scripts: list | None = None,
        tlog: bool = False,
        **_ignored,
    ) -> RemoteSitl:
        """A ready SITL on whichever node has room, waiting up to ``wait`` s for a free slot;
        its parameter files and scripts travel to the node by content."""
        s = self.fleet.open(
            model=model,
            speedup=speedup or 1,
            params=params,
            home=home,
            label=owner or name,
            wait_s=wait,
            wipe=wipe,
            param_files=param_files,
            scripts=scripts,
            tlog=tlog,
        )
        self.processes[name] = s
        return s

    def close_all(self, wait: bool = True) -> None:
        for s in list(self.processes.values()):
            s.close()
        self.processes.clear()

    def wait_termination(self, timeout: float | None = 0) -> dict:
        return {}


def fleet_for(address: str | None) -> Fleet:
    f = _fleets.get(address)
    if f is None:
        f = _fleets[address] = Fleet(address)
    return f


def manager(address: str | None) -> FleetManager:
    """The ``sitl_factory`` manager for ``--sitl-ray ADDRESS``."""
    return FleetManager(fleet_for(address))


PYTEST_OPTION = ("--sitl-ray", "sitl_ray", "a Ray cluster (HOST:PORT of its head) to place the sitl fixtures' SITLs on")
