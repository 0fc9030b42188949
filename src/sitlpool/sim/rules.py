"""ArduCopter 4.7's tables, as the built-in vehicle needs them: mode numbers and which modes
need what, the boot timeline of real SITL, AP_Mission's command names, COMMAND_ACK results."""

from __future__ import annotations

import os

os.environ.setdefault("MAVLINK20", "1")  # before pymavlink is imported: MAVLink 2, as ArduPilot speaks
from pymavlink.dialects.v20 import ardupilotmega as mavlink  # noqa: E402

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
    A.MAV_CMD_CONDITION_DELAY: "CondDelay",
    A.MAV_CMD_CONDITION_YAW: "CondYaw",
    A.MAV_CMD_DO_SET_ROI: "SetROI",
    A.MAV_CMD_DO_SET_SERVO: "SetServo",
    A.MAV_CMD_DO_SET_RELAY: "SetRelay",
}
R_ACCEPTED, R_DENIED, R_FAILED = A.MAV_RESULT_ACCEPTED, A.MAV_RESULT_DENIED, A.MAV_RESULT_FAILED
AMSL_FRAMES = {A.MAV_FRAME_GLOBAL, A.MAV_FRAME_GLOBAL_INT}
TERRAIN_FRAMES = {A.MAV_FRAME_GLOBAL_TERRAIN_ALT, A.MAV_FRAME_GLOBAL_TERRAIN_ALT_INT}

# why a mode changed (observers' on_mode reason) -> ArduPilot's ModeReason number, as logged in MODE
MODE_REASONS = {
    "initialised": 1,  # RC_COMMAND: real SITL's RC channel 5 sets the initial mode
    "gcs": 2,
    "radio_failsafe": 3,
    "battery_failsafe": 4,
    "gcs_failsafe": 5,
    "ekf_failsafe": 6,
    "fence_breached": 10,
}
# AP_Logger's LogErrorSubsystem numbers and the codes the failsafes and faults log (ERR messages)
ERR = {
    "FAILSAFE_RADIO": 5,
    "FAILSAFE_BATT": 6,
    "FAILSAFE_GCS": 8,
    "FAILSAFE_FENCE": 9,
    "FLIGHT_MODE": 10,
    "GPS": 11,
    "CRASH_CHECK": 12,
    "EKFCHECK": 16,
    "FAILSAFE_EKFINAV": 17,
    "THRUST_LOSS_CHECK": 25,
    # codes
    "RESOLVED": 0,
    "OCCURRED": 1,  # FAILSAFE_OCCURRED; for FAILSAFE_FENCE the code is the breached fence types
    "GPS_GLITCH": 2,
    "EKF_BAD_VARIANCE": 2,
}
