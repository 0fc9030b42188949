"""The messages the simulated copter sends, built from its state, and how ArduCopter 4.7
groups them into REQUEST_DATA_STREAM streams (its GCS_MAVLink stream tables)."""

from __future__ import annotations

import math

from .copter import Copter, mavlink

A = mavlink
NAN = float("nan")

STREAMS = {  # REQUEST_DATA_STREAM ids -> messages, as ArduCopter groups them (what it sends in SITL)
    A.MAV_DATA_STREAM_RAW_SENSORS: ("RAW_IMU", "SCALED_IMU2", "SCALED_IMU3", "SCALED_PRESSURE", "SCALED_PRESSURE2"),
    A.MAV_DATA_STREAM_EXTENDED_STATUS: (
        "SYS_STATUS",
        "POWER_STATUS",
        "MEMINFO",
        "MISSION_CURRENT",
        "GPS_RAW_INT",
        "NAV_CONTROLLER_OUTPUT",
    ),
    A.MAV_DATA_STREAM_RC_CHANNELS: ("SERVO_OUTPUT_RAW", "RC_CHANNELS"),
    A.MAV_DATA_STREAM_POSITION: ("GLOBAL_POSITION_INT", "LOCAL_POSITION_NED"),
    A.MAV_DATA_STREAM_EXTRA1: ("ATTITUDE", "SIMSTATE", "AHRS2"),
    A.MAV_DATA_STREAM_EXTRA2: ("VFR_HUD",),
    A.MAV_DATA_STREAM_EXTRA3: (
        "AHRS",
        "SYSTEM_TIME",
        "WIND",
        "TERRAIN_REPORT",
        "BATTERY_STATUS",
        "EKF_STATUS_REPORT",
        "VIBRATION",
        "ESC_TELEMETRY_1_TO_4",
    ),
}
# messages a client can ask for by id (SET_MESSAGE_INTERVAL, REQUEST_MESSAGE)
EXTRA = ("HEARTBEAT", "EXTENDED_SYS_STATE", "HOME_POSITION", "GPS_GLOBAL_ORIGIN", "AUTOPILOT_VERSION")
NAMES = sorted({n for group in STREAMS.values() for n in group} | set(EXTRA))
MSG_IDS = {name: getattr(A, f"MAVLINK_MSG_ID_{name}") for name in NAMES}
MSG_NAMES = {v: k for k, v in MSG_IDS.items()}

# AUTOPILOT_VERSION as 4.7.0-dev SITL sends it (git hash 90700977, FIRMWARE_VERSION_TYPE_DEV)
FLIGHT_SW_VERSION = (4 << 24) | (7 << 16) | (0 << 8) | 0
GIT_HASH = b"90700977"
UID2 = b"Hd1219c7c4c5404aaa1f6d2a48adfda4"[:17] + b"\0"
CAPABILITIES = 64495
BANNER = ("ArduCopter V4.7.0-dev (90700977)", "Hd1219c7c4c5404aaa1f6d2a48adfda4")


def frame_text(c: Copter) -> str:
    ftype = int(c.p.get("FRAME_TYPE", 0))
    return "Frame: QUAD/" + {0: "PLUS", 1: "X", 2: "V", 3: "H"}.get(ftype, "X")


def build(c: Copter, name: str):  # noqa: C901 - one branch per message, as a table would be
    """The message ``name`` for the copter's current state, or None when it has none to send."""
    ms = int(c.t * 1000) & 0xFFFFFFFF
    us = int(c.t * 1e6)
    lat, lon = c.est_latlon()  # where the EKF says it is (SIMSTATE: where it is)
    lat7, lon7 = int(lat * 1e7), int(lon * 1e7)
    amsl = c.origin_alt + c.alt
    yaw = math.radians(c.heading if c.heading <= 180 else c.heading - 360)
    if name == "HEARTBEAT":
        return A.MAVLink_heartbeat_message(
            A.MAV_TYPE_QUADROTOR, A.MAV_AUTOPILOT_ARDUPILOTMEGA, c.base_mode(), c.mode, c.system_status(), 3
        )
    if name == "SYS_STATUS":
        present, enabled, health = c.health()
        return A.MAVLink_sys_status_message(
            present,
            enabled,
            health,
            0,
            int(c.voltage() * 1000),
            int(c.current() * 100),
            c.battery_remaining(),
            0,
            0,
            0,
            0,
            0,
            0,
        )
    if name == "POWER_STATUS":
        return A.MAVLink_power_status_message(5000, 0, 0)
    if name == "MEMINFO":
        return A.MAVLink_meminfo_message(0, 65535, 524288)
    if name == "MISSION_CURRENT":
        return c.mission_current()
    if name == "GPS_RAW_INT":
        if not c.gps_detected:
            return A.MAVLink_gps_raw_int_message(us, 0, 0, 0, 0, 65535, 65535, 0, 0, 0)
        glat, glon = c.gps_latlon()
        if c.gps_fix < 3:  # lost or jammed: no fix, 3 satellites (as SITL reports it)
            return A.MAVLink_gps_raw_int_message(
                us, c.gps_fix, int(glat * 1e7), int(glon * 1e7), int(amsl * 1000), 121, 200, 0, 0, 3
            )
        return A.MAVLink_gps_raw_int_message(
            us,
            6,
            int(glat * 1e7),
            int(glon * 1e7),
            int(amsl * 1000),
            121,
            200,
            int(math.hypot(c.vn, c.ve) * 100),
            int(c.heading * 100) % 36000,
            10,
            int(amsl * 1000),
            300,
            300,
            0,
            0,
            0,
        )
    if name == "NAV_CONTROLLER_OUTPUT":
        tgt = c.target or (c.north, c.east, c.alt)
        dist = math.hypot(tgt[0] - c.north, tgt[1] - c.east)
        bearing = int(math.degrees(math.atan2(tgt[1] - c.east, tgt[0] - c.north))) % 360 if dist > 0.1 else 0
        return A.MAVLink_nav_controller_output_message(
            0, 0, bearing, bearing, min(65535, int(dist)), tgt[2] - c.alt if c.flying else 0.0, 0, 0
        )
    if name == "GLOBAL_POSITION_INT":
        rel = c.rel_alt if c.frozen_rel_alt is None else c.frozen_rel_alt  # no baro left: real SITL's stays put
        return A.MAVLink_global_position_int_message(
            ms,
            lat7,
            lon7,
            int((amsl + rel - c.rel_alt) * 1000),
            int(rel * 1000),
            int(c.vn * 100),
            int(c.ve * 100),
            int(c.vd * 100),
            int(c.heading * 100) % 36000,
        )
    if name == "LOCAL_POSITION_NED":
        if not c.position_ok:
            return None  # ArduCopter has no local position before the EKF uses GPS
        return A.MAVLink_local_position_ned_message(
            ms, c.north + c.hold_dn + c.est_dn, c.east + c.hold_de + c.est_de, -c.alt, c.vn, c.ve, c.vd
        )
    if name == "SERVO_OUTPUT_RAW":
        pwm = 1000 if not c.armed else (1100 if not c.flying else 1500)
        return A.MAVLink_servo_output_raw_message(
            us & 0xFFFFFFFF, 0, pwm, pwm, pwm, pwm, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        )
    if name == "RC_CHANNELS":
        thr = 950 if "rc_neutral" in c.fs and c.throttle_until < c.t else c.throttle  # SIM_RC_FAIL=2, latched
        return A.MAVLink_rc_channels_message(
            ms, 8, 1500, 1500, thr, 1500, 1800, 1000, 1000, 1800, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255
        )
    if name == "RAW_IMU":
        return A.MAVLink_raw_imu_message(us, 0, 0, -1000, 0, 0, 0, 200, 50, 400, 0, 0)
    if name in ("SCALED_IMU2", "SCALED_IMU3"):
        cls = A.MAVLink_scaled_imu2_message if name == "SCALED_IMU2" else A.MAVLink_scaled_imu3_message
        return cls(ms, 0, 0, -1000, 0, 0, 0, 200, 50, 400, 0)
    if name in ("SCALED_PRESSURE", "SCALED_PRESSURE2"):
        cls = A.MAVLink_scaled_pressure_message if name == "SCALED_PRESSURE" else A.MAVLink_scaled_pressure2_message
        press = 1013.25 * (1 - 2.25577e-5 * amsl) ** 5.25588
        return cls(ms, press, 0.0, 3100, 0)
    roll, pitch = math.radians(c.roll), math.radians(c.pitch)
    if name == "ATTITUDE":
        return A.MAVLink_attitude_message(ms, roll, pitch, yaw, 0, 0, math.radians(c.yaw_rate))
    if name == "SIMSTATE":
        tlat, tlon = c.latlon()
        return A.MAVLink_simstate_message(
            roll, pitch, yaw, 0, 0, -9.80665, 0, 0, math.radians(c.yaw_rate), int(tlat * 1e7), int(tlon * 1e7)
        )
    if name == "AHRS2":
        return A.MAVLink_ahrs2_message(roll, pitch, yaw, amsl, lat7, lon7)
    if name == "VFR_HUD":
        thr = 0 if not c.armed else (39 if c.flying else 0)
        sp = math.hypot(c.vn, c.ve)
        return A.MAVLink_vfr_hud_message(sp, sp, int(c.heading) % 360, thr, amsl, -c.vd)
    if name == "AHRS":
        return A.MAVLink_ahrs_message(0, 0, 0, 0, 0, 0, 0)
    if name == "SYSTEM_TIME":
        return A.MAVLink_system_time_message(int((c.utc_at_boot + c.t) * 1e6), ms)  # on sim time
    if name == "WIND":
        return A.MAVLink_wind_message(-180.0, 0.0, 0.0) if c.position_ok else None
    if name == "TERRAIN_REPORT":
        return A.MAVLink_terrain_report_message(lat7, lon7, 0, 0.0, amsl, 504, 0)
    if name == "BATTERY_STATUS":
        return A.MAVLink_battery_status_message(
            0,
            0,
            0,
            32767,
            [int(c.voltage() * 1000)] + [65535] * 9,
            int(c.current() * 100),
            int(c.consumed_mah),
            int(c.energy_wh * 36),
            c.battery_remaining(),
            0,
            A.MAV_BATTERY_CHARGE_STATE_OK,
            [0, 0, 0, 0],
            0,
            0,
        )
    if name == "EKF_STATUS_REPORT":
        return A.MAVLink_ekf_status_report_message(c.ekf_flags(), 0.01, 0.01, 0.001, 0.005, 0.0, 0.0)
    if name == "VIBRATION":
        return A.MAVLink_vibration_message(us, 0.003, 0.003, 0.003, 0, 0, 0)
    if name == "ESC_TELEMETRY_1_TO_4":
        rpm = 0 if not c.armed else 9000
        return A.MAVLink_esc_telemetry_1_to_4_message([0] * 4, [0] * 4, [0] * 4, [rpm] * 4, [0] * 4, [0] * 4)
    if name == "EXTENDED_SYS_STATE":
        return A.MAVLink_extended_sys_state_message(A.MAV_VTOL_STATE_MC, c.landed_state)
    if name == "HOME_POSITION":
        if not c.home_set:
            return None
        hlat, hlon = c.latlon(home=True)
        return A.MAVLink_home_position_message(
            int(hlat * 1e7),
            int(hlon * 1e7),
            int(c.home_alt * 1000),
            c.home_n,
            c.home_e,
            -c.home_up,
            [NAN] * 4,
            0,
            0,
            0,
            us,
        )
    if name == "GPS_GLOBAL_ORIGIN":
        if not c.home_set:
            return None
        return A.MAVLink_gps_global_origin_message(
            int(c.origin_lat * 1e7), int(c.origin_lon * 1e7), int(c.origin_alt * 1000), us
        )
    if name == "AUTOPILOT_VERSION":
        return A.MAVLink_autopilot_version_message(
            CAPABILITIES, FLIGHT_SW_VERSION, 0, 0, 0, list(GIT_HASH), [0] * 8, [0] * 8, 0, 0, 0, list(UID2)
        )
    return None
