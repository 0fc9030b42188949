"""The built-in vehicle's state: every field it keeps, where it is (origin, home, frames),
its STATUSTEXTs, and the hooks observers see (``observers.py``). ``Copter`` adds the rules."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .geo import to_latlon, to_local
from .observers import VehicleObserver
from .params import Params
from .rules import AMSL_FRAMES, EVENTS, MODES, T_EKF_GPS, TERRAIN_FRAMES, A, mavlink
from .world import HoldError, Wind


@dataclass
class MissionItem:
    """One stored mission item, as AP_Mission stores it (degrees, altitude in its frame; see
    ``mission_protocol``)."""

    command: int
    lat: float
    lon: float
    alt: float
    params: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    frame: int = A.MAV_FRAME_GLOBAL_RELATIVE_ALT
    autocontinue: int = 1

    def row(self) -> list[float]:
        return [self.command, self.lat, self.lon, self.alt, *self.params, self.frame, self.autocontinue]

    @classmethod
    def from_row(cls, r: list[float]) -> MissionItem:
        return cls(int(r[0]), r[1], r[2], r[3], (r[4], r[5], r[6], r[7]), int(r[8]), int(r[9]))


class VehicleState:
    """Vehicle state. ``send(msg, link=None)`` broadcasts (link None) or replies on one link.

    Positions are metres from the EKF origin (where the vehicle booted): ``north``, ``east``,
    ``alt`` up (the ground is flat at the origin's altitude). Home moves to where it arms."""

    def __init__(
        self,
        params: Params,
        home: tuple[float, float, float, float],
        ready_delay: float,
        send: Callable,
        request_reboot: Callable[[], None],
    ):
        self.p = params
        # what SITL sets from its home at boot: the payload-drop point, the barometers' ground pressure
        ground = 101325.0 * (1 - 2.25577e-5 * home[2]) ** 5.25588
        params.update(
            {
                "SIM_PLD_LAT": home[0],
                "SIM_PLD_LON": home[1],
                "SIM_PLD_YAW": home[3],
                "BARO1_GND_PRESS": ground,
                "BARO2_GND_PRESS": ground,
            }
        )
        self.send = send
        self.request_reboot = request_reboot
        self.origin_lat, self.origin_lon, self.origin_alt, heading = home
        self.home_n = self.home_e = self.home_up = 0.0
        self.home_set = False
        self.t = 0.0  # sim seconds since boot
        self.utc_at_boot = time.time()  # SYSTEM_TIME's clock: UTC at boot plus sim time
        k = max(0.0, ready_delay) / T_EKF_GPS
        self.events = [(t * k, texts) for t, texts in EVENTS]
        self.event_i = 0
        self.north = self.east = 0.0
        self.alt = 0.0
        self.vn = self.ve = self.vd = 0.0  # m/s, down positive
        self.h_acc = 0.0  # horizontal acceleration available now (m/s², eased in by the jerk limit)
        self.heading = heading % 360
        self.mode = MODES["STABILIZE"]
        self.armed = False
        self.armed_at = 0.0
        self.landed_since: float | None = 0.0
        self.lift_at = 0.0  # a takeoff climbs from this sim time (spool-up)
        self.target: tuple[float, float, float] | None = None  # north, east, alt
        self.throttle = 1000  # RC channel 3 (override)
        self.throttle_until = 0.0
        self.consumed_mah = 0.0
        self.energy_wh = 0.0
        self.next_prearm = 30.0  # sim s: periodic "PreArm:" texts (as SITL, every 30 s)
        self.rtl_phase = ""
        self.rtl_loiter_until = 0.0
        self.booting = True  # until "ArduPilot Ready": a mode set meanwhile is undone by the initial mode
        # item 0 is home, as on ArduPilot: it exists once home has been written (home_changed)
        self.mission: list[MissionItem] = [MissionItem.from_row(r) for r in params.mission]
        self.mission_seq = 1 if len(self.mission) > 1 else 0
        self.mission_started = False
        self.mission_done = False
        self.started_seq = -1
        self.auto_landing = False
        self.hold_until: float | None = None
        self.velocity: tuple[float, float, float] | None = None
        self.velocity_until = 0.0
        self.yaw_target: float | None = None
        self.guided_speed: float | None = None
        self.text_id = 0
        self.paused = False
        self.paused_target: tuple[float, float, float] | None = None
        self.landed_state = A.MAV_LANDED_STATE_ON_GROUND
        self.prev_health = 0  # the pre-arm bit starts clear; SYS_STATUS goes out when it changes
        self.on_health_change: Callable[[], None] = lambda: None
        self.on_home: Callable[[], None] = lambda: None
        self.declination_set = False  # COMPASS_DEC is set once per boot, at the first GPS fix
        self.rtl_alt = 0.0  # the altitude RTL returns at (set when it starts its return)
        self.observers: list[VehicleObserver] = []  # see observers.py
        self.held_texts: list[tuple[int, str]] | None = None  # texts held back while a command is handled
        # the world (world.py, faults.py, failsafes.py): wind, attitude, faults, failsafes
        self.wind = Wind()
        self.hold = HoldError()  # a wind change's transient position error while holding (copter.py)
        self.hold_dn = self.hold_de = 0.0  # metres it adds to the reported positions now
        self.roll = self.pitch = 0.0  # degrees, as ATTITUDE reports them
        self.yaw_rate = 0.0  # deg/s
        self.fault_tilt = (0.0, 0.0)  # roll, pitch degrees a failed motor adds
        self.health_lost = 0  # SYS_STATUS health bits a fault or failsafe clears
        self.enabled_extra = 0  # SYS_STATUS enabled bits the state adds (fence, position control)
        self.ekf_pos_ok = True  # the EKF has a horizontal position (lost without GPS)
        self.ekf_extra = 0  # EKF_STATUS_REPORT flags a fault adds (GPS glitch, constant position)
        self.gps_fix = 6  # GPS_RAW_INT fix type once the GPS is detected
        self.est_dn = self.est_de = 0.0  # the EKF's position minus the true one (a GPS glitch reset)
        self.gps_dn = self.gps_de = 0.0  # the GPS's position minus the true one (a GPS glitch)
        self.baro_lost = False  # both barometers off long enough: no vertical position (faults.py)
        self.frozen_rel_alt: float | None = None  # the relative altitude real SITL reports while no baro is left
        self.motor_down = False  # on the ground with a failed motor: armed, no auto-disarm
        self.fs: dict[str, float] = {}  # failsafe and fault timers (sim s), see failsafes.py
        self.fence_items: Callable[[], list[MissionItem]] = lambda: []  # the uploaded fence (server.py)

    # ---- derived state --------------------------------------------------------------

    def reached(self, i: int) -> bool:
        return self.event_i > i

    @property
    def gps_detected(self) -> bool:
        return self.reached(3)

    @property
    def position_ok(self) -> bool:
        return self.reached(7) and self.ekf_pos_ok

    @property
    def flying(self) -> bool:
        return self.armed and self.landed_since is None

    def _geo(self, n: float, e: float) -> tuple[float, float]:
        return to_latlon(self.origin_lat, self.origin_lon, n, e)

    def latlon(self, home: bool = False) -> tuple[float, float]:
        """Where the vehicle (or its home) is, in degrees."""
        if home:
            return self._geo(self.home_n, self.home_e)
        return self._geo(self.north + self.hold_dn, self.east + self.hold_de)

    def est_latlon(self) -> tuple[float, float]:
        """Where the EKF says it is (the true position unless a GPS glitch moved the estimate)."""
        return self._geo(self.north + self.hold_dn + self.est_dn, self.east + self.hold_de + self.est_de)

    def gps_latlon(self) -> tuple[float, float]:
        """Where the GPS says it is (a glitch offsets it)."""
        return self._geo(self.north + self.hold_dn + self.gps_dn, self.east + self.hold_de + self.gps_de)

    def error(self, subsystem: int, code: int) -> None:
        """An ERR log event (AP_Logger's LogErrorSubsystem, LogErrorCode) for the observers."""
        self.notify("on_error", subsystem, code)

    @property
    def home_alt(self) -> float:
        """Home's altitude AMSL (m)."""
        return self.origin_alt + self.home_up

    @property
    def rel_alt(self) -> float:
        return self.alt - self.home_up

    def local(self, lat: float, lon: float) -> tuple[float, float]:
        return to_local(self.origin_lat, self.origin_lon, lat, lon)

    def alt_from(self, frame: int, alt: float) -> float:
        """A target altitude in ``frame`` as metres above the origin (what ``self.alt`` is);
        NaN (MAVSDK's "unset") keeps the current altitude."""
        if math.isnan(alt):
            return self.alt
        if frame in AMSL_FRAMES:
            return alt - self.origin_alt
        if frame in TERRAIN_FRAMES:
            return alt  # above the (flat) ground
        return alt + self.home_up

    def text(self, severity: int, text: str, link=None) -> None:
        """A STATUSTEXT; ArduPilot sends every text to every active GCS, so ``link`` is ignored.
        A text longer than 50 bytes goes in chunks (id, chunk_seq), as ArduPilot splits it."""
        if self.held_texts is not None:  # said while a command is handled: sent after its ACK
            self.held_texts.append((severity, text))
            return
        self.notify("on_text", severity, text)
        data = text.encode()
        if len(data) <= 50:
            self.send(mavlink.MAVLink_statustext_message(severity, data), None)
            return
        self.text_id = self.text_id % 65535 + 1
        for k in range(0, len(data), 50):
            self.send(mavlink.MAVLink_statustext_message(severity, data[k : k + 50], self.text_id, k // 50), None)

    # ---- what observers see (observers.py) ------------------------------------------

    def notify(self, event: str, *args: object) -> None:
        for o in self.observers:
            getattr(o, event)(self, *args)

    def change_mode(self, custom: int, reason: str) -> None:
        """The one place the mode number changes (observers hear of it, with ``reason``)."""
        old, self.mode = self.mode, custom
        if old != custom:
            self.notify("on_mode", old, custom, reason)
