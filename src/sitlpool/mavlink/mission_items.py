"""Missions as plain records: checked whole before anything is sent (every field against
the vehicle's limits and its MAVLink wire type, so that no item can fail once an upload has
begun), turned into MISSION_ITEM_INT messages, and read back from them.

Item numbers are ArduPilot's sequence numbers: item 0 is home (the vehicle keeps it), the
first record is item 1. Altitudes are metres above home unless ``"frame": "amsl"``.

Besides the named commands, any MAV_CMD: ``{"command": "other", "mav_cmd": "MAV_CMD_NAV_LOITER_TURNS"
(or its number), "params": [p1, p2, p3, p4], "lat", "lon", "alt_m"}`` (what ``record_of`` gives
back for a command without a name). Files' items (``missionfiles.Item``) go as they are.
"""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from . import missionfiles
from .link import A
from .missionfiles import GLOBAL_FRAMES, LOCAL_FRAMES, Item
from .wire import LOCATION_ALT_LIMIT_M, MAX_ALTITUDE_M, deg_e7, float32, integer, number, show

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
    if cmd == "other" or (isinstance(cmd, str) and cmd.startswith("MAV_CMD_")):
        return _check_other(n, it)
    if cmd not in COMMANDS:
        raise ConfigError(
            f"item {n}: command {show(cmd)} is not one of {', '.join(COMMANDS)}; any other MAV_CMD goes as "
            '{"command": "other", "mav_cmd": "MAV_CMD_...", "params": [p1, p2, p3, p4], "lat", "lon", "alt_m"}'
        )
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


def _mav_cmd(n: int, value) -> int:
    """A MAV_CMD given by name (``MAV_CMD_DO_JUMP``, ``DO_JUMP``) or number."""
    cmds = A.enums["MAV_CMD"]
    if isinstance(value, str):
        name = value.upper()
        name = name if name.startswith("MAV_CMD_") else "MAV_CMD_" + name
        for num, e in cmds.items():
            if e.name == name and num != max(cmds):  # (the enum's _ENUM_END is no command)
                return num
        close = difflib.get_close_matches(name, [e.name for e in cmds.values()], n=3, cutoff=0.8)
        raise ConfigError(
            f"item {n}: mav_cmd {show(value)} is not a MAV_CMD" + (f"; close: {', '.join(close)}" if close else "")
        )
    return integer(value, f"item {n}: field 'mav_cmd'", "uint16")


def _check_other(n: int, it: dict) -> dict:
    """An item of any MAV_CMD: the vehicle says whether it takes it."""
    given = it.get("mav_cmd", it.get("command")) if it.get("command") == "other" else it["command"]
    cmd = _mav_cmd(n, given)
    allowed = {"command", "mav_cmd", "params", "lat", "lon", "alt_m", "frame"}
    extra = sorted(set(it) - allowed)
    if extra:
        raise ConfigError(
            f"item {n}: field {extra[0]!r} does not belong to an item; its fields are {', '.join(sorted(allowed))}"
        )
    params = it.get("params", [])
    if not isinstance(params, list) or len(params) > 4:
        raise ConfigError(f"item {n}: field 'params' is {show(params)}; it needs up to 4 numbers (param1-param4)")
    ps = [float32(v, f"item {n}: param{i}") for i, v in enumerate(params, start=1)] + [0.0] * (4 - len(params))
    e = A.enums["MAV_CMD"].get(cmd)
    out: dict = {"command": "other", "mav_cmd": e.name if e else cmd, "params": ps}
    if ("lat" in it) != ("lon" in it):
        raise ConfigError(f"item {n}: give both 'lat' and 'lon', or neither")
    if "lat" in it:
        out["lat"] = number(it["lat"], f"item {n}: field 'lat'")
        out["lon"] = number(it["lon"], f"item {n}: field 'lon'")
        if not (-90 <= out["lat"] <= 90 and -180 <= out["lon"] <= 180):
            raise ConfigError(f"item {n}: field 'lat'/'lon' ({out['lat']}, {out['lon']}) is not a position on Earth")
    frame = it.get("frame", "relative")
    if frame not in FRAMES:
        raise ConfigError(
            f"item {n}: field 'frame' is {show(frame)}; use 'relative' (above home, the default) or 'amsl'"
        )
    if "alt_m" in it:
        lo, hi = (-LOCATION_ALT_LIMIT_M, LOCATION_ALT_LIMIT_M)
        out["alt_m"] = float32(it["alt_m"], f"item {n}: field 'alt_m'", lo, hi, "m")
    if frame == "amsl":
        out["frame"] = "amsl"
    return out


def item_message(link, seq: int, it: dict):
    if it["command"] == "other":
        cmd = _mav_cmd(seq, it["mav_cmd"])
        p1, p2, p3, p4 = it["params"]
        return A.MAVLink_mission_item_int_message(
            link.vehicle.sysid or 1,
            1,
            seq,
            FRAMES[it.get("frame", "relative")],
            cmd,
            0,
            1,
            p1,
            p2,
            p3,
            p4,
            deg_e7(it.get("lat", 0.0)),
            deg_e7(it.get("lon", 0.0)),
            float(it.get("alt_m", 0.0)),
            A.MAV_MISSION_TYPE_MISSION,
        )
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


def _xy_int(frame: int, v: float) -> int:
    if frame in GLOBAL_FRAMES:
        return deg_e7(v)
    return int(round(v * 1e4)) if frame in LOCAL_FRAMES else int(round(v))


def check_file_items(items: list[Item], what: str) -> None:
    """Every value of a file's items fits its MISSION_ITEM_INT field (checked before anything is sent)."""
    for i, it in enumerate(items):
        where = f"{what} item {i}"
        for j, v in enumerate(it.params, start=1):
            if v == v:  # NaN travels (ArduPilot reads it as "unchanged")
                float32(v, f"{where}: param{j}")
        if it.z == it.z:
            float32(it.z, f"{where}: altitude")
        for name, v in (("x/lat", it.x), ("y/lon", it.y)):
            if v != v:
                continue
            integer(_xy_int(it.frame, v), f"{where}: {name} (as MAVLink carries it)", "int32")


def file_item_message(link, seq: int, it: Item, mtype: int):
    """A file's item as the MISSION_ITEM_INT that uploads it (item ``seq`` of list ``mtype``)."""
    x, y = (0 if v != v else _xy_int(it.frame, v) for v in (it.x, it.y))
    return A.MAVLink_mission_item_int_message(
        link.vehicle.sysid or 1,
        1,
        seq,
        it.frame,
        it.command,
        0,
        it.autocontinue,
        *it.params,
        x,
        y,
        it.z,
        mtype,
    )


def file_item_of(m) -> Item:
    """A downloaded MISSION_ITEM(_INT) as a file's item."""
    x, y = float(m.x), float(m.y)
    if m.get_type() == "MISSION_ITEM_INT":
        scale = 1e7 if m.frame in GLOBAL_FRAMES else (1e4 if m.frame in LOCAL_FRAMES else 1.0)
        x, y = m.x / scale, m.y / scale
    return Item(m.command, m.frame, (m.param1, m.param2, m.param3, m.param4), x, y, float(m.z), m.autocontinue, 0)


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
        getattr(m, "mission_type", A.MAV_MISSION_TYPE_MISSION),
    )


def what_to_send(items, waypoints, plan, fence, rally) -> dict:
    """The lists an upload replaces, checked: "records" (items form) or "mission" (a file's
    items), "fence", "rally" (file items), "style" (how the file was written)."""
    given = [k for k, v in (("items", items), ("waypoints", waypoints), ("plan", plan)) if v is not None]
    if len(given) > 1:
        raise ConfigError(f"give the mission one way: items, waypoints or plan (got {' and '.join(given)})")
    if not given and fence is None and rally is None:
        raise ConfigError(
            "nothing to upload: give items, waypoints (a .waypoints text) or plan (a .plan text), or fence/rally"
        )
    todo: dict = {}
    if items is not None:
        todo["records"] = check_items(items)
    elif waypoints is not None:
        f = missionfiles.read_waypoints(waypoints)
        if f.fence is not None or f.rally is not None:
            raise ConfigError(
                "the .waypoints text holds a fence or rally points, not a mission: pass it as fence= or rally="
            )
        todo["mission"], todo["style"] = f.items, f.style
    elif plan is not None:
        f = missionfiles.read_plan(plan)
        todo["mission"], todo["style"] = f.items, f.style
        for key, got, extra in (("fence", f.fence, fence), ("rally", f.rally, rally)):
            if got is not None and extra is not None:
                raise ConfigError(f"the plan has its own {key}: give it in the plan or as {key}=, not both")
            if got is not None:
                todo[key] = got
    if fence is not None:
        todo["fence"] = _fence_or_rally(fence, "fence")
    if rally is not None:
        todo["rally"] = _fence_or_rally(rally, "rally")
    if "mission" in todo and len(todo["mission"]) > MAX_ITEMS:
        raise ConfigError(
            f"a mission of {len(todo['mission']):,} items is too long; ArduPilot stores at most {MAX_ITEMS}"
        )
    for key in ("mission", "fence", "rally"):
        if key in todo:
            check_file_items(todo[key], f"the {key}")
    if "fence" in todo:
        check_fence_list(todo["fence"])
    return todo


def _fence_or_rally(value, key: str) -> list:
    """``fence=``/``rally=``: shapes or points, or a QGC WPL 110 text of them (MAVProxy's fence/rally save)."""
    if isinstance(value, str):
        f = missionfiles.read_waypoints(value, f"the {key} text")
        got = f.fence if key == "fence" else f.rally
        if got is None and (f.items or f.home):
            raise ConfigError(
                f"the {key} text holds {'mission items' if f.items or f.home else 'nothing'}, not {key} items"
            )
        return got or []
    return missionfiles.fence_items(value) if key == "fence" else missionfiles.rally_items(value)


def check_fence_list(items: list[Item], what: str = "the fence") -> None:
    """A fence list as the vehicle will check it: polygons whole, vertex counts right."""
    i = 0
    while i < len(items):
        it = items[i]
        if it.command in missionfiles.FENCE_POLYGON:
            n = int(it.params[0])
            run = items[i : i + n]
            if n < 3 or len(run) < n or any(r.command != it.command or int(r.params[0]) != n for r in run):
                raise ConfigError(
                    f"{what} item {i} is not a polygon: it announces {n} vertices, and a polygon needs 3 or more "
                    "items of the same kind, each announcing that count"
                )
            i += n
            continue
        if it.command in missionfiles.FENCE_CIRCLE and not it.params[0] > 0:
            raise ConfigError(f"{what} item {i}: a circle needs a radius above 0 (param1 is {it.params[0]:g})")
        if missionfiles.list_of(it.command) != "fence":
            raise ConfigError(f"{what} item {i}: command {it.command} is not a fence item (NAV_FENCE_*, 5000-5004)")
        i += 1
