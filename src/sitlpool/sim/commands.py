"""COMMAND_LONG and COMMAND_INT, as ArduCopter 4.7 answers them: a table from MAV_CMD to its
handler. A handler returns the COMMAND_ACK result and may leave a message to send after the
ACK in ``call.after``; the texts it says go out after the ACK (ArduPilot queues them). Commands without a handler answer from ``PASSIVE_RESULTS`` (what real
SITL answers on the ground for commands the built-in vehicle has nothing to simulate for),
else UNSUPPORTED, as ArduCopter answers a command it does not know."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .copter import FORCE_MAGIC, MODE_NAMES, MODES, mavlink
from .links import Host, Link
from .rules import GUIDED_LIKE
from .telemetry import MSG_NAMES

A = mavlink
ACCEPTED, DENIED, FAILED, UNSUPPORTED = (
    A.MAV_RESULT_ACCEPTED,
    A.MAV_RESULT_DENIED,
    A.MAV_RESULT_FAILED,
    A.MAV_RESULT_UNSUPPORTED,
)

TEXTED_RESULTS = {  # ArduCopter's answer on the ground: result and the texts it says
    A.MAV_CMD_DO_MOTOR_TEST: (
        0,
        [(A.MAV_SEVERITY_INFO, "starting motor test"), (A.MAV_SEVERITY_INFO, "finished motor test")],
    ),
    A.MAV_CMD_CONTROL_HIGH_LATENCY: (0, [(A.MAV_SEVERITY_NOTICE, "High Latency disabled")]),
    A.MAV_CMD_DO_LAND_START: (
        4,
        [
            (A.MAV_SEVERITY_WARNING, "Unable to start landing sequence"),
            (A.MAV_SEVERITY_WARNING, "Mode change to AUTO RTL failed: No landing sequence found"),
        ],
    ),
}
# results ArduCopter 4.7 SITL gives, disarmed on the ground, for commands the sim has nothing
# to simulate for (measured with all parameters 0); anything not listed is UNSUPPORTED
PASSIVE_RESULTS = {
    A.MAV_CMD_DO_SET_RELAY: 0,
    A.MAV_CMD_DO_REPEAT_RELAY: 0,
    A.MAV_CMD_DO_SET_ROI: 0,
    A.MAV_CMD_DO_DIGICAM_CONFIGURE: 0,
    A.MAV_CMD_DO_DIGICAM_CONTROL: 0,
    A.MAV_CMD_DO_SET_CAM_TRIGG_DIST: 0,
    A.MAV_CMD_DO_FENCE_ENABLE: 0,
    A.MAV_CMD_DO_PARACHUTE: 0,
    A.MAV_CMD_DO_SPRAYER: 0,
    A.MAV_CMD_START_RX_PAIR: 0,
    A.MAV_CMD_BATTERY_RESET: 0,
    43004: 0,
    A.MAV_CMD_NAV_LOITER_UNLIM: 0,
    A.MAV_CMD_NAV_VTOL_LAND: 0,
    A.MAV_CMD_DO_SET_ROI_NONE: 0,
    A.MAV_CMD_AIRFRAME_CONFIGURATION: 0,
    A.MAV_CMD_DO_FLIGHTTERMINATION: 4,
    A.MAV_CMD_DO_GRIPPER: 4,
    A.MAV_CMD_DO_MOUNT_CONFIGURE: 4,
    A.MAV_CMD_DO_MOUNT_CONTROL: 4,
    A.MAV_CMD_IMAGE_START_CAPTURE: 4,
    A.MAV_CMD_VIDEO_START_CAPTURE: 4,
    A.MAV_CMD_VIDEO_STOP_CAPTURE: 4,
    A.MAV_CMD_ACCELCAL_VEHICLE_POS: 4,
    A.MAV_CMD_DO_WINCH: 4,
    A.MAV_CMD_IMAGE_STOP_CAPTURE: 0,
    42001: 0,
    42003: 0,
    42006: 0,  # the Solo buttons, FIXED_MAG_CAL_YAW
    A.MAV_CMD_PREFLIGHT_STORAGE: 2,
    A.MAV_CMD_DO_START_MAG_CAL: 0,
    A.MAV_CMD_DO_JUMP_TAG: 4,
    A.MAV_CMD_DO_GIMBAL_MANAGER_PITCHYAW: 4,
    42701: 2,  # SCRIPTING
}


@dataclass
class Call:
    """One command as received: ``p`` its seven parameters (COMMAND_INT's x and y in degrees),
    ``frame`` None for COMMAND_LONG."""

    cmd: int
    p: list[float]
    link: Link
    frame: int | None = None
    after: Any = None  # a message to send after the COMMAND_ACK


Handler = Callable[[Host, Call], int]


def _arm_disarm(h: Host, c: Call) -> int:
    force = int(c.p[1]) == FORCE_MAGIC
    v = h.copter
    return v.arm(force, c.link) if c.p[0] >= 0.5 else v.disarm(force=force, link=c.link)


def _set_mode(h: Host, c: Call) -> int:
    if not int(c.p[0]) & A.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED:
        return DENIED
    return h.copter.set_mode(int(c.p[1]), c.link)


# frames a command's position may be given in (ArduPilot's location_from_command_t)
POSITION_FRAMES = {
    A.MAV_FRAME_GLOBAL,
    A.MAV_FRAME_GLOBAL_INT,
    A.MAV_FRAME_GLOBAL_RELATIVE_ALT,
    A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
    A.MAV_FRAME_GLOBAL_TERRAIN_ALT,
    A.MAV_FRAME_GLOBAL_TERRAIN_ALT_INT,
}
TERRAIN_FRAMES = {A.MAV_FRAME_GLOBAL_TERRAIN_ALT, A.MAV_FRAME_GLOBAL_TERRAIN_ALT_INT}


def _takeoff(h: Host, c: Call) -> int:
    if c.frame is not None and c.frame != A.MAV_FRAME_GLOBAL_RELATIVE_ALT:
        return DENIED  # ArduCopter takes a takeoff altitude above home only
    return h.copter.takeoff(0.0 if math.isnan(c.p[6]) else c.p[6], c.link)


def _mode_command(mode: str) -> Handler:
    return lambda h, c: h.copter.set_mode(MODES[mode], c.link)


def _condition_yaw(h: Host, c: Call) -> int:
    p = c.p
    if math.isnan(p[0]):
        return DENIED
    return h.copter.condition_yaw(p[0], bool(p[3] == p[3] and p[3]), -1 if p[2] == -1 else 1)


def _reposition(h: Host, c: Call) -> int:
    if c.frame is None:
        return UNSUPPORTED  # ArduCopter takes DO_REPOSITION only as COMMAND_INT
    v, p = h.copter, c.p
    change_mode = bool(int(p[1]) & 1)  # MAV_DO_REPOSITION_FLAGS_CHANGE_MODE
    if not (change_mode or MODE_NAMES.get(v.mode) in GUIDED_LIKE) or c.frame not in POSITION_FRAMES:
        return DENIED
    if change_mode and v.mode != MODES["GUIDED"]:
        v.set_mode(MODES["GUIDED"], c.link)
    # NaN or 0 latitude/longitude and NaN altitude mean "where it is", as on ArduPilot
    lat, lon = (p[4], p[5]) if (p[4] or p[5]) and not math.isnan(p[4] + p[5]) else v.latlon()
    alt = v.alt if math.isnan(p[6]) else v.alt_from(c.frame, p[6])
    return ACCEPTED if v.goto(lat, lon, alt) else FAILED


def _reboot(h: Host, c: Call) -> int:
    return h.copter.reboot(c.link) if int(c.p[0]) == 1 else UNSUPPORTED


def _set_message_interval(h: Host, c: Call) -> int:
    name = MSG_NAMES.get(int(c.p[0]))
    us, lk = c.p[1], c.link
    if name == "HEARTBEAT":
        lk.hb_interval = 1.0 if us == 0 else (0.0 if us < 0 else us / 1e6)
    elif name:
        lk.rates[name] = 0.0 if us <= 0 else 1e6 / us
        lk.due[name] = h.copter.t
    return ACCEPTED if name else FAILED


def _get_message_interval(h: Host, c: Call) -> int:
    name = MSG_NAMES.get(int(c.p[0]))
    if not name:
        return FAILED
    lk = c.link
    if name == "HEARTBEAT":
        hz = 1.0 / lk.hb_interval if lk.hb_interval else 0.0
    else:
        hz = lk.rates.get(name, 0.0)
    c.after = A.MAVLink_message_interval_message(int(c.p[0]), int(1e6 / hz) if hz > 0 else -1)
    return ACCEPTED


REQUESTED_BY_COMMAND = {
    A.MAV_CMD_GET_HOME_POSITION: A.MAVLINK_MSG_ID_HOME_POSITION,
    A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES: A.MAVLINK_MSG_ID_AUTOPILOT_VERSION,
}


def _request_message(h: Host, c: Call) -> int:
    mid = REQUESTED_BY_COMMAND.get(c.cmd, int(c.p[0]))
    name = MSG_NAMES.get(mid)
    if c.cmd == A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES and int(c.p[0]) != 1:
        name = None
    c.after = h.msg(name) if name else None  # None (e.g. no home yet): accepted, nothing sent
    return ACCEPTED if name or mid == A.MAVLINK_MSG_ID_PARAM_VALUE else FAILED


def _mission_start(h: Host, c: Call) -> int:
    v = h.copter
    was_auto = v.mode == MODES["AUTO"]
    r = v.set_mode(MODES["AUTO"], c.link)
    first = int(c.p[0])
    if r == ACCEPTED:
        if 0 < first < len(v.mission):
            v.mission_seq, v.mission_done = first, False
        v.mission_started = True
        # ArduCopter: entering AUTO starts the mission and MISSION_START starts it once more
        # ("Mission: 1 Takeoff" twice, measured)
        v.restart_pending = not was_auto and v.armed
    return r


def _set_mission_current(h: Host, c: Call) -> int:
    v, seq = h.copter, int(c.p[0])
    if seq >= len(v.mission):
        return DENIED
    if seq == 0 and len(v.mission) <= 1:
        return FAILED  # nothing but home
    v.mission_seq, v.mission_done = max(1, seq), False  # 0: the first item after home
    c.after = v.mission_current()
    return ACCEPTED


def _set_home(h: Host, c: Call) -> int:
    v, p = h.copter, c.p
    use_current = int(p[0]) == 1 or not (p[4] or p[5])
    if c.frame is not None and not use_current:
        if c.frame not in POSITION_FRAMES:
            return DENIED
        if c.frame in TERRAIN_FRAMES:
            return FAILED  # home is never above terrain
    if use_current:
        if v.home_set:
            v.set_home_here()
    else:
        v.home_n, v.home_e = v.local(p[4], p[5])
        v.home_up = v.alt_from(c.frame if c.frame is not None else A.MAV_FRAME_GLOBAL, p[6])
        v.home_changed()
    return ACCEPTED


def _roi_location(h: Host, c: Call) -> int:
    if c.frame is not None and c.frame not in POSITION_FRAMES:
        return DENIED
    return ACCEPTED  # nothing to point on the built-in vehicle


def _send_banner(h: Host, c: Call) -> int:
    h.banner()
    return ACCEPTED


def _set_servo(h: Host, c: Call) -> int:
    # channels 1-4 drive the motors: refused; any other output takes the value
    return ACCEPTED if 5 <= int(c.p[0]) <= 32 else FAILED


def _ekf_source_set(h: Host, c: Call) -> int:
    return ACCEPTED if 1 <= int(c.p[0]) <= 3 else DENIED


def _texted(h: Host, c: Call) -> int:
    result, texts = TEXTED_RESULTS[c.cmd]
    for sev, tx in texts:
        h.copter.text(sev, tx)
    return result


def _pause_continue(h: Host, c: Call) -> int:
    return h.copter.pause(int(c.p[0]) == 0)


def _aux_function(h: Host, c: Call) -> int:
    h.copter.text(A.MAV_SEVERITY_INFO, f"Invalid channel option ({int(c.p[0])})")
    return FAILED


def _run_prearm_checks(h: Host, c: Call) -> int:
    """As ArduCopter 4.7: accepted on the ground (TEMPORARILY_REJECTED armed); the checks run at
    once and say each failure ("PreArm: ...", CRITICAL)."""
    v = h.copter
    if v.armed:
        return A.MAV_RESULT_TEMPORARILY_REJECTED
    for why in v.prearm_failures():
        v.text(A.MAV_SEVERITY_CRITICAL, f"PreArm: {why}")
    return ACCEPTED


def _vtol_takeoff(h: Host, c: Call) -> int:
    """Copter flies no VTOL takeoff: FAILED, or DENIED as COMMAND_INT in any frame but
    GLOBAL_RELATIVE_ALT (ArduCopter turns a COMMAND_LONG into that frame)."""
    if c.frame is None or c.frame == A.MAV_FRAME_GLOBAL_RELATIVE_ALT:
        return FAILED
    return DENIED


HANDLERS: dict[int, Handler] = {
    A.MAV_CMD_COMPONENT_ARM_DISARM: _arm_disarm,
    A.MAV_CMD_DO_SET_MODE: _set_mode,
    A.MAV_CMD_NAV_TAKEOFF: _takeoff,
    A.MAV_CMD_NAV_LAND: _mode_command("LAND"),
    A.MAV_CMD_NAV_RETURN_TO_LAUNCH: _mode_command("RTL"),
    A.MAV_CMD_CONDITION_YAW: _condition_yaw,
    A.MAV_CMD_DO_CHANGE_SPEED: lambda h, c: h.copter.change_speed(c.p[1]),
    A.MAV_CMD_DO_REPOSITION: _reposition,
    A.MAV_CMD_PREFLIGHT_REBOOT_SHUTDOWN: _reboot,
    A.MAV_CMD_SET_MESSAGE_INTERVAL: _set_message_interval,
    A.MAV_CMD_GET_MESSAGE_INTERVAL: _get_message_interval,
    A.MAV_CMD_REQUEST_MESSAGE: _request_message,
    A.MAV_CMD_GET_HOME_POSITION: _request_message,
    A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES: _request_message,
    A.MAV_CMD_MISSION_START: _mission_start,
    A.MAV_CMD_DO_SET_MISSION_CURRENT: _set_mission_current,
    A.MAV_CMD_DO_SET_HOME: _set_home,
    A.MAV_CMD_DO_SET_ROI_LOCATION: _roi_location,
    A.MAV_CMD_DO_SEND_BANNER: _send_banner,
    A.MAV_CMD_DO_SET_SERVO: _set_servo,
    A.MAV_CMD_DO_REPEAT_SERVO: _set_servo,
    A.MAV_CMD_SET_EKF_SOURCE_SET: _ekf_source_set,
    A.MAV_CMD_DO_PAUSE_CONTINUE: _pause_continue,
    A.MAV_CMD_DO_AUX_FUNCTION: _aux_function,
    A.MAV_CMD_RUN_PREARM_CHECKS: _run_prearm_checks,
    A.MAV_CMD_NAV_VTOL_TAKEOFF: _vtol_takeoff,
    **{cmd: _texted for cmd in TEXTED_RESULTS},
}


def handle(host: Host, call: Call) -> int:
    """The COMMAND_ACK result of ``call`` (its side effects done; ``call.after`` set)."""
    handler = HANDLERS.get(call.cmd)
    if handler is None:
        return PASSIVE_RESULTS.get(call.cmd, UNSUPPORTED)
    return handler(host, call)
