"""The built-in vehicle's DataFlash log, attached as an observer (``observers.py``).

``copter.observers.append(DataFlashObserver(Path("logs")))`` is all the vehicle needs: the observer
turns what the vehicle reports (ready, steps, modes and refused modes, arming, texts, parameters,
missions, home) into the calls a ``dataflash_logger.Logger`` takes, and reads the vehicle's state
for the periodic messages only when they are due (10 Hz). Observers must not raise: the Logger
reports a disk problem on stderr and goes on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .dataflash_logger import ARM_METHODS, REASON_GCS, REASON_RC, Logger, Sample
from .observers import VehicleObserver
from .params import DEFAULTS
from .rules import MODE_REASONS

# the vehicle's arming reasons -> AP_Arming::Method; its mode reasons -> ModeReason. The initial
# mode is logged as RC_COMMAND: real SITL's RC input (channel 5 at 1800) sets it, as its logs show
_METHODS = {
    "mavlink": ARM_METHODS["mavlink"],
    "landed": ARM_METHODS["landed"],
    "auto disarm": ARM_METHODS["auto disarm"],
}
_REASONS = {"gcs": REASON_GCS, "initialised": REASON_RC}


def mission_rows(items: list) -> list[tuple[float, ...]]:
    """``MissionItem``s as the Logger takes them: (command, param1..4, lat, lon, alt, frame)."""
    return [(it.command, *it.params, it.lat, it.lon, it.alt, it.frame) for it in items]


class DataFlashObserver(VehicleObserver):
    """Writes the vehicle's DataFlash log into ``logs_dir``; the log's policy is ``Logger``'s
    (ArduCopter's: a log from the first arming, or from boot with LOG_DISARMED)."""

    def __init__(self, logs_dir: Path | str = "logs", utc_at_boot: float | None = None):
        self.logs_dir = Path(logs_dir)
        self.utc_at_boot = utc_at_boot
        self.logger: Logger | None = None
        self.vehicle: Any = None
        self.unlogged: list[tuple[float, str]] = []  # texts of this instant the log did not take yet

    def on_ready(self, vehicle: Any) -> None:
        self.vehicle = v = vehicle
        defaults = {name: value for name, (value, _) in DEFAULTS.items()}
        self.logger = Logger(self.logs_dir, v.p.values, defaults, utc_at_boot=self.utc_at_boot)
        self.logger.set_mission(v.t, mission_rows(v.mission))
        if v.home_set:
            self.on_home(v)
        self.logger.boot(v.t, v.mode, REASON_RC)

    def on_step(self, vehicle: Any, dt: float) -> None:
        if self.logger is not None:
            self.vehicle = vehicle
            self.logger.tick(vehicle.t, self.sample)

    def on_home(self, vehicle: Any) -> None:
        if self.logger is not None:
            v = vehicle
            lat, lon = v.latlon(home=True)
            self.logger.set_home(v.t, (lat, lon, v.home_alt), (v.origin_lat, v.origin_lon, v.origin_alt))

    def sample(self) -> Sample:
        v = self.vehicle
        lat, lon = v.latlon()
        speed = math.hypot(v.vn, v.ve)
        flying = v.flying
        pwm = 1000 if not v.armed else (1500 if flying else 1100)  # as its SERVO_OUTPUT_RAW
        return Sample(
            lat=lat,
            lon=lon,
            alt=v.origin_alt + v.alt,
            rel_home_alt=v.rel_alt,
            rel_origin_alt=v.alt,
            roll=v.roll,  # degrees, as ATTITUDE's lean (wind, a failed motor) and real ATT.Roll
            pitch=v.pitch,
            yaw=v.heading,
            climb=-v.vd,
            des_alt=v.target[2] if v.target else None,
            throttle_in=(v.throttle - 1000) / 1000,
            throttle_out=v.p.get("MOT_THST_HOVER", 0.39) if flying else 0.0,
            ground_speed=speed,
            ground_course=math.degrees(math.atan2(v.ve, v.vn)) % 360 if speed > 0.1 else v.heading,
            gps_status=6 if v.gps_detected else 0,
            volt=v.voltage(),
            curr=v.current(),
            curr_tot=v.consumed_mah,
            enrg_tot=v.energy_wh,
            rem_pct=v.battery_remaining(),
            rc_in=(1500, 1500, v.throttle, 1500, 1800, 1000, 1000, 1800),  # as its RC_CHANNELS
            rc_out=(pwm, pwm, pwm, pwm),
            landed=v.landed_since is not None,
        )

    def on_mode(self, vehicle: Any, old: int, new: int, reason: str) -> None:
        if self.logger is not None:
            self.logger.mode(vehicle.t, new, _REASONS.get(reason, MODE_REASONS.get(reason, REASON_GCS)))

    def on_error(self, vehicle: Any, subsystem: int, code: int) -> None:  # failsafes and faults, as ERR
        if self.logger is not None:
            self.logger.error(vehicle.t, subsystem, code)

    def on_mode_refused(self, vehicle: Any, mode: int) -> None:
        if self.logger is not None:
            self.logger.mode_refused(vehicle.t, mode)

    def on_arming(self, vehicle: Any, armed: bool, reason: str, forced: bool) -> None:
        lg = self.logger
        if lg is None:
            return
        if armed:
            lg.armed_now(vehicle.t, forced, _METHODS.get(reason, ARM_METHODS["unknown"]))
            # the vehicle says "Arming motors" before it reports the arming; ArduCopter opens
            # its log first, so the text is the log's first MSG after the header
            for t, text in self.unlogged:
                if t == vehicle.t:
                    lg.text(t, text)
        else:
            lg.disarmed_now(vehicle.t, _METHODS.get(reason, ARM_METHODS["unknown"]))
        self.unlogged.clear()

    def on_text(self, vehicle: Any, severity: int, text: str) -> None:
        lg = self.logger
        if lg is None:
            return
        t = vehicle.t
        if lg.writing(t):
            lg.text(t, text)
        else:
            self.unlogged = [u for u in self.unlogged if u[0] == t][-4:] + [(t, text)]

    def on_param(self, vehicle: Any, name: str, value: float) -> None:
        if self.logger is not None:
            self.logger.param(vehicle.t, name, value)

    def on_mission(self, vehicle: Any, items: list) -> None:
        if self.logger is not None:
            self.logger.set_mission(vehicle.t, mission_rows(items))
