"""The process-handle API shared by SITLs we launch (managed) and SITLs someone else
started (unmanaged), and the process-manager contract of both.

Shaped after Syskit's ``Orocos::Process`` / ``UnmanagedProcess`` pair: a handle is
spawned, waited on until running, watched, killed and joined the same way whatever
started the process; the manager reports each dead handle once.
"""

from __future__ import annotations

import abc
import os
import signal as _sig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import NotRunning, ProcessError, SitlpoolError, UnknownEndpoint
from ..instances import SERIAL_NAMES, Ports


@dataclass(frozen=True)
class Status:
    """How a handle ended. Always a Status (never None) once the handle is dead."""

    exited: bool
    exit_code: int | None
    signalled: bool
    signal: int | None
    success: bool
    reason: str

    @classmethod
    def from_wait_status(cls, ws: int, requested: bool) -> Status:
        if os.WIFSIGNALED(ws):
            sig = os.WTERMSIG(ws)
            name = _sig.Signals(sig).name if sig in _sig.Signals._value2member_map_ else str(sig)
            why = f"killed by {name}" + (" (stopped by request)" if requested else "")
            return cls(False, None, True, sig, requested, why)
        code = os.WEXITSTATUS(ws)
        why = f"exited with code {code}" + (" (stopped by request)" if requested else "")
        return cls(True, code, False, None, code == 0 or requested, why)

    @classmethod
    def detached(cls, reason: str = "detached: stopped watching, the process was left running") -> Status:
        return cls(False, None, False, None, True, reason)

    @classmethod
    def lost(cls, reason: str) -> Status:
        return cls(False, None, False, None, False, reason)

    def as_dict(self) -> dict:
        return {
            "exited": self.exited,
            "exit_code": self.exit_code,
            "signalled": self.signalled,
            "signal": self.signal,
            "success": self.success,
            "reason": self.reason,
        }


@runtime_checkable
class SitlHandle(Protocol):
    """The process-handle contract: what a SITL handle offers whoever holds it (the pytest
    plugin's ``Sitl``, a session, a fleet's map function), whether it was launched here
    (``ManagedSitl``), attached to (``UnmanagedSitl``) or placed on a Ray node
    (``fleet.RemoteSitl``). Checked by a test against all three."""

    name: str
    link: Any  # the VehicleLink (a RemoteLink for a RemoteSitl); None until running

    @property
    def instance(self) -> int | None: ...

    @property
    def ports(self) -> Ports | None: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def ready(self) -> bool: ...

    @property
    def dead(self) -> bool: ...

    @property
    def alive(self) -> bool: ...

    @property
    def running(self) -> bool: ...

    @property
    def status(self) -> Status | None: ...

    def endpoint(self, name: str) -> str: ...

    def kill(self, wait: bool = False) -> None: ...

    def join(self, timeout: float | None = None) -> bool: ...


class HandleBase(abc.ABC):
    """What every handle derives from its own ``dead``/``ready``: ``alive``, ``running`` and
    ``endpoint`` (the name checked, refused while not running). Shared by ``SitlProcess``
    and the fleet's ``RemoteSitl``."""

    name: str

    @property
    @abc.abstractmethod
    def dead(self) -> bool: ...

    @property
    @abc.abstractmethod
    def ready(self) -> bool: ...

    @property
    def alive(self) -> bool:
        return not self.dead

    @property
    def running(self) -> bool:
        return self.alive

    def endpoint(self, name: str) -> str:
        """The MAVLink endpoint ``serial0``/``serial1``/``serial2`` as ``tcp:HOST:PORT``."""
        if name not in SERIAL_NAMES:
            raise UnknownEndpoint(f"unknown endpoint {name!r}: use one of {', '.join(SERIAL_NAMES)}")
        if self.dead or not self.ready:
            raise NotRunning(self._not_running())
        return self._endpoint(name)

    def _not_running(self) -> str:
        return f"{self.name} is not running; its endpoints exist only while it runs (wait_running first)"

    @abc.abstractmethod
    def _endpoint(self, name: str) -> str: ...


class SitlProcess(HandleBase):
    """A SITL process: launched by us (``ManagedSitl``) or by someone else (``UnmanagedSitl``)."""

    link: Any  # the VehicleLink once running (None before)

    def __init__(self, process_manager, name: str, host_id: str):
        self.process_manager = process_manager
        self.name = name
        self._host_id = host_id
        self._status: Status | None = None
        self._dead = threading.Event()
        self._quitting = threading.Event()
        self.link = None

    # ---- identity -------------------------------------------------------------------

    @property
    def host_id(self) -> str:
        """Where the process runs ("localhost" for this machine)."""
        return self._host_id

    @property
    def on_localhost(self) -> bool:
        return self._host_id == "localhost"

    @property
    @abc.abstractmethod
    def instance(self) -> int | None:
        """The SITL instance number (None for an endpoint whose instance is unknown)."""

    @property
    @abc.abstractmethod
    def ports(self) -> Ports | None:
        """The instance's ports (None when the instance is unknown)."""

    @property
    @abc.abstractmethod
    def pid(self) -> int | None:
        """The SITL's pid when it runs on this machine and is known."""

    # ---- life -----------------------------------------------------------------------

    @abc.abstractmethod
    def spawn(self) -> None:
        """Start the process (managed) or start resolving it (unmanaged)."""

    @abc.abstractmethod
    def wait_running(self, timeout: float | None = None) -> bool:
        """Block until the vehicle answers (a HEARTBEAT) or ``timeout``; True if running."""

    @property
    def ready(self) -> bool:
        """True once the vehicle has answered (the handle is running)."""
        return self.link is not None and self.link.vehicle.first_heartbeat is not None and not self.dead

    @property
    def quitting(self) -> bool:
        """True once ``kill`` was asked for (the handle may not be dead yet)."""
        return self._quitting.is_set()

    @property
    def dead(self) -> bool:
        return self._dead.is_set()

    @abc.abstractmethod
    def kill(self, wait: bool = False) -> None:
        """Stop: kill a managed SITL; stop watching an unmanaged one (never a signal)."""

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the handle to be dead; True if it is."""
        return self._dead.wait(timeout)

    @property
    def status(self) -> Status | None:
        """How it ended (a Status once dead, None before)."""
        return self._status

    @abc.abstractmethod
    def verify_threads_state(self) -> None:
        """Re-raise an unexpected exception of the handle's threads, if any."""

    # ---- for implementations --------------------------------------------------------

    def _finish(self, status: Status) -> None:
        """Record the end once and tell the manager (``dead_deployment``)."""
        if self._dead.is_set():
            return
        self._status = status
        if self.link is not None:
            self.link.close()
        self._dead.set()
        pm = self.process_manager
        if pm is not None:
            pm.dead_deployment(self)

    def __repr__(self) -> str:
        state = "dead" if self.dead else ("ready" if self.ready else "starting")
        return f"<{type(self).__name__} {self.name!r} instance={self.instance} pid={self.pid} {state}>"


class ProcessManager:
    """What both managers share: named handles, ``stop``, ``wait_termination``, ``dead_deployment``."""

    def __init__(self, on_dead: Callable[[SitlProcess], None] | None = None) -> None:
        self.processes: dict[str, SitlProcess] = {}
        self._dead: list[SitlProcess] = []
        self._cond = threading.Condition()
        self._on_dead = on_dead
        self._closed = False

    def _add(self, handle: SitlProcess) -> SitlProcess:
        with self._cond:
            if self._closed:
                raise ProcessError(
                    f"cannot start {handle.name!r}: this manager was closed (close_all); "
                    "create a new manager to launch or attach again"
                )
            if handle.name in self.processes:
                raise SitlpoolError(
                    f"a process named {handle.name!r} already exists in this manager; pick another name"
                )
            self.processes[handle.name] = handle
        return handle

    def forget(self, handle: SitlProcess) -> None:
        """Drop a handle that never ran (an attach that did not resolve): it is neither
        listed nor reported by ``wait_termination``."""
        with self._cond:
            if self.processes.get(handle.name) is handle:
                del self.processes[handle.name]
            if handle in self._dead:
                self._dead.remove(handle)

    def stop(self, name: str, wait: bool = True) -> None:
        handle = self.processes.get(name)
        if handle is None:
            raise SitlpoolError(
                f"no process named {name!r} in this manager; known: {', '.join(self.processes) or 'none'}"
            )
        handle.kill(wait=wait)

    def dead_deployment(self, handle: SitlProcess) -> None:
        """Called by a handle when it stops, killed or dead. Queues it for ``wait_termination``."""
        with self._cond:
            if handle not in self._dead:
                self._dead.append(handle)
            self._cond.notify_all()
        if self._on_dead is not None:
            self._on_dead(handle)

    def wait_termination(self, timeout: float | None = 0) -> dict[SitlProcess, Status]:
        """Handles that died since the last call, each reported once with its Status, then forgotten."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._dead:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            dead, self._dead = self._dead, []
            for h in dead:
                if self.processes.get(h.name) is h:
                    del self.processes[h.name]
        # a dead handle always has its Status (set before it is marked dead)
        return {h: h.status or Status.lost("ended without a recorded status") for h in dead}

    def close_all(self, wait: bool = True) -> None:
        """Stop every handle, those still starting included; later starts are refused."""
        with self._cond:
            self._closed = True
            handles = list(self.processes.values())
        for h in handles:
            if not h.dead:
                h.kill(wait=wait)
