"""When and what the built-in vehicle logs, as ArduCopter 4.7's ``AP_Logger`` decides (see ``dataflash``).

A log opens at the first arming of a boot (at boot with ``LOG_DISARMED``), stays open for the
boot, takes messages while armed and for 15 s after a disarm (``HAL_LOGGER_ARM_PERSIST``), and
closes when that ends if ``LOG_FILE_DSRMROT`` is set (the next arming opens a new one). At a log's
start it writes the system messages ArduPilot writes (firmware, VER, mission, rally, fence, frame,
mode, origin and home); then MODE, EV, ARM, MSG, ERR, PARM changes, CMD (mission items) and ORGN
from the vehicle's hooks, and the periodic messages at ArduCopter's rates, measured in its logs:
ATT, CTUN, POS, BAT, RCIN, RCOU and BARO (each of SITL's two) at 10 Hz, GPS at 5 Hz. ``tick``
costs one comparison between due times and asks for a ``Sample`` only when they are due.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .dataflash import MAX_FILES, DataFlashLog, log_path, read_lastlog

PERSIST_S = 15.0  # HAL_LOGGER_ARM_PERSIST: logging goes on this long after a disarm
REOPEN_S = 5.0  # LOGGER_FILE_REOPEN_MS: after a failed open or write, wait this long before trying again
# ArduPilot's enums the logger writes (LogEvent, AP_Arming::Method, ModeReason, LogErrorSubsystem)
EV_ARMED, EV_DISARMED, EV_AUTO_ARMED = 10, 11, 15
EV_LAND_COMPLETE_MAYBE, EV_LAND_COMPLETE, EV_NOT_LANDED = 17, 18, 28
EV_MOTORS_INTERLOCK_DISABLED, EV_MOTORS_INTERLOCK_ENABLED = 56, 57
ARM_METHODS = {"mavlink": 1, "landed": 13, "mission": 14, "auto disarm": 17, "unknown": 100}
REASON_RC, REASON_GCS, REASON_MISSION_END, REASON_INITIALISED = 1, 2, 8, 26
ERR_FLIGHT_MODE = 10  # ERR Subsys for a refused mode change; ECode is the mode number

FIRMWARE = "ArduCopter V4.7.0-dev (90700977)"
SYSTEM_ID = "Hd1219c7c4c5404aaa1f6d2a48adfda4"
# VER as 4.7.0-dev SITL writes it: board SITL, subtype none, 4.7.0 dev, git hash 0x90700977, copter
VER_FIELDS = {"BT": 3, "BST": 65535, "Maj": 4, "Min": 7, "Pat": 0, "FWT": 0, "GH": 0x90700977, "BU": 2, "FV": 2}
GPS_EPOCH_UNIX = 315964800  # 1980-01-06
GPS_LEAP_S = 18


@dataclass(slots=True)
class Sample:
    """The vehicle's state for the periodic messages. Angles in degrees (yaw 0..360), altitudes
    in metres (``alt`` AMSL, the others relative), speeds in m/s (``climb`` up positive), throttle
    0..1, battery in V, A, mAh, Wh, %. A ``des_*`` or ``baro_alt`` left None is the actual value."""

    lat: float
    lon: float
    alt: float
    rel_home_alt: float
    rel_origin_alt: float
    roll: float = 0.0
    pitch: float = 0.0
    yaw: float = 0.0
    des_roll: float | None = None
    des_pitch: float | None = None
    des_yaw: float | None = None
    climb: float = 0.0
    des_climb: float | None = None
    des_alt: float | None = None  # above the origin, as rel_origin_alt
    baro_alt: float | None = None  # above where the vehicle booted
    throttle_in: float = 0.0
    throttle_out: float = 0.0
    ground_speed: float = 0.0
    ground_course: float = 0.0
    gps_status: int = 6  # AP_GPS fix status: 0 no GPS ... 3 3D fix ... 6 RTK fixed (what SITL reports)
    gps_sats: int = 10
    gps_hdop: float = 1.21
    volt: float = 12.6
    curr: float = 0.0
    curr_tot: float = 0.0
    enrg_tot: float = 0.0
    rem_pct: int = 100
    rc_in: Sequence[int] = ()
    rc_out: Sequence[int] = ()
    landed: bool = True


def pressure(alt_amsl: float) -> float:
    """The standard atmosphere's pressure (Pa) at an altitude (m), as SITL's barometer models it."""
    return 101325.0 * max(0.0, 1 - 2.25577e-5 * alt_amsl) ** 5.25588


def _int(x: float) -> int:
    """Rounded, 0 for NaN or infinity (struct then clamps nothing: out-of-range values take the slow path)."""
    return int(round(x)) if math.isfinite(x) else 0


def _pad14(chans: Sequence[int]) -> list[int]:
    out = [int(c) for c in chans[:14]]
    return out + [0] * (14 - len(out))


class Logger:
    """ArduCopter's logging policy and messages for the built-in vehicle. ``params``: the live
    name -> value mapping (read for LOG_*, MOT_THST_HOVER, FRAME_TYPE and, at each log's start,
    every value for PARM); ``defaults``: name -> default value for PARM's Default. Times ``t`` are
    the vehicle's sim seconds since boot. Never raises for a disk problem: it says so on stderr,
    stops writing and tries a new log ``REOPEN_S`` later, as ArduPilot does."""

    def __init__(
        self,
        logs_dir: Path | str,
        params: Mapping[str, float],
        defaults: Mapping[str, float] | None = None,
        *,
        firmware: str = FIRMWARE,
        system_id: str = SYSTEM_ID,
        utc_at_boot: float | None = None,
    ):
        self.params = params
        self.defaults = defaults or {}
        self.log = DataFlashLog(logs_dir, int(params.get("LOG_MAX_FILES", MAX_FILES)) or MAX_FILES)
        self.firmware, self.system_id = firmware, system_id
        self.utc_at_boot = time.time() if utc_at_boot is None else utc_at_boot
        self.armed = False
        self.disarmed_at: float | None = None
        self.rotate = False  # LOG_FILE_DSRMROT: close the log when logging stops after a disarm
        self.retry_at = 0.0
        self.mode_num, self.mode_reason = 0, REASON_RC
        self.mission: list[Sequence[float]] = []
        self.origin: tuple[float, float, float] | None = None
        self.home_pos: tuple[float, float, float] | None = None
        self.next_due = 0.0
        self.batch = 0
        self.landed: bool | None = None
        self.interlock = False  # EV 57 written since arming (EV 56 at disarm then)
        self.booted = False

    # ---- policy ---------------------------------------------------------------------

    def _log_disarmed(self) -> int:
        return int(self.params.get("LOG_DISARMED", 0))

    def enabled(self, t: float) -> bool:
        """AP_Logger's logging_enabled() for its file backend (LOG_BACKEND_TYPE bit 0): armed,
        LOG_DISARMED, or within 15 s of a disarm."""
        if not int(self.params.get("LOG_BACKEND_TYPE", 1)) & 1:
            return False
        return (
            self.armed
            or self._log_disarmed() != 0
            or (self.disarmed_at is not None and t - self.disarmed_at < PERSIST_S)
        )

    def writing(self, t: float) -> bool:
        """A message written now goes into the log."""
        return self.log.active and self.enabled(t)

    def _open(self, t: float) -> None:
        if t < self.retry_at:
            return
        us = int(t * 1e6)
        rows = [(k, v, self.defaults.get(k, math.nan)) for k, v in self.params.items()]
        try:
            self.log.start(us, rows, discard=self._log_disarmed() == 3 and not self.armed)
        except OSError as e:
            self._failed(t, e)
            return
        self._startup_messages(us)
        self._flush(t)

    def _failed(self, t: float, e: OSError) -> None:
        print(f"DataFlash log: {e}; logging stops, trying a new log in {REOPEN_S:g} s", file=sys.stderr, flush=True)
        self.log.stop()
        self.retry_at = t + REOPEN_S

    def _flush(self, t: float) -> None:
        try:
            self.log.flush()
        except OSError as e:
            self._failed(t, e)

    def _startup_messages(self, us: int) -> None:
        """LoggerMessageWriter_WriteSysInfo, the mission, rally and fence writers, and Copter's
        vehicle startup messages, as the real log has them after its header."""
        w = self.log.write
        w("MSG", TimeUS=us, Message=self.firmware)
        w("VER", TimeUS=us, FWS=self.firmware, **VER_FIELDS)
        w("MSG", TimeUS=us, Message=self.system_id)
        w("MSG", TimeUS=us, Message="RC Protocol: UDP")
        self._mission_messages(us)
        w("MSG", TimeUS=us, Message="New rally")
        w("MSG", TimeUS=us, Message="New fence")
        self._vehicle_messages(us)

    def _mission_messages(self, us: int) -> None:
        self.log.write("MSG", TimeUS=us, Message="New mission")
        total = len(self.mission)
        for i, (cmd, p1, p2, p3, p4, lat, lon, alt, frame) in enumerate(self.mission):
            if i == 0 and self.home_pos is not None:  # item 0 is home: ArduPilot logs where it is
                lat, lon, alt = self.home_pos
            self.log.write(
                "CMD",
                TimeUS=us,
                CTot=total,
                CNum=i,
                CId=cmd,
                Prm1=p1,
                Prm2=p2,
                Prm3=p3,
                Prm4=p4,
                Lat=lat,
                Lng=lon,
                Alt=alt,
                Frame=frame,
            )

    def _vehicle_messages(self, us: int) -> None:
        ftype = int(self.params.get("FRAME_TYPE", 0))
        self.log.write("MSG", TimeUS=us, Message="Frame: QUAD/" + {0: "PLUS", 1: "X", 2: "V", 3: "H"}.get(ftype, "X"))
        self.log.write("MODE", TimeUS=us, Mode=self.mode_num, ModeNum=self.mode_num, Rsn=self.mode_reason)
        self._origin_messages(us)

    def _origin_messages(self, us: int) -> None:
        if self.origin is not None and self.home_pos is not None:
            for kind, (lat, lon, alt) in ((0, self.origin), (1, self.home_pos)):
                self.log.write("ORGN", TimeUS=us, Type=kind, Lat=lat, Lng=lon, Alt=alt)

    # ---- hooks the vehicle calls ------------------------------------------------------

    def boot(self, t: float, mode: int, reason: int = REASON_RC) -> None:
        """The vehicle finished booting (its initial mode set): delete the last log if it is
        marked to discard (LOG_DISARMED=3 and never armed), open a log if LOG_DISARMED."""
        self.booted = True
        self.mode_num, self.mode_reason = int(mode), int(reason)
        last = read_lastlog(self.log.logs_dir)
        if last is not None and last[1]:
            try:
                log_path(self.log.logs_dir, last[0]).unlink()
            except OSError:
                pass
        if self.enabled(t):
            self._open(t)

    def armed_now(self, t: float, forced: bool = False, method: int = ARM_METHODS["mavlink"]) -> None:
        """The vehicle armed. Give its "Arming motors" text after this, so that a log this opens
        has it; such a log lacks the arming's ARM and EV, as the real ArduCopter's does."""
        self.armed = True
        self.disarmed_at = None
        self.landed = True
        self.interlock = False
        if not self.log.active:
            if self.enabled(t):
                self._open(t)
            return
        if self._log_disarmed() == 3:
            self.log.keep()
        us = int(t * 1e6)
        self.log.write(
            "ARM",
            TimeUS=us,
            ArmState=1,
            ArmChecks=int(self.params.get("ARMING_CHECK", 1)),
            Forced=int(forced),
            Method=method,
        )
        self.log.write("EV", TimeUS=us, Id=EV_ARMED)
        self._flush(t)

    def disarmed_now(self, t: float, method: int = ARM_METHODS["mavlink"]) -> None:
        """The vehicle disarmed (before or after its "Disarming motors" text: the log takes it for 15 s)."""
        if not self.armed:
            return
        self.armed = False
        self.disarmed_at = t
        self.rotate = bool(self.params.get("LOG_FILE_DSRMROT", 0))
        if not self.log.active:
            return
        us = int(t * 1e6)
        self.log.write("ARM", TimeUS=us, ArmState=0, ArmChecks=0, Forced=0, Method=method)
        self.log.write("EV", TimeUS=us, Id=EV_DISARMED)
        if self.interlock:
            self.log.write("EV", TimeUS=us, Id=EV_MOTORS_INTERLOCK_DISABLED)
        self.interlock = False
        self._flush(t)

    def mode(self, t: float, mode: int, reason: int = REASON_GCS) -> None:
        """The flight mode changed (or was set again: ArduCopter logs MODE for either)."""
        self.mode_num, self.mode_reason = int(mode), int(reason)
        if self.writing(t):
            self.log.write("MODE", TimeUS=int(t * 1e6), Mode=mode, ModeNum=mode, Rsn=reason)
            self._flush(t)

    def mode_refused(self, t: float, mode: int) -> None:
        """A mode change was refused: ERR FLIGHT_MODE with the mode's number, as ArduCopter."""
        self.error(t, ERR_FLIGHT_MODE, mode)

    def error(self, t: float, subsystem: int, code: int) -> None:
        if self.writing(t):
            self.log.write("ERR", TimeUS=int(t * 1e6), Subsys=subsystem, ECode=code)
            self._flush(t)

    def event(self, t: float, ev: int) -> None:
        if self.writing(t):
            self.log.write("EV", TimeUS=int(t * 1e6), Id=ev)
            self._flush(t)

    def text(self, t: float, text: str) -> None:
        """A STATUSTEXT the vehicle sent: ArduPilot logs each as MSG, cut at STATUSTEXT's 50
        bytes (a real log has "Mode change to AUTO RTL failed: No return path or " for a longer one)."""
        if self.writing(t):
            self.log.write("MSG", TimeUS=int(t * 1e6), Message=text.encode()[:50])
            self._flush(t)

    def param(self, t: float, name: str, value: float) -> None:
        """A parameter was set."""
        if self.writing(t):
            self.log.write(
                "PARM",
                TimeUS=int(t * 1e6),
                Name=name.encode()[:16],
                Value=value,
                Default=self.defaults.get(name, math.nan),
            )
            self._flush(t)

    def set_mission(self, t: float, items: Iterable[Sequence[float]]) -> None:
        """The stored mission changed (and at boot, before ``boot``): items as (command, param1..4,
        lat, lon, alt, frame) with lat/lon in degrees, item 0 home. Logged as ArduPilot does:
        "New mission", a CMD per item, then the frame, mode, origin and home again."""
        self.mission = [tuple(it) for it in items]
        if self.writing(t):
            us = int(t * 1e6)
            self._mission_messages(us)
            self._vehicle_messages(us)
            self._flush(t)

    def set_home(self, t: float, home: tuple[float, float, float], origin: tuple[float, float, float]) -> None:
        """Home (and the EKF origin) set: lat, lon in degrees, alt AMSL in metres; ORGN both."""
        self.home_pos, self.origin = home, origin
        if self.writing(t):
            self._origin_messages(int(t * 1e6))
            self._flush(t)

    def tick(self, t: float, sample: Callable[[], Sample]) -> None:
        """Call every sim step; ``sample`` is called only when the periodic messages are due (10 Hz)."""
        if t < self.next_due:
            return
        self.next_due += 0.1
        if self.next_due <= t:  # a jump in sim time: keep the 10 Hz grid from here
            self.next_due = t + 0.1
        if not self.enabled(t):
            if self.rotate and self.log.active:
                self.rotate = False
                self.log.stop()
            return
        if not self.log.active:
            if not self.booted:
                return
            self._open(t)
            if not self.log.active:
                return
        self._periodic(int(t * 1e6), sample())
        self._flush(t)

    def close(self) -> None:
        """The vehicle stops (exit or reboot): flush and close the log."""
        self.log.stop()

    # ---- periodic messages -----------------------------------------------------------

    def _periodic(self, us: int, s: Sample) -> None:
        w = self.log.write_stored
        origin_alt = self.origin[2] if self.origin else s.alt - s.rel_origin_alt
        baro = s.rel_origin_alt if s.baro_alt is None else s.baro_alt
        des_alt = s.rel_origin_alt if s.des_alt is None else s.des_alt
        des_climb = s.climb if s.des_climb is None else s.des_climb
        lat7, lon7 = _int(s.lat * 1e7), _int(s.lon * 1e7)
        yaw = s.yaw % 360
        w(
            "ATT",
            us,
            s.roll if s.des_roll is None else s.des_roll,
            s.roll,
            s.pitch if s.des_pitch is None else s.des_pitch,
            s.pitch,
            yaw if s.des_yaw is None else s.des_yaw % 360,
            yaw,
            3,  # AEKF: the attitude comes from EKF3
        )
        press = pressure(s.alt)
        temp = _int((15.0 - 0.0065 * s.alt) * 100)  # cdegC, the standard atmosphere's
        sms, gnd_temp = (us // 1000) & 0xFFFFFFFF, 15.0 - 0.0065 * origin_alt
        for inst in (0, 1):  # SITL's two barometers, as the real log has them
            w("BARO", us, inst, baro, s.alt, press, temp, s.climb, sms, 0.0, gnd_temp, 1, press)
        w(
            "CTUN",
            us,
            s.throttle_in,
            0.0,
            s.throttle_out,
            self.params.get("MOT_THST_HOVER", 0.39),
            des_alt,
            s.rel_origin_alt,
            _int(baro * 100),
            math.nan,  # DSAlt: no rangefinder
            0.0,
            origin_alt + des_alt,
            _int(des_climb * 100),
            _int(s.climb * 100),
        )
        w("POS", us, lat7, lon7, s.alt, s.rel_home_alt, s.rel_origin_alt)
        w("BAT", us, 0, s.volt, s.volt, s.curr, s.curr_tot, s.enrg_tot, 0, 0.0, int(s.rem_pct), 1, 0)
        w("RCIN", us, *_pad14(s.rc_in))
        w("RCOU", us, *_pad14(s.rc_out))
        self.batch += 1
        if self.batch % 2 and s.gps_status:
            gps_s = self.utc_at_boot + us / 1e6 - GPS_EPOCH_UNIX + GPS_LEAP_S
            week = int(gps_s // 604800)
            w(
                "GPS",
                us,
                0,
                int(s.gps_status),
                int((gps_s - week * 604800) * 1000),
                week,
                int(s.gps_sats),
                _int(s.gps_hdop * 100),
                lat7,
                lon7,
                _int(s.alt * 100),
                s.ground_speed,
                s.ground_course % 360,
                -s.climb,
                0.0,
                1,
            )
        self._landing_events(us, s.landed)

    def _landing_events(self, us: int, landed: bool) -> None:
        if not self.armed or landed == self.landed:
            return
        if not landed:
            if not self.interlock:
                self.log.write_stored("EV", us, EV_AUTO_ARMED)
                self.log.write_stored("EV", us, EV_MOTORS_INTERLOCK_ENABLED)
                self.interlock = True
            self.log.write_stored("EV", us, EV_NOT_LANDED)
        else:
            self.log.write_stored("EV", us, EV_LAND_COMPLETE_MAYBE)
            self.log.write_stored("EV", us, EV_LAND_COMPLETE)
        self.landed = landed
