"""The sessions backend of ``sitlpool serve --ray ADDRESS``: ``open_sitl`` places the SITL
on the cluster (a ``RemoteSitl``); every flight tool is unchanged and goes to the actor
that owns it; connection strings use the node's address. ``attach_sitl``, leases and
``kill_instance`` stay on the server's own machine."""

from __future__ import annotations

import time
from typing import Any

from ..errors import SessionError
from ..sessions import ARM_WAIT_READY_S, SessionLike, Sessions
from .fleet import Fleet
from .remote import RemoteSitl


class RemoteSession:
    """A session whose SITL runs on a node of the cluster (``sessions.SessionLike``, as a
    local ``Session``): its calls go to the actor, which runs them on its own ``Session``."""

    kind = "managed"

    def __init__(self, remote: RemoteSitl):
        self.id = remote.session_id
        self.label = remote.label
        self.handle = remote
        self.created = time.time()
        self.last_used = time.monotonic()
        self.last_goto: tuple[float, float, float] | None = None
        self.closing = False
        self.closed = False

    @property
    def link(self) -> Any:
        return self.handle.link

    @property
    def state(self) -> str:
        if self.closed:
            return "closed"
        return "closing" if self.closing else self.handle.state

    def info(self) -> dict:
        return {**self.handle.info, "state": self.state, "session_id": self.id, "label": self.label}

    def snapshot(self) -> dict:
        return self.handle.snapshot()

    def wait_until(self, condition: str, value: Any = None, timeout_s: float = 30) -> dict:
        return self.handle.wait_until(condition, value, timeout_s)

    def arm(self, force: bool = False, wait_ready_s: float = ARM_WAIT_READY_S) -> dict:
        return self.handle.arm(force, wait_ready_s)

    def disarm(self, force: bool = False) -> dict:
        return self.handle.disarm(force)

    def set_mode(self, mode: str) -> dict:
        return self.handle.set_mode(mode)

    def takeoff(self, altitude_m: float) -> dict:
        return self.handle.takeoff(altitude_m)

    def goto(self, lat: float, lon: float, altitude_m: float) -> dict:
        out = self.handle.goto(lat, lon, altitude_m)
        self.last_goto = (float(lat), float(lon), float(altitude_m))
        return out

    def land(self) -> dict:
        return self.handle.land()

    def rtl(self) -> dict:
        return self.handle.rtl()


class RaySessions(Sessions):
    """``Sessions`` whose ``open`` places SITLs on the Ray cluster at ``address``."""

    def __init__(self, address: str | None, settings=None, server_id: str | None = None):
        super().__init__(settings, server_id)
        self.fleet = Fleet(address)

    def open(  # type: ignore[override]  # a RemoteSession, not a local Session: both are SessionLike
        self,
        model: str = "quad",
        instance: int | None = None,
        label: str | None = None,
        speedup: float = 1.0,
        home: str | None = None,
        params: dict | None = None,
        wipe: bool = True,
        wait_s: float = 0,
        param_files: list | None = None,
        scripts: list | None = None,
        watch: list | str | None = None,
        tlog: bool = False,
    ) -> RemoteSession:
        unsupported = [
            k for k, v in (("param_files", param_files), ("scripts", scripts), ("watch", watch), ("tlog", tlog)) if v
        ]
        if unsupported:  # the files and outputs are on this machine, the SITL on a node
            raise SessionError(
                f"open_sitl on a Ray cluster does not take {', '.join(unsupported)} yet; give params "
                "(name=value) instead of parameter files, and watch a remote vehicle with sitlpool watch on its node"
            )
        if instance is not None:
            raise SessionError(
                "open_sitl on a Ray cluster places the SITL where there is room; leave instance out "
                "(the answer says which node and instance it got)"
            )
        remote = self.fleet.open(
            model=model,
            speedup=speedup,
            params=params,
            home=home,
            label=label,
            wait_s=min(max(0.0, wait_s or 0), 27.5),
            wipe=wipe,
        )
        s = RemoteSession(remote)
        with self._lock:
            self.sessions[s.id] = s
        return s

    def close(self, session_id: str) -> dict:
        s = self.get(session_id)
        if not isinstance(s, RemoteSession):
            return super().close(session_id)
        out = self._close_remote(s) or s.info()
        out["closed"] = (
            "SITL stopped, lease released"
            if s.handle.status is None or s.handle.status.success
            else f"the SITL had died: {s.handle.status.reason}"
        )
        return out

    def _close_remote(self, s: RemoteSession) -> dict | None:
        s.closing = True
        try:
            return s.handle.close()
        finally:
            s.closed = True
            with self._lock:
                self.sessions.pop(s.id, None)

    def _close(self, s: SessionLike) -> None:  # close_all and close_idle go through here
        if isinstance(s, RemoteSession):
            self._close_remote(s)
        else:
            super()._close(s)

    def close_all(self) -> None:
        super().close_all()
        self.fleet.close()


def ray_sessions(address: str | None, settings=None) -> RaySessions:
    """What ``serve --ray ADDRESS`` uses in place of ``Sessions(settings)``."""
    return RaySessions(address, settings)


__all__ = ["RaySessions", "RemoteSession", "ray_sessions"]
