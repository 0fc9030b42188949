"""Missions over the session's one link: plain records checked before anything is sent,
the MAVLink mission protocol (upload, download, clear), start (AUTO; on Copter arm +
MISSION_START, as ArduPilot's autotest does), and progress read from the flight recorder.

Item numbers are ArduPilot's sequence numbers: item 0 is home (the vehicle keeps it), the
first record uploaded is item 1. Altitudes are metres above home unless ``"frame": "amsl"``.
"""

from __future__ import annotations

from ..errors import ConfigError, MavlinkError
from ..instances import finite_number
from .exchange import Inbox, to_us
from .link import A
from .recorder import recorder_for

STEP_TIMEOUT_S = 5.0  # per protocol step; ArduPilot answers in milliseconds
MAX_ITEMS = 700  # what ArduPilot stores on most boards

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
MISSION_RESULTS = {e: v.name.replace("MAV_MISSION_", "").lower() for e, v in A.enums["MAV_MISSION_RESULT"].items()}
LANDING = ("land", "rtl")


# ---- plain records ------------------------------------------------------------------------


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
        v = it[f]
        if not finite_number(v):
            raise ConfigError(f"item {n} ({cmd}): field {f!r} is {v!r}; it needs a finite number")
        out[f] = float(v)
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
    return out


def _item_message(link, seq: int, it: dict):
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
        int(round(lat * 1e7)),
        int(round(lon * 1e7)),
        float(it.get("alt_m", 0.0)),
        A.MAV_MISSION_TYPE_MISSION,
    )


def _home_message(link):
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
        int(home[0] * 1e7),
        int(home[1] * 1e7),
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
    _, required, optional = COMMANDS.get(name, (0, ("lat", "lon", "alt_m"), ()))
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


# ---- the protocol -------------------------------------------------------------------------


def _target(link) -> tuple[int, int]:
    return link.vehicle.sysid or 1, 1


def _no_answer(link, what: str) -> MavlinkError:
    return MavlinkError(f"{link.name}: no answer to {what} within {STEP_TIMEOUT_S:g}s; is the vehicle still there?")


def _refused(link, what: str, result: int) -> MavlinkError:
    return MavlinkError(f"{what} refused by the vehicle: {MISSION_RESULTS.get(result, result)}")


BOOT_WAIT_S = 15.0


def _after_boot(link) -> None:
    # ArduPilot answers a mission exchange during its boot (HEARTBEAT system_status BOOT, the
    # first ~0.5 s after its first client) before its mission store exists: MAV_MISSION_NO_SPACE
    if link.vehicle.booting:
        link.wait(lambda v: not v.booting, BOOT_WAIT_S)


def upload(link, items) -> dict:
    """Check every item, then upload them as items 1..N (item 0: home)."""
    checked = check_items(items)
    link.require_writable("upload a mission")
    _after_boot(link)
    rec = recorder_for(link)
    msgs = [_home_message(link)] + [_item_message(link, i, it) for i, it in enumerate(checked, start=1)]
    what = f"the mission upload ({len(checked)} items)"
    with rec.lock, Inbox(link, {"MISSION_REQUEST", "MISSION_REQUEST_INT", "MISSION_ACK"}, to_us(link)) as box:
        link.send(A.MAVLink_mission_count_message(*_target(link), len(msgs), A.MAV_MISSION_TYPE_MISSION))
        sent: set[int] = set()
        while True:
            m = _next(box, link, what)
            if m.get_type() == "MISSION_ACK":
                if m.type != A.MAV_MISSION_ACCEPTED:
                    bad = max(sent) if sent else None
                    where = f" (after item {bad})" if bad else ""
                    raise _refused(link, what + where, m.type)
                if len(sent) < len(msgs):
                    continue  # an ACK of an earlier exchange
                break
            if not 0 <= m.seq < len(msgs):
                raise MavlinkError(f"{what}: the vehicle asked for item {m.seq} of {len(msgs)}; upload again")
            link.send(msgs[m.seq])
            sent.add(m.seq)
    rec.mission = checked
    rec.reset_progress(total=len(checked))
    return {"uploaded": len(checked), "items": checked}


def download(link) -> dict:
    """The vehicle's mission as plain records (item 1 first) and its home (item 0)."""
    if link.state != "connected":
        raise MavlinkError(f"{link.name}: vehicle not connected ({link.state})")
    _after_boot(link)
    rec = recorder_for(link)
    target = _target(link)
    wanted = {"MISSION_COUNT", "MISSION_ITEM_INT", "MISSION_ITEM", "MISSION_ACK"}
    with rec.lock, Inbox(link, wanted, to_us(link)) as box:
        link.send(A.MAVLink_mission_request_list_message(*target, A.MAV_MISSION_TYPE_MISSION))
        m = _wait_for(box, link, "MISSION_COUNT", "the mission download")
        count = m.count
        got: dict[int, object] = {}
        for seq in range(count):
            link.send(A.MAVLink_mission_request_int_message(*target, seq, A.MAV_MISSION_TYPE_MISSION))
            while seq not in got:
                m = _wait_for(box, link, ("MISSION_ITEM_INT", "MISSION_ITEM"), f"the mission download (item {seq})")
                got[m.seq] = m
        if count:
            link.send(A.MAVLink_mission_ack_message(*target, A.MAV_MISSION_ACCEPTED, A.MAV_MISSION_TYPE_MISSION))
    items = [record_of(got[s]) for s in range(1, count)]
    home = None
    if count:
        h = got[0]
        scale = 1e7 if h.get_type() == "MISSION_ITEM_INT" else 1.0
        home = {"lat": h.x / scale, "lon": h.y / scale, "alt_amsl_m": h.z}
    rec.mission = items
    if rec.progress.total is None:
        rec.progress.total = len(items)
    return {"count": len(items), "items": items, "home": home}


def _next(box: Inbox, link, what: str):
    """The next message of this exchange about the mission (not the fence or rally points)."""
    while True:
        m = box.get(STEP_TIMEOUT_S)
        if m is None:
            raise _no_answer(link, what)
        if getattr(m, "mission_type", 0) == A.MAV_MISSION_TYPE_MISSION:
            return m


def _wait_for(box: Inbox, link, types, what: str):
    types = (types,) if isinstance(types, str) else types
    while True:
        m = _next(box, link, what)
        if m.get_type() == "MISSION_ACK" and "MISSION_ACK" not in types:
            if m.type != A.MAV_MISSION_ACCEPTED:
                raise _refused(link, what, m.type)
            continue
        if m.get_type() in types:
            return m


def clear(link) -> dict:
    link.require_writable("clear the mission")
    _after_boot(link)
    rec = recorder_for(link)
    with rec.lock, Inbox(link, {"MISSION_ACK"}, to_us(link)) as box:
        link.send(A.MAVLink_mission_clear_all_message(*_target(link), A.MAV_MISSION_TYPE_MISSION))
        m = _wait_for(box, link, "MISSION_ACK", "clear mission")
        if m.type != A.MAV_MISSION_ACCEPTED:
            raise _refused(link, "clear mission", m.type)
    rec.mission = []
    rec.reset_progress(total=0)
    return {"cleared": True}


def set_current(link, item: int, timeout: float = 3.0) -> None:
    link.require_writable(f"set the current mission item to {item}")
    link.send(A.MAVLink_mission_set_current_message(*_target(link), item))
    rec = recorder_for(link)
    # ArduPilot answers with MISSION_CURRENT; an old one may still be in flight, so wait for the new seq
    link.wait(lambda _v: rec.progress.current == item, timeout)


def start(link, item: int | None = None, ready=None) -> dict:
    """Run the mission in AUTO from item 1 (or ``item``). On the ground: GUIDED, arm, then
    MISSION_START (ArduCopter will not arm in AUTO, and AUTO entered armed on the ground waits
    for throttle); a vehicle that does not know MISSION_START is switched to AUTO.
    ``ready()`` -> (ok, reasons) is asked before arming: ArduCopter accepts an arm in GUIDED
    before its EKF flies on GPS, then refuses AUTO ("requires position"). If the start is
    refused after we armed, we disarm again: a refused start leaves the vehicle as it was."""
    link.require_writable("start the mission")
    rec = recorder_for(link)
    total = rec.progress.total
    if rec.mission is None or total is None or len(rec.mission) != total:
        total = download(link)["count"]  # someone else's mission, or changed by another GCS: know its items
    if total == 0:
        raise MavlinkError(f"{link.name}: the vehicle has no mission; upload_mission first")
    first = 1 if item is None else item
    if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= total:
        raise ConfigError(f"start item {item!r} is not an item of this mission: use 1..{total}")
    v = link.vehicle
    armed_here = False
    if not v.armed and ready is not None:
        ok, why = ready()
        if not ok:
            raise MavlinkError(
                f"the mission cannot start yet: the vehicle is not ready to arm ({'; '.join(why)}); "
                "wait_until(condition='ready_to_arm') waits for it"
            )
    set_current(link, first)
    try:
        if not v.armed:
            if v.mode not in ("GUIDED", "LOITER", "STABILIZE", "ALT_HOLD", "POSHOLD"):
                link.set_mode("GUIDED")  # armable, and never flies off on its own
            link.arm()
            armed_here = True
        try:
            link.command(A.MAV_CMD_MISSION_START, 0, 0, what="mission start")
        except MavlinkError as e:
            if "unsupported" not in str(e):
                raise
            link.set_mode("AUTO")
    except MavlinkError:
        if armed_here and v.rel_alt is not None and v.rel_alt < 1:
            try:
                link.disarm()
            except MavlinkError:
                pass  # it disarms itself after DISARM_DELAY anyway
        raise
    rec.reset_progress(total=total)
    link.wait(lambda v: v.mode == "AUTO" and v.armed, 3.0)
    return {"started_at_item": first, "total_items": total, "mode": link.vehicle.mode, "armed": link.vehicle.armed}


# ---- progress -------------------------------------------------------------------------


def finished(link) -> bool:
    """The mission ran to its end since it was started: the vehicle said COMPLETE, reported
    the last item reached, or disarmed after it got to its last item when that is a land or
    RTL (ArduCopter lands, disarms and goes back to item 1 without a word)."""
    rec = recorder_for(link)
    p = rec.progress
    total = p.total or 0
    if not total:
        return False
    if p.complete_seen or total in p.reached:
        return True
    last = rec.mission[-1].get("command") if rec.mission and len(rec.mission) == total else None
    return last in LANDING and p.highest >= total and p.disarmed_after_armed and not link.vehicle.armed


def reached_items(link) -> list[int]:
    """Items reached or passed since the start. Missions of our records run in order, so every
    item before the current one is done: ArduPilot reports MISSION_ITEM_REACHED for navigation
    items only, and a report can be overwritten by the next one before it is sent."""
    p = recorder_for(link).progress
    if finished(link):
        return list(range(1, (p.total or 0) + 1))
    done = set(p.reached) | set(range(1, p.highest))
    if p.reached:
        done |= set(range(1, max(p.reached)))
    return sorted(done)


def item_reached(link, n: int) -> bool:
    return n in reached_items(link)


def status(link) -> dict:
    rec = recorder_for(link)
    p = rec.progress
    states = A.enums["MISSION_STATE"]
    return {
        "current_item": p.current,
        "total_items": p.total,
        "items_reached": reached_items(link),
        "finished": finished(link),
        "mission_state": states[p.state].name.replace("MISSION_STATE_", "").lower() if p.state in states else None,
        "mode": link.vehicle.mode,
        "armed": link.vehicle.armed,
    }


def predicate(link, condition: str, value):
    """``wait_until``'s mission conditions as ``pred(vehicle, t0)``: ``mission_item`` (value:
    the item number N, reached or passed since the start) and ``mission_done``."""
    recorder_for(link)  # attach now, so nothing after this call is missed
    if condition == "mission_done":
        return lambda v, t0: finished(link)
    if condition == "mission_item":
        try:
            n = int(value)
            if n != float(value) or n < 1:
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(
                f"condition mission_item needs the item number (1 = first item) as value, got {value!r}"
            ) from None
        return lambda v, t0: item_reached(link, n)
    raise ConfigError(f"unknown mission condition {condition!r}; use mission_item or mission_done")


__all__ = [
    "check_items",
    "upload",
    "download",
    "clear",
    "start",
    "status",
    "finished",
    "item_reached",
    "reached_items",
    "predicate",
]
