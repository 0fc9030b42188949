"""``Sitl``: a ready SITL handle with the helpers a test or a scenario uses to wait for
the vehicle's state and fly it (``arm_and_takeoff``, ``wait_altitude``, ``flight``...).

It wraps any handle of the process contract (``process.base.SitlHandle``): the pytest
plugin's fixtures give one over a ``ManagedSitl``/``UnmanagedSitl`` (or a fleet's
``RemoteSitl`` with ``--sitl-ray``), and a fleet's ``map`` gives one over the SITL it
launched on the node. It sits in the flight layer: Ray nodes import it without the
pytest plugin (``sitlpool.pytest_plugin.Sitl`` is the same class, re-exported).

Its flight's DataFlash log: ``log_path`` while it runs (the log being written, readable live
with ``sitlpool.logs``), ``kept_logs`` once it stopped (the records of the logs the log store
kept: ids and paths)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .flight import Flight
from .process.base import SitlHandle

if TYPE_CHECKING:
    from .logs import LogRecord


class Sitl:
    """A ready SITL handle with helpers to wait for state; every handle attribute is reachable."""

    def __init__(self, handle: SitlHandle):
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    @property
    def vehicle(self):
        return self.handle.link.vehicle

    @property
    def log_path(self) -> Path | None:
        """The DataFlash log the SITL is writing now (``logs/NNNNNNNN.BIN`` in its directory;
        read it live with ``sitlpool.logs``), or None: no log yet (ArduCopter and the built-in
        vehicle open one at arming unless ``LOG_DISARMED`` is set), the SITL stopped (see
        ``kept_logs``), or it runs elsewhere (a Ray node)."""
        current = getattr(self.handle, "current_log", None)
        if callable(current):
            return current()
        cwd = getattr(self.handle, "cwd", None)
        if cwd is None or self.handle.dead:
            return None
        # sitlpool.logs loads pymavlink's DFReader and numpy (~0.5 s): only when a log is asked for
        from .logs.sitldir import current_log

        return current_log(Path(cwd) / "logs")

    @property
    def kept_logs(self) -> list[LogRecord]:
        """The logs the log store kept when the SITL stopped (``LogRecord``: ``id``, ``path``,
        ``pinned``...), oldest first; empty while it runs, when it wrote none, or for a SITL
        that is not ours (an attached one's logs stay where they are)."""
        return list(getattr(self.handle, "kept_logs", None) or [])

    def wait(self, pred, timeout: float = 30) -> bool:
        """Wait until ``pred(vehicle_state)`` holds; False on timeout."""
        return self.handle.link.wait(pred, timeout)

    @property
    def flight(self) -> Flight:
        """The flight tools on this vehicle (``sitlpool.flight.Flight``): the same rules as the MCP tools."""
        f = self.__dict__.get("_flight")
        if f is None or f.link is not self.handle.link:
            f = self.__dict__["_flight"] = Flight(self.handle.link)
        return f

    def wait_ready_to_arm(self, timeout: float = 60) -> None:
        if not self.flight.wait_ready(timeout):
            raise AssertionError(
                f"instance {self.handle.instance}: not ready to arm after {timeout}s: "
                + "; ".join(self.flight.readiness()[1])
            )

    def arm_and_takeoff(self, altitude_m: float, timeout: float = 60) -> None:
        """Wait until ready, arm, take off (GUIDED for a copter, TAKEOFF mode for a plane), reach the altitude."""
        self.flight.arm_and_takeoff(altitude_m, timeout)
        self.wait_altitude(self.flight.reached(altitude_m), timeout)

    def wait_altitude(self, above_m: float, timeout: float = 60) -> None:
        if not self.wait(lambda v: (v.rel_alt or 0) >= above_m, timeout):
            raise AssertionError(
                f"instance {self.handle.instance}: altitude {self.vehicle.rel_alt} m, never reached {above_m} m"
            )

    def wait_disarmed(self, timeout: float = 60) -> None:
        if not self.wait(lambda v: not v.armed, timeout):
            raise AssertionError(f"instance {self.handle.instance}: still armed after {timeout}s")

    def texts(self) -> list[str]:
        return [t for _, _, t in self.vehicle.texts]

    def __repr__(self) -> str:
        return f"<Sitl {self.handle!r}>"


__all__ = ["Sitl"]
