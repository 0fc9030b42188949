"""Flying a vehicle: the one implementation of the vehicle's rules, used by the MCP tools,
``sitlpool demo``, the pytest plugin (``arm_and_takeoff``) and the Python API
(``Flight(handle.link)``).

What it knows, measured on ArduCopter/ArduPlane 4.7 SITL (see the shared README):
- a mode set while the vehicle still boots (HEARTBEAT system_status BOOT, before
  "ArduPilot Ready") is accepted and then lost: the vehicle sets its initial mode when
  it finishes. So modes are set only once it has booted.
- ready to arm = the SYS_STATUS pre-arm bit healthy and the EKF flying on GPS
  (EKF_STATUS_REPORT flags as ArduPilot's autotest requires); a vehicle reporting
  neither is ready with a 3D fix and a home.
- a copter takes off with NAV_TAKEOFF in GUIDED, armed; armed on the ground it disarms
  itself after DISARM_DELAY (10 s of sim time), so sitlpool re-arms it for a takeoff.
- a plane takes off in TAKEOFF mode (TKOFF_ALT) once armed, holds a circle in LOITER,
  flies to a point in GUIDED (DO_REPOSITION), and cannot land on command.
A refusal carries what the vehicle said after the command was sent, or, when it said
nothing, sitlpool's diagnosis of the likely cause and what to do.
"""

from __future__ import annotations

import logging
import math
import time

from .errors import MavlinkError, ReadOnlyLink, SitlpoolError
from .mavlink import mission
from .mavlink.link import EKF_NEEDED, A, CommandRefused, mode_mapping
from .mavlink.wire import FLOAT32_MAX, MAX_ALTITUDE_M, deg_e7, show  # noqa: F401  (MAX_ALTITUDE_M: public here)
from .process.binaries import resolve_binary  # noqa: F401  (public here: which binary flies a model)

log = logging.getLogger("sitlpool.flight")

MAX_TAKEOFF_M = 1000.0
BOOT_WAIT_S = 15.0
TAKEOFF_READY_WAIT_S = 25.0
PREARM_TEXT_AGE_S = 60.0  # PreArm texts repeat every 30 s of sim time while a check fails


def check_finite(value, what: str, lo: float | None = None, hi: float | None = None, unit: str = "") -> float:
    """``value`` as a finite float in [lo, hi], or a SitlpoolError saying what is wrong. Never
    beyond what MAVLink's 32-bit floats carry, bounds or not (``1e39`` fails when it is sent)."""
    try:
        x = float(value)
    except OverflowError:  # an integer beyond any float
        raise SitlpoolError(f"{what} {show(value)} is out of range: far beyond any value a vehicle takes") from None
    except (TypeError, ValueError):
        raise SitlpoolError(f"{what} {show(value)} is not a number") from None
    if not math.isfinite(x):
        raise SitlpoolError(
            f"{what} {show(value)} is not a finite number; give a real value{' in ' + unit if unit else ''}"
        )
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        rng = (
            f"from {lo:g} to {hi:g}"
            if lo is not None and hi is not None
            else (f"at least {lo:g}" if lo is not None else f"at most {hi:g}")
        )
        raise SitlpoolError(
            f"{what} {x:g}{' ' + unit if unit else ''} is out of range; use {rng}{' ' + unit if unit else ''}"
        )
    if abs(x) > FLOAT32_MAX:
        raise SitlpoolError(
            f"{what} {x:g} is out of range: MAVLink carries numbers as 32-bit floats, at most ±{FLOAT32_MAX:.3g}"
        )
    return x


def check_home(home: str | None) -> str | None:
    """``lat,lon,alt,heading`` checked before a vehicle is launched on it (a home of
    1000,1000 crashes it once it runs)."""
    if home is None or home == "":
        return None
    parts = [p.strip() for p in str(home).split(",")]
    if len(parts) != 4:
        raise SitlpoolError(f"home {home!r} needs 4 numbers: lat,lon,alt,heading (e.g. -35.363261,149.165230,584,353)")
    lat = check_finite(parts[0], "home latitude", -90, 90, "degrees")
    lon = check_finite(parts[1], "home longitude", -180, 180, "degrees")
    alt = check_finite(parts[2], "home altitude", -500, 10000, "m")
    hdg = check_finite(parts[3], "home heading", -360, 360, "degrees")
    return f"{lat:.9g},{lon:.9g},{alt:g},{hdg:g}"


def vehicle_kind(vehicle_type: int | None) -> str:
    if vehicle_type == A.MAV_TYPE_FIXED_WING or vehicle_type in range(
        A.MAV_TYPE_VTOL_DUOROTOR, A.MAV_TYPE_VTOL_RESERVED5 + 1
    ):
        return "plane"
    if vehicle_type in (A.MAV_TYPE_GROUND_ROVER, A.MAV_TYPE_SURFACE_BOAT):
        return "rover"
    if vehicle_type == A.MAV_TYPE_SUBMARINE:
        return "sub"
    return "copter"


def ekf_problem(flags: int) -> str:
    if flags & A.EKF_UNINITIALIZED:
        return "EKF not initialised yet"
    if flags & A.EKF_GPS_GLITCHING:
        return "EKF: GPS glitching"
    if flags & A.EKF_CONST_POS_MODE or not flags & A.EKF_POS_HORIZ_ABS:
        return f"EKF not using GPS yet (no absolute position; flags {flags:#x}): wait for 'EKF3 IMU0 is using GPS'"
    return f"EKF not healthy (flags {flags:#x}, missing {EKF_NEEDED & ~flags:#x})"


class Flight:
    """The flight tools on one VehicleLink. ``notes`` lists what sitlpool did on its own
    during the last call (a mode re-entered, a re-arm), so interfaces can say so."""

    def __init__(self, link, say=None):
        self.link = link
        self.say = say or (lambda msg: None)
        self.notes: list[str] = []
        self._armed_by_us: float | None = None  # when our last arm was accepted
        self._guided_at = 0.0  # when we last set GUIDED (a set to the current mode shows in no HEARTBEAT)

    @property
    def v(self):
        return self.link.vehicle

    @property
    def kind(self) -> str:
        return vehicle_kind(self.v.vehicle_type)

    def _note(self, msg: str) -> None:
        self.notes.append(msg)
        self.say(msg)
        log.info("%s: %s", self.link.name, msg)

    # ---- readiness ---------------------------------------------------------------------

    def prearm_texts(self) -> list[str]:
        now = time.time()
        texts = [t for when, _, t in list(self.v.texts) if t.startswith("PreArm:") and now - when < PREARM_TEXT_AGE_S]
        return list(dict.fromkeys(reversed(texts)))[:3]

    def readiness(self) -> tuple[bool, list[str]]:
        """(ready to arm, why not): the pre-arm bit, the EKF, the last PreArm texts."""
        v = self.v
        why: list[str] = []
        if self.link.state != "connected":
            why.append(f"the link is {self.link.state}")
        elif v.booting:
            why.append("the vehicle is still booting")
        if v.prearm_ok is False:
            texts = self.prearm_texts()
            why.append("pre-arm checks failing" + (": " + "; ".join(texts) if texts else " (no PreArm text yet)"))
        if v.ekf_ok is False:
            why.append(ekf_problem(v.ekf_flags))
        elif v.ekf_ok is None:  # a vehicle without EKF reports: a 3D fix and a home are what it needs
            if (v.gps_fix or 0) < 3:
                why.append(f"no 3D GPS fix yet (fix type {v.gps_fix})")
            elif v.home is None:
                why.append("no home position yet")
        return not why, why

    def wait_ready(self, timeout: float) -> bool:
        return self.link.wait(lambda _v: self.readiness()[0], timeout)

    def _after_boot(self) -> None:
        if self.v.booting:
            self.link.wait(lambda v: not v.booting, BOOT_WAIT_S)

    # ---- refusals --------------------------------------------------------------------

    def diagnose(self, what: str) -> str:
        """sitlpool's reading of why ``what`` was refused when the vehicle said nothing."""
        v = self.v
        ready, why = self.readiness()
        flying = self.flying()
        if what == "arm":
            if v.armed:
                return "it is already armed"
            if not ready:
                return "not ready to arm: " + "; ".join(why) + ". wait_until(condition='ready_to_arm') waits for it"
        elif what.startswith("takeoff"):
            if not v.armed:
                return "the vehicle is not armed (armed on the ground, a copter disarms itself after DISARM_DELAY): arm, then take off at once"
            if flying:
                return f"it is already flying ({v.rel_alt} m): use goto to change altitude"
            if self.kind == "copter" and v.mode != "GUIDED":
                return f"a copter takes off in GUIDED; it is in {v.mode}: set_mode GUIDED"
            if not ready:
                return "not ready: " + "; ".join(why)
        elif what.startswith("mode") and v.armed and not ready:
            return "this mode needs a position estimate while armed: " + "; ".join(why)
        state = f"mode {v.mode}, {'armed' if v.armed else 'disarmed'}, altitude {v.rel_alt} m"
        return f"none that sitlpool can see ({state}); snapshot's recent_texts may say more"

    def _refused(self, e):
        if isinstance(e, CommandRefused) and not e.texts:
            return CommandRefused(
                f"{e.what} refused by the vehicle ({e.result_name}), which said nothing; likely cause: "
                f"{self.diagnose(e.what)}",
                e.what,
                e.result,
                e.texts,
            )
        return e

    def _do(self, fn, *a):
        try:
            return fn(*a)
        except CommandRefused as e:
            raise self._refused(e) from None

    def _guided_before_gps(self) -> bool:
        v = self.v
        entered = max(v.mode_since or 0.0, self._guided_at)
        return v.ekf_ok_since is not None and entered < v.ekf_ok_since

    def flying(self) -> bool:
        v = self.v
        return v.armed and (v.rel_alt or 0) > 1.0

    # ---- actions ---------------------------------------------------------------------

    def mode_key(self, mode: str) -> str:
        mapping = mode_mapping(self.v.vehicle_type)
        key = str(mode).upper().strip()
        if key not in mapping:
            raise MavlinkError(f"unknown mode {mode!r}; this {self.kind} has: {', '.join(sorted(mapping))}")
        return key

    def set_mode(self, mode: str) -> None:
        key = self.mode_key(mode)
        self.link.require_writable(f"mode {key}")
        self._after_boot()  # a mode set while booting is lost when the boot finishes
        self._do(self.link.set_mode, key)
        if key == "GUIDED":
            self._guided_at = time.monotonic()
        if self.v.mode != key:
            raise MavlinkError(f"mode {key} was accepted but the vehicle reports {self.v.mode}; try again")

    def arm(self, force: bool = False, wait_ready_s: float = 0.0) -> None:
        """One arming attempt (after waiting up to ``wait_ready_s`` for readiness)."""
        self.link.require_writable("arm")
        self._after_boot()
        if wait_ready_s > 0 and not force and not self.readiness()[0]:
            self.wait_ready(wait_ready_s)
        self._do(self.link.arm, force)
        self._armed_by_us = time.monotonic()
        self.link.wait(lambda v: v.armed, 2.0)  # the HEARTBEAT that shows it follows the ACK

    def arm_when_ready(self, timeout: float = 60, retry_every: float = 0.5, on_refused=None) -> None:
        """Arm, retrying while the vehicle refuses; ``on_refused(error)`` hears each refusal."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.arm()
                return
            except ReadOnlyLink:
                raise
            except MavlinkError as e:
                if time.monotonic() > deadline or self.link.state in ("closed", "stopped"):
                    raise
                if on_refused is not None:
                    on_refused(e)
                self.link.wait(lambda _v: self.readiness()[0], retry_every)
                time.sleep(min(retry_every, 0.2))

    def disarm(self, force: bool = False) -> None:
        self._armed_by_us = None
        self._do(self.link.disarm, force)
        self.link.wait(lambda v: not v.armed, 2.0)

    def takeoff(self, altitude_m: float) -> None:
        alt = check_finite(altitude_m, "takeoff altitude", None, MAX_TAKEOFF_M, "m")
        if not alt > 0:
            raise SitlpoolError(f"takeoff altitude {alt} m must be above 0")
        self.link.require_writable(f"takeoff to {alt:g} m")
        self._after_boot()
        if self.kind == "plane":
            return self._plane_takeoff(alt)
        if self.kind != "copter":
            raise MavlinkError(f"takeoff: a {self.kind} does not take off; drive it with set_mode and goto")
        if self.flying():
            raise MavlinkError(
                f"takeoff refused by sitlpool: already flying at {self.v.rel_alt:.1f} m; use goto to change altitude"
            )
        if not self.v.armed and self._armed_by_us is None:
            raise MavlinkError(
                "takeoff needs the vehicle armed: arm first (retry while refused; "
                "wait_until(condition='ready_to_arm') waits until it can)"
            )
        if not self.readiness()[0]:
            self._note("waited until ready (EKF on GPS) before the takeoff")
            if not self.wait_ready(TAKEOFF_READY_WAIT_S):
                raise MavlinkError(
                    f"takeoff refused by sitlpool: not ready after {TAKEOFF_READY_WAIT_S:g}s: "
                    + "; ".join(self.readiness()[1])
                    + "; wait_until(condition='ready_to_arm') waits longer"
                )
        if self.v.mode != "GUIDED":
            self._note(f"set GUIDED for the takeoff (a copter takes off in GUIDED; it was in {self.v.mode})")
            self.set_mode("GUIDED")
        elif self._guided_before_gps():
            # harmless where GUIDED->GUIDED changes nothing; needed where a GUIDED entered
            # before the EKF used GPS refuses every takeoff (as the shared README describes)
            self._note("re-entered GUIDED: it was entered before the EKF used GPS")
            self.set_mode("GUIDED")
        for attempt in (1, 2):
            if not self.v.armed:
                self._note("re-armed: the vehicle had disarmed itself on the ground (DISARM_DELAY)")
                self.arm_when_ready(timeout=20)
            try:
                self._do(self.link.takeoff, alt)
                return
            except MavlinkError:
                # armed a moment ago and disarmed itself meanwhile: once more
                if attempt == 2 or self.v.armed or self._armed_by_us is None:
                    raise

    def _plane_takeoff(self, alt: float) -> None:
        if self.flying():
            raise MavlinkError(
                f"takeoff refused by sitlpool: already flying at {self.v.rel_alt:.1f} m; use goto, or set_mode LOITER to circle"
            )
        self.link.set_param("TKOFF_ALT", alt)
        if self.v.mode != "TAKEOFF":
            self._note(f"set TAKEOFF mode (a plane takes off in TAKEOFF mode, to TKOFF_ALT={alt:g} m)")
            self.set_mode("TAKEOFF")
        if not self.v.armed:
            self._note("armed in TAKEOFF mode: the plane launches itself")
            self.arm_when_ready(timeout=20)

    def goto(self, lat: float, lon: float, altitude_m: float) -> None:
        lat = check_finite(lat, "goto latitude", -90, 90, "degrees")
        lon = check_finite(lon, "goto longitude", -180, 180, "degrees")
        alt = check_finite(altitude_m, "goto altitude", 0, MAX_ALTITUDE_M, "m above home")
        self.link.require_writable("goto")
        if self.kind == "plane":
            # Plane flies to (and circles) a point given by DO_REPOSITION, switching to GUIDED itself
            self._do(
                self.link.command_int,
                A.MAV_CMD_DO_REPOSITION,
                A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
                -1,
                A.MAV_DO_REPOSITION_FLAGS_CHANGE_MODE,
                0,
                0,
                deg_e7(lat),
                deg_e7(lon),
                alt,
                "goto",
            )
            self.link.wait(lambda v: v.mode == "GUIDED", 2.0)  # the HEARTBEAT that shows it follows the ACK
            return
        if self.v.mode != "GUIDED":
            raise MavlinkError(f"goto needs GUIDED mode (the vehicle is in {self.v.mode}); set_mode GUIDED first")
        self.link.goto(lat, lon, alt)

    def land(self) -> None:
        if self.kind == "plane":
            self.link.require_writable("land")
            raise MavlinkError(
                "a plane cannot land on command where it is: ArduPlane lands at the end of a mission's "
                "landing sequence; use rtl (it circles home at RTL_ALTITUDE) or set_mode LOITER"
            )
        self._do(self.link.land)

    def rtl(self) -> None:
        self._do(self.link.rtl)

    # ---- the whole hop (demo, pytest helper) -----------------------------------------

    def arm_and_takeoff(self, altitude_m: float, timeout: float = 90, on_refused=None) -> None:
        """Wait until ready, arm and take off (GUIDED for a copter, TAKEOFF mode for a plane)."""
        if not self.wait_ready(timeout):
            raise MavlinkError(
                f"{self.link.name}: not ready to arm after {timeout:g}s: {'; '.join(self.readiness()[1])}"
            )
        if self.kind == "copter":
            self.set_mode("GUIDED")
            self.arm_when_ready(timeout, retry_every=0.5, on_refused=on_refused)
        self.takeoff(altitude_m)

    @staticmethod
    def reached(altitude_m: float) -> float:
        """The altitude at which a climb to ``altitude_m`` counts as done."""
        return altitude_m - max(0.5, 0.05 * altitude_m)


def start_mission(link, item: int | None = None) -> dict:
    """``start_mission``: fly the uploaded mission in AUTO from item 1 (or ``item``), arming first
    on the ground with the flight rules' readiness (a link of this process: a Ray node runs it there)."""
    return mission.start(link, item, ready=Flight(link).readiness)
