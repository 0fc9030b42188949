"""Missions as plain records: checked whole before anything is sent (every field against
the vehicle's limits and its MAVLink wire type, so that no item can fail once an upload has
begun), turned into MISSION_ITEM_INT messages, and read back from them.

Item numbers are ArduPilot's sequence numbers: item 0 is home (the vehicle keeps it), the
first record is item 1. Altitudes are metres above home unless ``"frame": "amsl"``.
"""

from __future__ import annotations

from ..errors import ConfigError
from .link import A
from .wire import LOCATION_ALT_LIMIT_M, MAX_ALTITUDE_M, deg_e7, float32, number

MAX_ITEMS = 700  # what ArduPilot stores on most boards
MAX_SECONDS = 65535  # ArduPilot keeps a waypoint's hold time and a loiter time in 16 bits
MAX_SPEED_M_S = 1000.0  # faster than any ArduPilot vehicle: a typo

# command -> (MAV_CMD, required fields, optional fields)
COMMANDS = {
    "takeoff": (A.MAV_CMD_NAV_TAKEOFF, ("alt_m",), ("lat", "lon")),
    "waypoint": (A.MAV_CMD_NAV_WAYPOINT, ("lat", "lon", "alt_m"), ("seconds",)),
    "loiter_time": (A.MAV_CMD_NAV_LOITER_TIME, ("seconds",), ("lat", "lon", "alt_m")),
    "land": (A.MAV_CMD_NAV_LAND, (), ("lat", "lon")),
    "rtl": (A.MAV_CMD_NAV_RETURN_TO_LAUNCH, (), ()),
    "change_speed": (A.MAV_CMD_DO_CHANGE_SPEED, ("speed_m_s",), ()),
}
NAMES = {cmd: name for name, (cmd, _, _) in COMMANDS.items()}
FRAMES = {"relative": A.MAV_FRAME_GLOBAL_RELATIVE_ALT, "amsl": A.MAV_FRAME_GLOBAL}
RELATIVE_FRAMES = {A.MAV_FRAME_GLOBAL_RELATIVE_ALT, A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT}
AMSL_FRAMES = {A.MAV_FRAME_GLOBAL, A.MAV_FRAME_GLOBAL_INT}


def check_items(items) -> list[dict]:
    """Normalised copies of ``items``; the first bad one is refused naming its number and field."""
    if not isinstance(items, list) or not items:
        raise ConfigError(
            "a mission is a non-empty list of items such as "
            '{"command": "takeoff", "alt_m": 10}; clear_mission removes one'
        )
    if len(items) > MAX_ITEMS:
        raise ConfigError(f"a mission of {len(items)} items is too long; ArduPilot stores at most {MAX_ITEMS}")
    return [_check_item(i, it) for i, it in enumerate(items, start=1)]


def _check_item(n: int, it) -> dict:
    if not isinstance(it, dict):
        raise ConfigError(
            f"item {n}: {it!r} is not a record; write e.g. "
            '{"command": "waypoint", "lat": ..., "lon": ..., "alt_m": 20}'
        )
    cmd = it.get("command")
    if cmd not in COMMANDS:
        raise ConfigError(f"item {n}: command {cmd!r} is not one of {', '.join(COMMANDS)}")
    _, required, optional = COMMANDS[cmd]
    allowed = {"command", "frame", *required, *optional}
    extra = sorted(set(it) - allowed)
    if extra:
        raise ConfigError(
            f"item {n} ({cmd}): field {extra[0]!r} does not belong to a {cmd} item; "
            f"its fields are {', '.join(sorted(allowed - {'command'}))}"
        )
    out: dict = {"command": cmd}
    for f in (*required, *optional):
        if f not in it or it[f] is None:
            if f in required:
                raise ConfigError(f"item {n} ({cmd}): field {f!r} is missing")
            continue
        out[f] = number(it[f], f"item {n} ({cmd}): field {f!r}")
    if ("lat" in out) != ("lon" in out):
        raise ConfigError(f"item {n} ({cmd}): give both 'lat' and 'lon', or neither (then: where the vehicle is)")
    if "lat" in out and not (-90 <= out["lat"] <= 90 and -180 <= out["lon"] <= 180):
        raise ConfigError(
            f"item {n} ({cmd}): field 'lat'/'lon' ({out['lat']}, {out['lon']}) is not a position on Earth"
        )
    frame = it.get("frame", "relative")
    if frame not in FRAMES:
        raise ConfigError(
            f"item {n} ({cmd}): field 'frame' is {frame!r}; use 'relative' (above home, the default) or 'amsl'"
        )
    if frame == "amsl":
        if "alt_m" not in out:
            raise ConfigError(f"item {n} ({cmd}): field 'frame' is 'amsl' but the item has no 'alt_m'")
        out["frame"] = "amsl"
    if cmd == "takeoff" and frame == "relative" and out["alt_m"] <= 0:
        raise ConfigError(f"item {n} (takeoff): field 'alt_m' is {out['alt_m']:g}; a takeoff climbs above home (> 0 m)")
    if frame == "relative" and out.get("alt_m", 0) < 0:
        raise ConfigError(
            f"item {n} ({cmd}): field 'alt_m' is {out['alt_m']:g}, below home; use an altitude ≥ 0 "
            'above home, or "frame": "amsl"'
        )
    if out.get("seconds", 0) < 0:
        raise ConfigError(f"item {n} ({cmd}): field 'seconds' is {out['seconds']:g}; use 0 or more")
    if cmd == "change_speed" and out["speed_m_s"] <= 0:
        raise ConfigError(f"item {n} (change_speed): field 'speed_m_s' is {out['speed_m_s']:g}; use a speed above 0")
    # what the vehicle keeps: checked here, so that no item can fail once the upload has begun
    where = f"item {n} ({cmd}): field"
    if "alt_m" in out:
        lo, hi = (0.0, MAX_ALTITUDE_M) if frame == "relative" else (-LOCATION_ALT_LIMIT_M, LOCATION_ALT_LIMIT_M)
        float32(out["alt_m"], f"{where} 'alt_m'", lo, hi, "m")
    if "seconds" in out:
        float32(out["seconds"], f"{where} 'seconds'", 0, MAX_SECONDS, "s")
    if "speed_m_s" in out:
        float32(out["speed_m_s"], f"{where} 'speed_m_s'", None, MAX_SPEED_M_S, "m/s")
    return out


def item_message(link, seq: int, it: dict):
    cmd, _, _ = COMMANDS[it["command"]]
    p1 = p2 = p3 = p4 = 0.0
    if it["command"] in ("waypoint", "loiter_time"):
        p1 = it.get("seconds", 0.0)
    elif it["command"] == "change_speed":
        p1, p2, p3 = 1.0, it["speed_m_s"], -1.0  # ground speed, no throttle change
    lat, lon = it.get("lat", 0.0), it.get("lon", 0.0)  # 0, 0 means "where the vehicle is" to ArduPilot
    frame = FRAMES[it.get("frame", "relative")]
    return A.MAVLink_mission_item_int_message(
        link.vehicle.sysid or 1,
        1,
        seq,
        frame,
        cmd,
        0,
        1,
        p1,
        p2,
        p3,
        p4,
        deg_e7(lat),
        deg_e7(lon),
        float(it.get("alt_m", 0.0)),
        A.MAV_MISSION_TYPE_MISSION,
    )


def home_message(link):
    home = link.vehicle.home or (0.0, 0.0, 0.0)  # ArduPilot keeps its own home in item 0 anyway
    return A.MAVLink_mission_item_int_message(
        link.vehicle.sysid or 1,
        1,
        0,
        A.MAV_FRAME_GLOBAL,
        A.MAV_CMD_NAV_WAYPOINT,
        0,
        1,
        0,
        0,
        0,
        0,
        deg_e7(home[0]),
        deg_e7(home[1]),
        float(home[2]),
        A.MAV_MISSION_TYPE_MISSION,
    )


def record_of(m) -> dict:
    """A MISSION_ITEM(_INT) as a plain record (unknown commands keep their MAV_CMD name)."""
    scale = 1e7 if m.get_type() == "MISSION_ITEM_INT" else 1.0
    name = NAMES.get(m.command)
    if name is None:
        e = A.enums["MAV_CMD"].get(m.command)
        rec = {
            "command": "other",
            "mav_cmd": e.name if e else m.command,
            "params": [m.param1, m.param2, m.param3, m.param4],
        }
    else:
        rec = {"command": name}
    _, required, optional = COMMANDS.get(name or "", (0, ("lat", "lon", "alt_m"), ()))
    fields = (*required, *optional)
    lat, lon = m.x / scale, m.y / scale
    if "lat" in fields and (lat or lon):
        rec["lat"], rec["lon"] = round(lat, 7), round(lon, 7)
    if "alt_m" in required or ("alt_m" in fields and m.z):  # an optional altitude of 0 means "where it is"
        rec["alt_m"] = round(float(m.z), 3)
        if m.frame in AMSL_FRAMES:
            rec["frame"] = "amsl"
    if name in ("waypoint", "loiter_time") and (m.param1 or name == "loiter_time"):
        rec["seconds"] = m.param1
    if name == "change_speed":
        rec["speed_m_s"] = m.param2
    return rec


def resend_message(link, m):
    """A downloaded MISSION_ITEM(_INT) as the MISSION_ITEM_INT that uploads it again."""
    x, y = m.x, m.y
    if m.get_type() == "MISSION_ITEM" and m.frame in AMSL_FRAMES | RELATIVE_FRAMES:
        x, y = deg_e7(x), deg_e7(y)
    return A.MAVLink_mission_item_int_message(
        link.vehicle.sysid or 1,
        1,
        m.seq,
        m.frame,
        m.command,
        0,
        m.autocontinue,
        m.param1,
        m.param2,
        m.param3,
        m.param4,
        int(x),
        int(y),
        m.z,
        A.MAV_MISSION_TYPE_MISSION,
    )
