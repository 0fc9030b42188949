"""Names of the numbers ArduPilot writes in its logs (ArduPilot 4.7: ``AP_Logger/LogStructure.h``,
``AP_Vehicle/ModeReason.h``, ``AP_Arming.h``). A number not listed is shown as ``"<what> <n>"``.
Mode names come from pymavlink's tables for the vehicle type."""

from __future__ import annotations

from pymavlink import mavutil

# VER.BU: APM_BUILD_TYPE
VEHICLES = {
    1: "Rover",
    2: "ArduCopter",
    3: "ArduPlane",
    4: "AntennaTracker",
    7: "ArduSub",
    12: "Blimp",
    13: "ArduCopter",
}

MODE_TABLES: dict[str, dict[int, str]] = {
    "ArduCopter": mavutil.mode_mapping_acm,
    "ArduPlane": mavutil.mode_mapping_apm,
    "Rover": mavutil.mode_mapping_rover,
    "ArduSub": mavutil.mode_mapping_sub,
    "AntennaTracker": mavutil.mode_mapping_tracker,
}

EVENTS = {
    10: "ARMED", 11: "DISARMED", 15: "AUTO_ARMED", 17: "LAND_COMPLETE_MAYBE", 18: "LAND_COMPLETE",
    19: "LOST_GPS", 21: "FLIP_START", 22: "FLIP_END", 25: "SET_HOME", 26: "SET_SIMPLE_ON",
    27: "SET_SIMPLE_OFF", 28: "NOT_LANDED", 29: "SET_SUPERSIMPLE_ON", 30: "AUTOTUNE_INITIALISED",
    31: "AUTOTUNE_OFF", 32: "AUTOTUNE_RESTART", 33: "AUTOTUNE_SUCCESS", 34: "AUTOTUNE_FAILED",
    35: "AUTOTUNE_REACHED_LIMIT", 36: "AUTOTUNE_PILOT_TESTING", 37: "AUTOTUNE_SAVEDGAINS",
    38: "SAVE_TRIM", 39: "SAVEWP_ADD_WP", 41: "FENCE_ENABLE", 42: "FENCE_DISABLE",
    43: "ACRO_TRAINER_OFF", 44: "ACRO_TRAINER_LEVELING", 45: "ACRO_TRAINER_LIMITED",
    46: "GRIPPER_GRAB", 47: "GRIPPER_RELEASE", 49: "PARACHUTE_DISABLED", 50: "PARACHUTE_ENABLED",
    51: "PARACHUTE_RELEASED", 52: "LANDING_GEAR_DEPLOYED", 53: "LANDING_GEAR_RETRACTED",
    54: "MOTORS_EMERGENCY_STOPPED", 55: "MOTORS_EMERGENCY_STOP_CLEARED", 56: "MOTORS_INTERLOCK_DISABLED",
    57: "MOTORS_INTERLOCK_ENABLED", 58: "ROTOR_RUNUP_COMPLETE", 59: "ROTOR_SPEED_BELOW_CRITICAL",
    60: "EKF_ALT_RESET", 61: "LAND_CANCELLED_BY_PILOT", 62: "EKF_YAW_RESET", 63: "AVOIDANCE_ADSB_ENABLE",
    64: "AVOIDANCE_ADSB_DISABLE", 65: "AVOIDANCE_PROXIMITY_ENABLE", 66: "AVOIDANCE_PROXIMITY_DISABLE",
    67: "GPS_PRIMARY_CHANGED", 71: "ZIGZAG_STORE_A", 72: "ZIGZAG_STORE_B", 73: "LAND_REPO_ACTIVE",
    74: "STANDBY_ENABLE", 75: "STANDBY_DISABLE", 76: "FENCE_ALT_MAX_ENABLE", 77: "FENCE_ALT_MAX_DISABLE",
    78: "FENCE_CIRCLE_ENABLE", 79: "FENCE_CIRCLE_DISABLE", 80: "FENCE_ALT_MIN_ENABLE",
    81: "FENCE_ALT_MIN_DISABLE", 82: "FENCE_POLYGON_ENABLE", 83: "FENCE_POLYGON_DISABLE",
    85: "EK3_SOURCES_SET_TO_PRIMARY", 86: "EK3_SOURCES_SET_TO_SECONDARY", 87: "EK3_SOURCES_SET_TO_TERTIARY",
    90: "AIRSPEED_PRIMARY_CHANGED", 163: "SURFACED", 164: "NOT_SURFACED", 165: "BOTTOMED", 166: "NOT_BOTTOMED",
}  # fmt: skip

ERR_SUBSYSTEMS = {
    1: "MAIN", 2: "RADIO", 3: "COMPASS", 4: "OPTFLOW", 5: "FAILSAFE_RADIO", 6: "FAILSAFE_BATT",
    7: "FAILSAFE_GPS", 8: "FAILSAFE_GCS", 9: "FAILSAFE_FENCE", 10: "FLIGHT_MODE", 11: "GPS",
    12: "CRASH_CHECK", 13: "FLIP", 14: "AUTOTUNE", 15: "PARACHUTES", 16: "EKFCHECK",
    17: "FAILSAFE_EKFINAV", 18: "BARO", 19: "CPU", 20: "FAILSAFE_ADSB", 21: "TERRAIN", 22: "NAVIGATION",
    23: "FAILSAFE_TERRAIN", 24: "EKF_PRIMARY", 25: "THRUST_LOSS_CHECK", 26: "FAILSAFE_SENSORS",
    27: "FAILSAFE_LEAK", 28: "PILOT_INPUT", 29: "FAILSAFE_VIBE", 30: "INTERNAL_ERROR", 31: "FAILSAFE_DEADRECKON",
}  # fmt: skip

MODE_REASONS = {
    0: "UNKNOWN", 1: "RC_COMMAND", 2: "GCS_COMMAND", 3: "RADIO_FAILSAFE", 4: "BATTERY_FAILSAFE",
    5: "GCS_FAILSAFE", 6: "EKF_FAILSAFE", 7: "GPS_GLITCH", 8: "MISSION_END", 9: "THROTTLE_LAND_ESCAPE",
    10: "FENCE_BREACHED", 11: "TERRAIN_FAILSAFE", 12: "BRAKE_TIMEOUT", 13: "FLIP_COMPLETE", 14: "AVOIDANCE",
    15: "AVOIDANCE_RECOVERY", 16: "THROW_COMPLETE", 17: "TERMINATE", 18: "TOY_MODE", 19: "CRASH_FAILSAFE",
    25: "FAILSAFE", 26: "INITIALISED", 31: "STARTUP", 32: "SCRIPTING", 33: "UNAVAILABLE", 41: "MISSION_CMD",
    43: "FENCE_RETURN_PREVIOUS_MODE", 44: "QRTL_INSTEAD_OF_RTL", 45: "AUTO_RTL_EXIT", 48: "RADIO_FAILSAFE_RECOVERY",
    49: "QLAND_INSTEAD_OF_RTL", 50: "DEADRECKON_FAILSAFE", 51: "MODE_TAKEOFF_FAILSAFE",
}  # fmt: skip

ARM_METHODS = {
    0: "RUDDER", 1: "MAVLINK", 2: "AUXSWITCH", 3: "MOTORTEST", 4: "SCRIPTING", 5: "TERMINATION",
    6: "CPUFAILSAFE", 7: "BATTERYFAILSAFE", 9: "AFS", 11: "PARACHUTE_RELEASE", 12: "CRASH", 13: "LANDED",
    14: "MISSIONEXIT", 15: "FENCEBREACH", 16: "RADIOFAILSAFE", 17: "DISARMDELAY", 18: "GCSFAILSAFE",
    24: "EKFFAILSAFE", 28: "AUTOLANDED",
}  # fmt: skip


def name(table: dict[int, str], n, what: str) -> str:
    return table.get(n, f"{what} {n}")


def error_text(subsys: int, code: int) -> str:
    """``FAILSAFE_RADIO: occurred``, ``FLIGHT_MODE: mode 8 refused``, ..."""
    s = name(ERR_SUBSYSTEMS, subsys, "subsystem")
    if s.startswith("FAILSAFE_"):
        what = "resolved" if code == 0 else "occurred"
    elif s == "FLIGHT_MODE":
        what = f"mode {code} refused"
    elif s == "CRASH_CHECK":
        what = {1: "crash", 2: "loss of control"}.get(code, f"code {code}")
    else:
        what = "resolved" if code == 0 else f"error {code}"
    return f"{s}: {what}"


def is_failsafe(subsys: int) -> bool:
    return ERR_SUBSYSTEMS.get(subsys, "").startswith("FAILSAFE_") or subsys == 12
