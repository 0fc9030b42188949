"""A MAVLink copter with simple kinematics, on simulated time.

Behaves like ArduCopter 4.7 where clients can tell: the boot timeline (GPS, EKF, pre-arm
texts at the sim times real SITL has them), mode numbers and which modes exist, arming
checks with ``Arm:``/``PreArm:`` texts, COMMAND_ACK results, GUIDED takeoff and go-to,
LAND, RTL, AUTO missions (RTL items flown inside AUTO), home reset at arming, landing
detection and auto-disarm. Speeds and accelerations come from the vehicle's own
parameters (WPNAV_*, LAND_*, RTL_*), as ArduCopter's do. Everything runs on sim time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("MAVLINK20", "1")
from pymavlink.dialects.v20 import ardupilotmega as mavlink  # noqa: E402

from .params import Params  # noqa: E402

MODES = {
    "STABILIZE": 0,
    "ACRO": 1,
    "ALT_HOLD": 2,
    "AUTO": 3,
    "GUIDED": 4,
    "LOITER": 5,
    "RTL": 6,
    "CIRCLE": 7,
    "LAND": 9,
    "DRIFT": 11,
    "SPORT": 13,
    "FLIP": 14,
    "AUTOTUNE": 15,
    "POSHOLD": 16,
    "BRAKE": 17,
    "THROW": 18,
    "AVOID_ADSB": 19,
    "GUIDED_NOGPS": 20,
    "SMART_RTL": 21,
    "FLOWHOLD": 22,
    "FOLLOW": 23,
    "ZIGZAG": 24,
    "SYSTEMID": 25,
    "AUTOROTATE": 26,
    "AUTO_RTL": 27,
    "TURTLE": 28,
}
MODE_NAMES = {v: k for k, v in MODES.items()}
# what ArduCopter 4.7 SITL answers for modes it cannot enter (texts as it sends them)
MODE_REFUSALS = {
    "FLIP": ["Mode change to FLIP failed: init failed"],
    "AUTOTUNE": ["Mode change to AUTOTUNE failed: init failed"],
    "FLOWHOLD": ["Mode change to FLOWHOLD failed: init failed"],
    "FOLLOW": ["Set FOLL_ENABLE = 1", "Mode change to FOLLOW failed: init failed"],
    "SYSTEMID": ["No axis selected, SID_AXIS = 0", "Mode change to SYSTEMID failed: init failed"],
    "AUTO_RTL": [
        "Unable to start landing sequence",
        "Mode change to AUTO RTL failed: No return path or landing sequence found",
    ],
    "TURTLE": ["Mode change to TURTLE failed: init failed"],
}
AP_NAMES = {"SMART_RTL": "SMARTRTL", "AUTO_RTL": "AUTO RTL"}  # ArduCopter's own spelling in its texts
NOT_BUILT = {"SPORT", "AUTOROTATE"}  # "No such mode N" on this build
NEEDS_POSITION = {
    "LOITER",
    "GUIDED",
    "AUTO",
    "RTL",
    "CIRCLE",
    "BRAKE",
    "POSHOLD",
    "SMART_RTL",
    "ZIGZAG",
    "AVOID_ADSB",
    "FOLLOW",
    "THROW",
    "DRIFT",
}
NOT_ARMABLE = {"AUTO", "RTL", "CIRCLE", "LAND", "SMART_RTL", "BRAKE", "AVOID_ADSB", "AUTO_RTL"}
GUIDED_LIKE = {"GUIDED", "AVOID_ADSB"}
PILOTED = {"STABILIZE", "ACRO", "ALT_HOLD", "LOITER", "POSHOLD", "DRIFT", "ZIGZAG"}
TAKEOFF_MODES = {"GUIDED"}
EARTH_R = 6378137.0
FORCE_MAGIC = 21196
SPOOL_S = 3.0  # sim s from takeoff command to lift-off (motor spool-up and takeoff logic), as measured

# Boot timeline of real ArduCopter SITL (sim seconds after its first client), scaled by
# --ready-delay (the time of "EKF3 IMU0 is using GPS", 41.5 s on the real one).
T_EKF_INIT, T_TILT, T_YAW, T_GPS, T_ORIGIN, T_AHRS, T_PREARM, T_EKF_GPS = 4.3, 5.55, 5.8, 9.8, 19.8, 22.5, 23.5, 41.5
BOOT_TEXTS = [
    (7, "RCInput: decoding UDP (Pulses)"),
    (6, "Calibrating barometer"),
    (6, "Barometer 1 calibration complete"),
    (6, "Barometer 2 calibration complete"),
    (6, "ArduPilot Ready"),
    (6, "AHRS: DCM active"),
]
EVENTS = [  # (time, texts)
    (T_EKF_INIT, ["EKF3 IMU0 initialised", "EKF3 IMU1 initialised", "AHRS: EKF3 active"]),
    (T_TILT, ["EKF3 IMU0 tilt alignment complete", "EKF3 IMU1 tilt alignment complete"]),
    (T_YAW, ["EKF3 IMU0 MAG0 initial yaw alignment complete", "EKF3 IMU1 MAG0 initial yaw alignment complete"]),
    (T_GPS, ["GPS 1: probing for u-blox at 230400 baud", "GPS 1: detected u-blox"]),
    (T_ORIGIN, ["EKF3 IMU0 origin set", "Field Elevation Set: {elev}m", "EKF3 IMU1 origin set"]),
    (T_AHRS, []),
    (T_PREARM, []),
    (T_EKF_GPS, ["EKF3 IMU0 is using GPS", "EKF3 IMU1 is using GPS"]),
]

A = mavlink  # short alias for constants
CMD_NAMES = {  # AP_Mission's short names, as its "Mission: N NAME" texts use them
    A.MAV_CMD_NAV_WAYPOINT: "WP",
    A.MAV_CMD_NAV_LOITER_UNLIM: "LoitUnlim",
    A.MAV_CMD_NAV_LOITER_TURNS: "LoitTurns",
    A.MAV_CMD_NAV_LOITER_TIME: "LoitTime",
    A.MAV_CMD_NAV_RETURN_TO_LAUNCH: "RTL",
    A.MAV_CMD_NAV_LAND: "Land",
    A.MAV_CMD_NAV_TAKEOFF: "Takeoff",
    A.MAV_CMD_NAV_SPLINE_WAYPOINT: "SplineWP",
    A.MAV_CMD_DO_CHANGE_SPEED: "ChangeSpeed",
    A.MAV_CMD_DO_JUMP: "Jump",
    A.MAV_CMD_CONDITION_DELAY: "Delay",
    A.MAV_CMD_CONDITION_YAW: "CondYaw",
    A.MAV_CMD_DO_SET_ROI: "SetROI",
    A.MAV_CMD_DO_SET_SERVO: "SetServo",
    A.MAV_CMD_DO_SET_RELAY: "SetRelay",
}
R_ACCEPTED, R_DENIED, R_FAILED = A.MAV_RESULT_ACCEPTED, A.MAV_RESULT_DENIED, A.MAV_RESULT_FAILED
AMSL_FRAMES = {A.MAV_FRAME_GLOBAL, A.MAV_FRAME_GLOBAL_INT}
TERRAIN_FRAMES = {A.MAV_FRAME_GLOBAL_TERRAIN_ALT, A.MAV_FRAME_GLOBAL_TERRAIN_ALT_INT}


_DECLINATION: list | None = None  # degrees on a 10-degree grid, rows from 90 S, columns from 180 W


def _declination_table() -> list:
    """The declination table pymavlink carries (ArduPilot's AP_Declination data), read from
    its source: importing ``pymavlink.mavextra`` would load numpy (+12 MB, 0.2 s) into
    every vehicle for 700 numbers."""
    global _DECLINATION
    if _DECLINATION is None:
        import ast
        import importlib.util

        with open(importlib.util.find_spec("pymavlink.mavextra").origin) as f:
            text = f.read()
        start = text.index("declination_table = [")
        end = text.index("]\n\n", start) + 1
        _DECLINATION = ast.literal_eval(text[text.index("[", start) : end])
    return _DECLINATION


def declination(lat: float, lon: float) -> float | None:
    """Magnetic declination (radians) at a place, interpolated between the four grid points
    around it as ArduPilot does; None outside the table."""
    if not (-90 <= lat < 90 and -180 <= lon < 180):
        return None
    table, step = _declination_table(), 10.0
    row, col = int((lat + 90) // step), int((lon + 180) // step)
    fy, fx = (lat + 90) / step - row, (lon + 180) / step - col
    south = table[row][col] + fx * (table[row][col + 1] - table[row][col])
    north = table[row + 1][col] + fx * (table[row + 1][col + 1] - table[row + 1][col])
    return math.radians(south + fy * (north - south))


@dataclass
class MissionItem:
    """One stored mission item, exactly as uploaded (degrees, altitude in its own frame)."""

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
        return cls(int(r[0]), r[1], r[2], r[3], tuple(r[4:8]), int(r[8]), int(r[9]))


class Copter:
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

    # ---- derived state --------------------------------------------------------------

    def reached(self, i: int) -> bool:
        return self.event_i > i

    @property
    def gps_detected(self) -> bool:
        return self.reached(3)

    @property
    def position_ok(self) -> bool:
        return self.reached(7)

    @property
    def flying(self) -> bool:
        return self.armed and self.landed_since is None

    def _geo(self, n: float, e: float) -> tuple[float, float]:
        return (
            self.origin_lat + math.degrees(n / EARTH_R),
            self.origin_lon + math.degrees(e / (EARTH_R * math.cos(math.radians(self.origin_lat)))),
        )

    def latlon(self, home: bool = False) -> tuple[float, float]:
        """Where the vehicle (or its home) is, in degrees."""
        return self._geo(self.home_n, self.home_e) if home else self._geo(self.north, self.east)

    @property
    def home_alt(self) -> float:
        """Home's altitude AMSL (m)."""
        return self.origin_alt + self.home_up

    @property
    def rel_alt(self) -> float:
        return self.alt - self.home_up

    def local(self, lat: float, lon: float) -> tuple[float, float]:
        n = math.radians(lat - self.origin_lat) * EARTH_R
        e = math.radians(lon - self.origin_lon) * EARTH_R * math.cos(math.radians(self.origin_lat))
        return n, e

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

    def prearm_failures(self) -> list[str]:
        """Why ArduCopter would refuse to arm now (empty: it would not), as its checks word it."""
        if self.p.get("ARMING_CHECK", 1) == 0:
            return []
        t = self.t
        e = self.events
        if self.booting or t < min(1.0, e[0][0]):
            return ["System not initialised"]
        if t < e[0][0]:
            return ["Accels inconsistent", "EKF attitude is bad", "AHRS: not using configured AHRS type"]
        if t < e[0][0] + (e[6][0] - e[0][0]) * 0.5:
            return ["Accels inconsistent"]
        if not self.reached(6):
            return ["Gyros inconsistent"]
        return []

    def battery_remaining(self) -> int:
        cap = max(1.0, self.p.get("BATT_CAPACITY", 3300))
        return max(0, int(round(100 * (1 - self.consumed_mah / cap))))

    def text(self, severity: int, text: str, link=None) -> None:
        """A STATUSTEXT; ArduPilot sends every text to every active GCS, so ``link`` is ignored.
        A text longer than 50 bytes goes in chunks (id, chunk_seq), as ArduPilot splits it."""
        data = text.encode()
        if len(data) <= 50:
            self.send(mavlink.MAVLink_statustext_message(severity, data), None)
            return
        self.text_id = self.text_id % 65535 + 1
        for k in range(0, len(data), 50):
            self.send(mavlink.MAVLink_statustext_message(severity, data[k : k + 50], self.text_id, k // 50), None)

    def health(self) -> tuple[int, int, int]:
        """SYS_STATUS present/enabled/health bits as ArduCopter SITL sets them on this timeline."""
        present, enabled, health = 0x5371FC0F, 0x52419C0F, 0x47519C0F
        if self.gps_detected:
            present, enabled, health = present | 0x20, enabled | 0x20, health | 0x20
        if self.reached(5):
            enabled, health = enabled | 0x200000, health | 0x200000
        if not self.prearm_failures() and not (self.p.get("ARMING_CHECK", 1) and not self.reached(6)):
            health |= A.MAV_SYS_STATUS_PREARM_CHECK
        return present, enabled, health

    def ekf_flags(self) -> int:
        e = self.events
        if self.position_ok:
            return 0x33F
        if self.t >= e[2][0] + 0.25:
            return 0xA7
        if self.t >= e[1][0]:
            return 0
        return 0x400

    # ---- physics ----------------------------------------------------------------

    def step(self, dt: float) -> None:
        self.t += dt
        while self.event_i < len(self.events) and self.t >= self.events[self.event_i][0]:
            i = self.event_i
            self.event_i += 1
            for tx in self.events[i][1]:
                self.text(A.MAV_SEVERITY_INFO, tx.format(elev=int(round(self.origin_alt))))
            if i == 4:
                self.home_set = True
                self.home_changed()
        if not self.declination_set and self.gps_detected:
            self.auto_declination()
        h = self.health()[2] & A.MAV_SYS_STATUS_PREARM_CHECK
        if h != self.prev_health:
            self.prev_health = h
            self.on_health_change()
        if not self.armed and self.t >= self.next_prearm:
            self.next_prearm = self.t + 30
            why = self.prearm_failures()
            if why:
                self.text(A.MAV_SEVERITY_CRITICAL, f"PreArm: {why[0]}")
        self.hold_position_after_velocity()
        self._fly(dt)
        amps = self.current()
        self.consumed_mah += amps * dt / 3.6
        self.energy_wh += amps * self.voltage() * dt / 3600

    def auto_declination(self) -> None:
        """As ArduCopter's compass (COMPASS_AUTODEC=1): once it has a position (its first GPS
        fix) it sets COMPASS_DEC from where it is, in RAM only (not saved, no PARAM_VALUE sent),
        overwriting a value the user saved. COMPASS_AUTODEC=0 leaves COMPASS_DEC alone; like
        ArduCopter it is retried each step, so AUTODEC set to 1 later in the boot still applies."""
        if not (self.p.get("COMPASS_AUTODEC", 1) and self.p.get("COMPASS_ENABLE", 1)):
            return
        self.declination_set = True
        dec = declination(*self.latlon())
        if dec is not None:
            self.p.set_in_ram({"COMPASS_DEC": dec})

    def _limits(self) -> tuple[float, float, float, float, float]:
        """Horizontal speed and accel, climb and descent speed, vertical accel (m/s, m/s²)."""
        g = self.p.get
        vh = self.guided_speed or g("WPNAV_SPEED", 1000) / 100
        return (
            max(0.2, vh),
            max(0.5, g("WPNAV_ACCEL", 250) / 100),
            max(0.1, g("WPNAV_SPEED_UP", 250) / 100),
            max(0.1, g("WPNAV_SPEED_DN", 150) / 100),
            max(0.3, g("WPNAV_ACCEL_Z", 100) / 100),
        )

    def _fly(self, dt: float) -> None:
        name = MODE_NAMES.get(self.mode, "")
        vh, ah, vup, vdn, az = self._limits()
        if not self.armed:
            self.vn = self.ve = self.vd = 0.0
            self.landed_state = A.MAV_LANDED_STATE_ON_GROUND
            return
        want: tuple[float, float, float] | None = None  # desired velocity n, e, d
        climbing = False
        if name in GUIDED_LIKE and self.velocity is not None and self.t < self.velocity_until:
            wn, we, wd = self.velocity
            sp = math.hypot(wn, we)
            if sp > vh:
                wn, we = wn / sp * vh, we / sp * vh
            want = (wn, we, max(-vup, min(vdn, wd)))
        elif name in GUIDED_LIKE and self.target:
            want = self._toward(*self.target, vh, ah, vup, vdn, az)
            climbing = self.target[2] > self.alt + 0.3
        elif name in PILOTED:
            if self.throttle_until < self.t:
                self.throttle = 1500 if name != "STABILIZE" and self.flying else self.throttle
            stick = (self.throttle - 1500) / 500
            wd = 0.0
            pup = self.p.get("PILOT_SPEED_UP", 250) / 100
            pdn = (self.p.get("PILOT_SPEED_DN", 0) or self.p.get("PILOT_SPEED_UP", 250)) / 100
            if name == "STABILIZE":
                wd = (
                    -pup * max(0.0, (self.throttle - 1350) / 650)
                    if self.throttle > 1350
                    else (pdn if self.throttle < 1300 else 0)
                )
            elif abs(stick) > 0.1:
                wd = -stick * pup if stick > 0 else -stick * pdn
            want = (0.0, 0.0, wd)
        elif name == "LAND":
            want = (0.0, 0.0, self._land_speed())
        elif name in ("RTL", "SMART_RTL"):
            want = self._rtl(vh, ah, vup, vdn, az)
        elif name == "AUTO":
            want = self._auto(vh, ah, vup, vdn, az)
            climbing = self.landed_state == A.MAV_LANDED_STATE_TAKEOFF
        if want is None:
            want = (
                self._toward(self.north, self.east, self.alt, vh, ah, vup, vdn, az) if self.flying else (0.0, 0.0, 0.0)
            )
        if self.landed_since is not None and (self.t < self.lift_at or not (want[2] < 0 or name in PILOTED)):
            want = (0.0, 0.0, 0.0)  # spooling up, or on the ground with nothing to climb to
        # accelerations limited as WPNAV_ACCEL / WPNAV_ACCEL_Z limit ArduCopter's, speeding up
        # eased in at the jerk limit (WPNAV_JERK in AUTO, PSC_JERK_XY otherwise): its S-curves
        dvn, dve = want[0] - self.vn, want[1] - self.ve
        dv = math.hypot(dvn, dve)
        if math.hypot(*want[:2]) > math.hypot(self.vn, self.ve) + 0.05:
            jerk = self.p.get("WPNAV_JERK", 1) if name == "AUTO" else self.p.get("PSC_JERK_XY", 5)
            self.h_acc = min(ah, self.h_acc + max(0.1, jerk) * dt)
        else:
            self.h_acc = 0.0 if math.hypot(self.vn, self.ve) < 0.05 else ah
        lim = max(self.h_acc, 0.05) * dt
        if dv > lim:
            dvn, dve = dvn / dv * lim, dve / dv * lim
        self.vn += dvn
        self.ve += dve
        self.vd += max(-az * dt, min(az * dt, want[2] - self.vd))
        self.north += self.vn * dt
        self.east += self.ve * dt
        self.alt -= self.vd * dt
        if self.yaw_target is not None:
            self.heading = self.yaw_target
        elif math.hypot(self.vn, self.ve) > 0.5:
            self.heading = math.degrees(math.atan2(self.ve, self.vn)) % 360
        if self.alt <= 0.0:
            self.alt = 0.0
            if self.vd > 0 and self.landed_since is None:
                self.text(A.MAV_SEVERITY_INFO, f"SIM Hit ground at {self.vd:f} m/s")
            self.vd = min(self.vd, 0.0)
            if self.vd == 0 and self.landed_since is None:
                self.landed_since = self.t
                self.vn = self.ve = 0.0
        elif self.alt > 0.3 and self.landed_since is not None:
            self.landed_since = None
        if self.landed_since is not None:
            self.vn = self.ve = 0.0
            waiting = self.t < self.lift_at
            self.landed_state = A.MAV_LANDED_STATE_TAKEOFF if waiting else A.MAV_LANDED_STATE_ON_GROUND
            idle = self.t - max(self.landed_since, self.armed_at, self.lift_at)
            landing = name in ("LAND", "RTL", "SMART_RTL") or (
                name == "AUTO" and (self.auto_landing or self.mission_done)
            )
            delay = self.p.get("DISARM_DELAY", 10)
            if not waiting and (landing and idle > 2.25 or (delay > 0 and idle > delay)):
                self.disarm("landed" if landing else "auto disarm")
        elif climbing or (self.landed_state == A.MAV_LANDED_STATE_TAKEOFF and self.vd < -0.1):
            self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
        elif self.vd > 0.1 and (name == "LAND" or self.auto_landing or self.rtl_phase == "land"):
            self.landed_state = A.MAV_LANDED_STATE_LANDING
        else:
            self.landed_state = A.MAV_LANDED_STATE_IN_AIR

    def _toward(self, tn: float, te: float, ta: float, vh, ah, vup, vdn, az) -> tuple[float, float, float]:
        """Desired velocity to a point: cruise, then brake so as to stop on it (accel-limited),
        along a straight line in 3D (the horizontal speed waits for the climb or descent)."""
        dn, de = tn - self.north, te - self.east
        d = math.hypot(dn, de)
        dz = ta - self.alt
        if abs(dz) > 0.5 and d > 0.5:
            vh = min(vh, d * (vup if dz > 0 else vdn) / abs(dz))
        v = min(vh, math.sqrt(2 * ah * d * 0.9), d * 2) if d > 0.02 else 0.0
        wn, we = (dn / d * v, de / d * v) if d > 0.02 else (0.0, 0.0)
        vz = min(vup if dz > 0 else vdn, math.sqrt(2 * az * abs(dz) * 0.9), abs(dz) * 2) if abs(dz) > 0.01 else 0.0
        return wn, we, -vz if dz > 0 else vz

    def _land_speed(self) -> float:
        low = self.p.get("LAND_ALT_LOW", 1000) / 100
        if self.alt < low:
            return max(0.1, self.p.get("LAND_SPEED", 50) / 100)
        return max(0.1, (self.p.get("LAND_SPEED_HIGH", 0) or self.p.get("WPNAV_SPEED_DN", 150)) / 100)

    def _rtl(self, vh, ah, vup, vdn, az) -> tuple[float, float, float]:
        """ArduCopter's RTL: climb to RTL_ALT, return at RTL_SPEED, loiter RTL_LOIT_TIME, land."""
        rtl_alt = max(self.p.get("RTL_ALT", 1500) / 100 + self.home_up, self.alt)
        speed = self.p.get("RTL_SPEED", 0) / 100 or vh
        if self.rtl_phase == "climb":
            self.rtl_alt = rtl_alt
            self.rtl_phase = "return"
        if self.rtl_phase == "return":
            want = self._toward(self.home_n, self.home_e, self.rtl_alt, speed, ah, vup, vdn, az)
            if (
                math.hypot(self.north - self.home_n, self.east - self.home_e) < 0.5
                and abs(self.alt - self.rtl_alt) < 0.3
            ):
                self.rtl_phase = "loiter"
                self.rtl_loiter_until = self.t + self.p.get("RTL_LOIT_TIME", 5000) / 1000
            return want
        if self.rtl_phase == "loiter":
            if self.t >= self.rtl_loiter_until:
                self.rtl_phase = "land"
            return self._toward(self.home_n, self.home_e, self.alt, speed, ah, vup, vdn, az)
        return 0.0, 0.0, self._land_speed()

    def _auto(self, vh, ah, vup, vdn, az) -> tuple[float, float, float] | None:
        """Fly the mission from ``mission_seq``: TAKEOFF, WAYPOINT, LOITER_*, LAND and
        RETURN_TO_LAUNCH (flown inside AUTO, as Copter does); DO_CHANGE_SPEED applies; other
        commands are passed over. At its end the vehicle holds (or stays landed)."""
        if self.mission_done or self.paused:
            return None
        radius = max(0.5, self.p.get("WPNAV_RADIUS", 200) / 100)
        while 0 < self.mission_seq < len(self.mission):
            it = self.mission[self.mission_seq]
            c = it.command
            if self.started_seq != self.mission_seq:  # as AP_Mission announces each command it starts
                self.started_seq = self.mission_seq
                self.text(A.MAV_SEVERITY_INFO, f"Mission: {self.mission_seq} {CMD_NAMES.get(c, str(c))}")
            here = it.lat == 0 and it.lon == 0  # latitude and longitude 0 mean "where the vehicle is"
            n, e = (self.north, self.east) if here else self.local(it.lat, it.lon)
            if c == A.MAV_CMD_NAV_TAKEOFF:
                ta = self.alt_from(it.frame, it.alt)
                if self.landed_since is not None and self.lift_at <= self.armed_at:
                    self.lift_at = self.t + SPOOL_S
                    self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
                if self.alt >= ta - 0.1:
                    self._reached()
                    continue
                return self._toward(self.north, self.east, ta, vh, ah, vup, vdn, az)
            if c in (
                A.MAV_CMD_NAV_WAYPOINT,
                A.MAV_CMD_NAV_SPLINE_WAYPOINT,
                A.MAV_CMD_NAV_LOITER_TIME,
                A.MAV_CMD_NAV_LOITER_UNLIM,
                A.MAV_CMD_NAV_LOITER_TURNS,
            ):
                ta = self.alt if it.alt == 0 and here else self.alt_from(it.frame, it.alt)
                dist = math.hypot(n - self.north, e - self.east)
                if dist <= radius and abs(ta - self.alt) < 0.5:
                    if c == A.MAV_CMD_NAV_LOITER_UNLIM:
                        return self._toward(n, e, ta, vh, ah, vup, vdn, az)
                    hold = it.params[0] if c in (A.MAV_CMD_NAV_WAYPOINT, A.MAV_CMD_NAV_LOITER_TIME) else 0.0
                    if self.hold_until is None:
                        self.hold_until = self.t + max(0.0, hold)
                    if self.t < self.hold_until:
                        return self._toward(n, e, ta, vh, ah, vup, vdn, az)
                    self.hold_until = None
                    self._reached()
                    continue
                return self._toward(n, e, ta, vh, ah, vup, vdn, az)
            if c == A.MAV_CMD_NAV_LAND:
                if math.hypot(n - self.north, e - self.east) > 0.5 and not self.auto_landing:
                    return self._toward(n, e, self.alt, vh, ah, vup, vdn, az)
                self.auto_landing = True
                return 0.0, 0.0, self._land_speed()
            if c == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
                if not self.rtl_phase:
                    self.rtl_phase = "climb"
                if self.rtl_phase == "land":
                    self.auto_landing = True
                return self._rtl(vh, ah, vup, vdn, az)
            if c == A.MAV_CMD_DO_CHANGE_SPEED and it.params[1] > 0:
                self.guided_speed = float(it.params[1])
            self.mission_seq += 1  # other DO_/CONDITION_ commands: nothing to simulate
            self.send(self.mission_current())
        if self.mission_seq >= len(self.mission) > 1:
            self._complete()
            self.send(self.mission_current())
        self.mission_done = True
        return None

    def _reached(self) -> None:
        self.send(mavlink.MAVLink_mission_item_reached_message(self.mission_seq))
        if self.mission[self.mission_seq].command != A.MAV_CMD_NAV_TAKEOFF:
            self.text(A.MAV_SEVERITY_INFO, f"Reached command #{self.mission_seq}")
        self.mission_seq += 1
        self.rtl_phase = ""
        if self.mission_seq >= len(self.mission):
            self._complete()
        self.send(self.mission_current())

    def _complete(self) -> None:
        self.mission_done = True
        self.mission_seq = 0  # ArduCopter reports a finished mission as seq 0, state COMPLETE

    def mission_current(self):
        count = len(self.mission)
        if count <= 1:
            state = A.MISSION_STATE_NO_MISSION
        elif self.mission_done:
            state = A.MISSION_STATE_COMPLETE
        elif MODE_NAMES.get(self.mode) == "AUTO" and self.mission_started:
            state = A.MISSION_STATE_ACTIVE
        elif self.mission_started:
            state = A.MISSION_STATE_PAUSED
        else:
            state = A.MISSION_STATE_NOT_STARTED
        return mavlink.MAVLink_mission_current_message(
            self.mission_seq, max(0, count - 1), state, int(MODE_NAMES.get(self.mode) == "AUTO")
        )

    def set_mission(self, items: list[MissionItem]) -> None:
        self.mission = items
        self.mission_seq = 1 if len(items) > 1 else 0
        self.mission_started = self.mission_done = False
        self.p.save_mission([it.row() for it in items])

    # ---- actions ----------------------------------------------------------------

    def set_home_here(self) -> None:
        self.home_n, self.home_e, self.home_up = self.north, self.east, self.alt
        self.home_set = True
        self.home_changed()

    def home_changed(self) -> None:
        """Home was (re)written: as AP_Mission, an empty mission gains item 0 (home); every GCS hears."""
        if not self.mission:
            self.mission = [MissionItem(A.MAV_CMD_NAV_WAYPOINT, 0.0, 0.0, 0.0, frame=A.MAV_FRAME_GLOBAL)]
            self.p.save_mission([it.row() for it in self.mission])
        self.on_home()

    def arm(self, force: bool, link) -> int:
        if self.armed:
            return R_ACCEPTED
        name = MODE_NAMES.get(self.mode, "")
        why = [] if force else [f"Arm: {w}" for w in self.prearm_failures()]
        if not why and not force and name in NEEDS_POSITION and not self.position_ok:
            why = ["Arm: Need Position Estimate"]
        if not why and not force and name in NOT_ARMABLE:
            why = [
                "Arm: Mode requires mission"
                if name == "AUTO" and len(self.mission) <= 1
                else f"Arm: {AP_NAMES.get(name, name)} mode not armable"
            ]
        if why:
            for w in why:
                self.text(A.MAV_SEVERITY_CRITICAL, w)
            return R_FAILED
        self.armed = True
        self.armed_at = self.t
        self.landed_since = self.t
        self.lift_at = self.t
        self.throttle = 1000
        self.target = None
        if self.gps_detected and self.reached(4):
            self.set_home_here()  # ArduCopter resets home where it arms
        self.text(A.MAV_SEVERITY_INFO, "Arming motors")
        return R_ACCEPTED

    def disarm(self, why: str = "", force: bool = False, link=None) -> int:
        if not self.armed:
            return R_ACCEPTED
        if self.flying and not force:
            return R_FAILED
        if MODE_NAMES.get(self.mode) == "AUTO" and self.auto_landing and 0 < self.mission_seq < len(self.mission):
            if self.mission[self.mission_seq].command == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
                self.send(mavlink.MAVLink_mission_item_reached_message(self.mission_seq))  # as Copter: not for LAND
            self._complete()
            self.send(self.mission_current())
        self.armed = False
        self.target = None
        self.vn = self.ve = self.vd = 0.0
        if self.alt > 0:  # forced disarm in the air: it falls (simply: lands at once)
            self.alt = 0.0
        self.landed_since = self.t
        self.landed_state = A.MAV_LANDED_STATE_ON_GROUND
        self.text(A.MAV_SEVERITY_INFO, "Disarming motors")
        return R_ACCEPTED

    def set_mode(self, custom: int, link) -> int:
        name = MODE_NAMES.get(custom)
        if name is None or name in NOT_BUILT:
            self.text(A.MAV_SEVERITY_WARNING, f"No such mode {custom}")
            return R_FAILED
        if name in MODE_REFUSALS:
            for tx in MODE_REFUSALS[name]:
                self.text(A.MAV_SEVERITY_WARNING, tx)
            return R_FAILED
        # ArduCopter accepts any mode while disarmed; armed, position modes need a position
        if self.armed and name in NEEDS_POSITION and not self.position_ok:
            self.text(A.MAV_SEVERITY_WARNING, f"Mode change to {AP_NAMES.get(name, name)} failed: requires position")
            return R_FAILED
        if self.armed and name == "AUTO" and len(self.mission) <= 1:
            self.text(A.MAV_SEVERITY_WARNING, "Mode change to AUTO failed: init failed")
            return R_FAILED
        if name == "AUTO" and self.armed and self.landed_since is not None:
            first = self.mission[1] if len(self.mission) > 1 else None
            if first is None or first.command != A.MAV_CMD_NAV_TAKEOFF:
                self.text(A.MAV_SEVERITY_WARNING, "Auto: Missing Takeoff Cmd")
                return R_FAILED
        if custom != self.mode:
            self.mode = custom
            self.paused = False
            self.velocity = self.yaw_target = None
            self.auto_landing = False
            self.hold_until = None
            if name == "AUTO":
                if self.mission_done or self.mission_seq < 1:
                    self.mission_seq = 1 if len(self.mission) > 1 else 0  # a finished mission starts over
                    self.mission_done = False
                self.started_seq = -1
                self.mission_started = self.armed
            self.target = (self.north, self.east, self.alt) if name in GUIDED_LIKE and self.flying else None
            self.rtl_phase = "climb" if name in ("RTL", "SMART_RTL") else ""
        return R_ACCEPTED

    def takeoff(self, alt: float, link) -> int:
        # ArduCopter refuses without a word: not armed, already flying, a mode without user takeoff
        name = MODE_NAMES.get(self.mode)
        if name not in TAKEOFF_MODES or not self.armed or self.flying:
            return R_FAILED
        if not alt > 0:
            return R_FAILED
        self.target = (self.north, self.east, self.alt + float(alt))
        self.lift_at = self.t + SPOOL_S  # still landed until it lifts off
        self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
        return R_ACCEPTED

    def goto(self, lat: float, lon: float, alt: float | None) -> bool:
        """A GUIDED position target; ``alt`` in metres above the origin (see ``alt_from``)."""
        if MODE_NAMES.get(self.mode) not in GUIDED_LIKE or not self.flying:
            return False
        n, e = self.local(lat, lon)
        return self.goto_local(n, e, alt)

    def goto_local(self, north: float, east: float, alt: float | None) -> bool:
        """A position target in metres from the origin (NED, alt up)."""
        if MODE_NAMES.get(self.mode) not in GUIDED_LIKE or not self.flying:
            return False
        if math.isnan(north + east + (0.0 if alt is None else alt)):
            return False
        self.target = (north, east, self.alt if alt is None else alt)
        self.velocity = None
        return True

    def set_velocity(self, vn: float, ve: float, vd: float) -> bool:
        """A velocity target (m/s NED); like ArduCopter it stops after 3 s without a new one."""
        if MODE_NAMES.get(self.mode) not in GUIDED_LIKE or not self.flying or math.isnan(vn + ve + vd):
            return False
        self.velocity = (vn, ve, vd)
        self.velocity_until = self.t + 3.0
        self.target = None
        return True

    def hold_position_after_velocity(self) -> None:
        if self.velocity is not None and self.t >= self.velocity_until:
            self.velocity = None
            self.target = (self.north, self.east, self.alt)

    def condition_yaw(self, angle: float, relative: bool, direction: int) -> int:
        base = self.heading if relative else 0.0
        self.yaw_target = (base + (angle if direction >= 0 else -angle)) % 360
        return R_ACCEPTED

    def pause(self, pause: bool) -> int:
        """DO_PAUSE_CONTINUE: in GUIDED or AUTO, flying: pause holds here, continue resumes."""
        if not self.flying or MODE_NAMES.get(self.mode) not in ("GUIDED", "AUTO"):
            self.text(A.MAV_SEVERITY_INFO, "Failed to pause" if pause else "Failed to resume")
            return R_FAILED
        if pause:
            self.paused_target, self.target = self.target, (self.north, self.east, self.alt)
            self.paused = True
        else:
            if MODE_NAMES.get(self.mode) == "GUIDED" and self.paused:
                self.target = self.paused_target or self.target
            self.paused = False
        return R_ACCEPTED

    def change_speed(self, speed: float) -> int:
        if not speed > 0:
            return R_DENIED
        if MODE_NAMES.get(self.mode) not in ("GUIDED", "AUTO", "RTL", "SMART_RTL", "AVOID_ADSB", "FOLLOW", "ZIGZAG"):
            return R_FAILED  # Copter takes a speed only in modes that fly to a target
        self.guided_speed = float(speed)
        return R_ACCEPTED

    def reboot(self, link) -> int:
        if self.armed:
            return R_FAILED
        self.request_reboot()
        return R_ACCEPTED

    def rc_override(self, chan3: int) -> None:
        if 800 <= chan3 <= 2200:
            self.throttle = chan3
            self.throttle_until = self.t + 1.0  # overrides time out, as RC_OVERRIDE_TIME does
        if (
            self.armed
            and self.landed_since is not None
            and self.throttle > 1350
            and MODE_NAMES.get(self.mode) in PILOTED
        ):
            self.landed_since = None

    # ---- state for telemetry ----------------------------------------------------

    def base_mode(self) -> int:
        m = (
            A.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
            | A.MAV_MODE_FLAG_STABILIZE_ENABLED
            | A.MAV_MODE_FLAG_MANUAL_INPUT_ENABLED
        )
        if MODE_NAMES.get(self.mode) in (
            "AUTO",
            "AUTO_RTL",
            "RTL",
            "LOITER",
            "AVOID_ADSB",
            "FOLLOW",
            "GUIDED",
            "CIRCLE",
            "POSHOLD",
            "BRAKE",
            "SMART_RTL",
        ):
            m |= A.MAV_MODE_FLAG_GUIDED_ENABLED
        if self.armed:
            m |= A.MAV_MODE_FLAG_SAFETY_ARMED
        return m

    def ready(self) -> None:
        """End of boot ("ArduPilot Ready"): the initial mode replaces any mode a client set while
        the vehicle was booting (ACKed and shown meanwhile), as real ArduCopter does."""
        self.booting = False
        for sev, tx in BOOT_TEXTS:
            self.text(sev, tx)
        self.mode = int(self.p.get("INITIAL_MODE", 0))
        self.target = self.velocity = None

    def system_status(self) -> int:
        if self.booting:
            return A.MAV_STATE_BOOT
        return A.MAV_STATE_ACTIVE if self.armed else A.MAV_STATE_STANDBY

    def voltage(self) -> float:
        # real SITL's battery (SIM_BATT_CAP_AH 0) holds SIM_BATT_VOLTAGE: it never reaches a
        # low-voltage failsafe, however long one flies; remaining % follows the mAh drawn
        return self.p.get("SIM_BATT_VOLTAGE", 12.6)

    def current(self) -> float:
        return 25.0 if self.flying else (1.0 if self.armed else 0.0)
