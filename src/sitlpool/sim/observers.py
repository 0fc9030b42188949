"""What happens on the built-in vehicle, for whoever records it (a flight log writer, a test).

Attach an observer with ``copter.observers.append(obs)``: in the simulator that is
``Simulator.__init__`` in ``server.py``, right after ``self.copter`` is made. The vehicle calls
every observer, in order, on its own thread, at the moment things happen, in sim time
(``vehicle.t``, seconds since boot):

- ``on_step(vehicle, dt)``: after each physics sub-step (at most 0.05 sim s), the state
  (``north``/``east``/``alt``, ``vn``/``ve``/``vd``, ``heading``, ``latlon()``, ``rel_alt``,
  ``mode``, ``armed``, ``landed_state``, ``flying``, ``target``, ``throttle``, ``voltage()``,
  ``current()``, ``consumed_mah``, ``energy_wh``, ``battery_remaining()``) already updated;
- ``on_ready(vehicle)``: boot ended ("ArduPilot Ready"), the initial mode set;
- ``on_mode(vehicle, old, new, reason)``: the custom mode number changed; reason ``"gcs"`` (a
  client's command), ``"initialised"`` (the initial mode at the end of boot) or a failsafe's
  (``rules.MODE_REASONS``: ``"radio_failsafe"``, ``"battery_failsafe"``, ``"gcs_failsafe"``,
  ``"ekf_failsafe"``, ``"fence_breached"``), whose ArduPilot ModeReason number is in that table;
- ``on_error(vehicle, subsystem, code)``: what ArduCopter logs as an ERR message (a failsafe,
  a GPS glitch, a thrust loss and their clearing): ``rules.ERR`` names the subsystems and codes;
- ``on_mode_refused(vehicle, mode)``: a mode change to ``mode`` was refused;
- ``on_arming(vehicle, armed, reason, forced)``: armed (reason ``"mavlink"``) or disarmed
  (``"mavlink"``, ``"landed"``, ``"auto disarm"``); ``forced``: the force magic was given;
- ``on_text(vehicle, severity, text)``: a STATUSTEXT, whole (before it is split into chunks);
- ``on_param(vehicle, name, value)``: a client set a parameter (as stored: integers rounded);
- ``on_mission(vehicle, items)``: the stored mission was replaced (upload, clear, home as item 0),
  ``items`` a list of ``MissionItem`` (item 0 is home; ``row()`` gives its numbers);
- ``on_mission_item(vehicle, seq, event)``: AUTO started (``"started"``) or finished
  (``"reached"``) mission item ``seq``;
- ``on_home(vehicle)``: home (``latlon(home=True)``, ``home_alt``) or the EKF origin
  (``origin_lat``/``origin_lon``/``origin_alt``) was set or moved.

Observers must not raise: an exception propagates into the vehicle's loop and stops it.
"""

from __future__ import annotations

from typing import Any


class VehicleObserver:
    """Does nothing on every event: subclass it and override what you record. ``vehicle`` is
    the ``sitlpool.sim.copter.Copter``."""

    def on_step(self, vehicle: Any, dt: float) -> None:
        pass

    def on_ready(self, vehicle: Any) -> None:
        pass

    def on_mode(self, vehicle: Any, old: int, new: int, reason: str) -> None:
        pass

    def on_mode_refused(self, vehicle: Any, mode: int) -> None:
        pass

    def on_error(self, vehicle: Any, subsystem: int, code: int) -> None:
        pass

    def on_arming(self, vehicle: Any, armed: bool, reason: str, forced: bool) -> None:
        pass

    def on_text(self, vehicle: Any, severity: int, text: str) -> None:
        pass

    def on_param(self, vehicle: Any, name: str, value: float) -> None:
        pass

    def on_mission(self, vehicle: Any, items: list) -> None:
        pass

    def on_mission_item(self, vehicle: Any, seq: int, event: str) -> None:
        pass

    def on_home(self, vehicle: Any) -> None:
        pass
