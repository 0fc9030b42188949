"""Sim time: ``set_speedup`` (SIM_SPEEDUP, live) and the ``Pacer``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import MavlinkError, SitlpoolError
from ..flight import check_finite
from ..mavlink.link import A
from .core import apply_params, elsewhere, link_of, sim_time_s

MAX_SPEEDUP = 1000.0
PACE_SPEEDUP = 0.05  # a paced vehicle between calls: 1 s of flight per 20 s of thinking


def check_speedup(speedup) -> float:
    x = check_finite(speedup, "speedup")
    if not 0 < x <= MAX_SPEEDUP:
        raise SitlpoolError(
            f"speedup {x:g} is out of range; use a number above 0 and at most {MAX_SPEEDUP:g} "
            "(ArduPilot's SIM_SPEEDUP 0 is not a pause: it runs as fast as it can; 0.01 nearly stops the clock)"
        )
    return x


def set_speedup(x: Any, speedup: float) -> dict:
    """SIM_SPEEDUP, live: sim seconds per wall second from now on (takes effect within 0.5 s)."""
    s = check_speedup(speedup)
    link = link_of(x)
    far = elsewhere(link)
    if far is not None:  # there, a paced vehicle also runs at it during calls from now on
        return far("set_speedup", s)
    before = apply_params(link, {"SIM_SPEEDUP": s}, "set_speedup")
    return {"speedup": s, "was": before["SIM_SPEEDUP"], "sim_time_s": sim_time_s(link)}


def send_speedup(link, speedup: float, timeout: float = 2.0) -> bool:
    """SIM_SPEEDUP by one PARAM_SET, confirmed by its PARAM_VALUE: ~50 ms wall at 0.05, where a
    PARAM_REQUEST_READ (``set_param`` reads first) takes ArduCopter 1-2 s. False if unconfirmed."""
    got = threading.Event()

    def heard(m) -> None:
        if m.get_type() == "PARAM_VALUE" and m.param_id.rstrip("\x00") == "SIM_SPEEDUP":
            if abs(m.param_value - speedup) <= 1e-6 * max(1.0, speedup):
                got.set()

    try:
        link.require_writable("set SIM_SPEEDUP")
        link.add_listener(heard)
        try:
            link.send(
                A.MAVLink_param_set_message(
                    link.vehicle.sysid or 1, 1, b"SIM_SPEEDUP", speedup, A.MAV_PARAM_TYPE_REAL32
                )
            )
            return got.wait(timeout)
        finally:
            link.remove_listener(heard)
    except (MavlinkError, SitlpoolError):
        return False


class Pacer:
    """Keeps paced vehicles at ``PACE_SPEEDUP`` while no call runs, at their own speedup during
    calls: ``with pacer.busy(): ...`` around each call. A worker thread sends the changes; a
    call waits (at most ``wait_s``) until every paced vehicle runs at its speed again. While
    slowed, a link's ``lost_after`` grows so that slow HEARTBEATs do not read as a lost vehicle."""

    def __init__(self, paced: float = PACE_SPEEDUP, wait_s: float = 8.0):
        self.paced = paced
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._active = 0
        self._links: dict[Any, list] = {}  # link -> [speedup, applied, lost_after as it was]
        self._thread: threading.Thread | None = None

    def add(self, x: Any, speedup: float) -> None:
        link = link_of(x)
        with self._cond:
            self._links[link] = [float(speedup), float(speedup), link.lost_after]
            self._start()
            self._cond.notify_all()

    @property
    def pacing(self) -> bool:
        """Whether any link is paced (a call then waits for them in ``begin``)."""
        return bool(self._links)

    def remove(self, x: Any) -> None:
        with self._cond:
            self._links.pop(link_of(x), None)

    def paced_speedup(self, x: Any) -> float | None:
        with self._cond:
            e = self._links.get(link_of(x))
            return None if e is None else e[0]

    def set_speedup(self, x: Any, speedup: float) -> None:
        with self._cond:
            e = self._links.get(link_of(x))
            if e is not None:
                e[0] = float(speedup)
                if e[1] is not None:  # else the worker's send in flight is followed by this one
                    e[1] = e[0]

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sitlpool pacer", daemon=True)
            self._thread.start()

    def _target(self, e: list) -> float:
        return e[0] if self._active else self.paced

    def _pending(self):
        for link, e in list(self._links.items()):
            if link.state in ("closed", "stopped"):
                self._links.pop(link, None)
            elif e[1] != self._target(e):
                return link, e
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                while (job := self._pending()) is None:
                    self._cond.wait()
                link, e = job
                want = self._target(e)
                was, e[1] = e[1], None  # in flight: a call that begins now waits for it to land
            if want < e[0]:
                link.lost_after = max(e[2], 3.0 / want + 2.0)
            if not send_speedup(link, want):
                with self._cond:
                    if e[1] is None:
                        e[1] = was
                    self._cond.notify_all()
                if link.state in ("closed", "stopped"):
                    self.remove(link)
                time.sleep(0.2)
                continue
            t = time.monotonic()
            with self._cond:
                if e[1] is None:  # set_speedup meanwhile sent its own and said so
                    e[1] = want
                self._cond.notify_all()
            if want >= e[0]:
                # the last HEARTBEAT may be 20 s old: the usual patience once a new one came
                link.wait(lambda v, t=t: (v.last_heartbeat or 0) > t, 3.0)
                with self._cond:
                    if e[1] is not None and e[1] >= e[0]:
                        link.lost_after = e[2]

    def begin(self) -> None:
        with self._cond:
            self._active += 1
            self._cond.notify_all()
            deadline = time.monotonic() + self.wait_s
            while any(e[1] != e[0] and link.state == "connected" for link, e in self._links.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)

    def end(self) -> None:
        with self._cond:
            self._active = max(0, self._active - 1)
            self._cond.notify_all()

    @contextmanager
    def busy(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()
