"""The mission files people bring, read and written as the programs that make them do:

- QGC WPL 110 (``.waypoints``): a ``QGC WPL 110`` line, then one tab-separated line of 12
  columns per item (index, current, frame, command, param1-4, x/lat, y/lon, z/alt,
  autocontinue), item 0 home. Two programs' styles: Mission Planner's (CRLF; home written
  ``0 1 0 16 0 0 0 0 lat lon alt 1`` with 6 decimals; items with 8 decimals, altitude 6) and
  MAVProxy's (``mavwp.save``: LF, every number ``%f``). MAVProxy's fence and rally lists are
  saved the same way (no home).
- QGroundControl's ``.plan`` (JSON, ``fileType`` "Plan", version 1): ``mission`` (version 2,
  SimpleItems: command, frame, 7 params, autoContinue, doJumpId; plannedHomePosition;
  firmwareType, vehicleType, cruiseSpeed, hoverSpeed), ``geoFence`` (version 2: polygons and
  circles, inclusion or exclusion), ``rallyPoints`` (version 2: points). Written as QGC's
  QJsonDocument writes it: keys sorted, 4-space indent, whole numbers without a decimal point,
  NaN as null.

Reading a file written by those programs and writing it back gives the same text. Everything
here is pure (no link): ``mission`` sends and reads the items.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..errors import ConfigError
from .wire import FLOAT32_MAX, show

HEADER = "QGC WPL 110"
MAX_FILE_CHARS = 4_000_000  # 700 items of 12 columns fit a hundred times over
MAX_FILE_ITEMS = 5_000  # refused before anything else is read (ArduPilot stores at most ~700)
GLOBAL_FRAMES = {0, 3, 5, 6, 10, 11}  # x, y are latitude and longitude
LOCAL_FRAMES = {1, 4, 7, 8, 9, 12, 13, 14, 20, 21}  # x, y in metres
FENCE_POLYGON = {5001: True, 5002: False}  # NAV_FENCE_POLYGON_VERTEX_INCLUSION/EXCLUSION -> inclusion
FENCE_CIRCLE = {5003: True, 5004: False}  # NAV_FENCE_CIRCLE_INCLUSION/EXCLUSION -> inclusion
FENCE_RETURN, RALLY_POINT = 5000, 5100
# QGC writes Altitude/AltitudeMode/AMSLAltAboveTerrain for the commands it places on the map
QGC_ALTITUDE_COMMANDS = {16, 17, 18, 19, 21, 22, 30, 31, 82, 84, 85, 94, 179, 189, 195, 201}
QGC_ALTITUDE_MODES = {3: 1, 6: 1, 0: 2, 5: 2, 10: 4, 11: 4}  # frame -> QGC's AltitudeMode
QGC_DEFAULTS = {"cruiseSpeed": 15, "hoverSpeed": 5, "firmwareType": 3, "vehicleType": 2, "globalPlanAltitudeMode": 1}


@dataclass(frozen=True)
class Item:
    """One MAVLink mission item as files and the wire carry it (x, y in degrees in global frames)."""

    command: int
    frame: int = 0
    params: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    autocontinue: int = 1
    current: int = 0


@dataclass
class MissionFile:
    """What a file holds: home (item 0, or plannedHomePosition), mission items (item 1 first),
    and, when the file carries them, the fence and rally lists (None: the file says nothing)."""

    home: Item | None
    items: list[Item]
    fence: list[Item] | None = None
    rally: list[Item] | None = None
    style: dict = field(default_factory=dict)  # how to write it back as the program did


# ---- QGC WPL 110 -------------------------------------------------------------------------


def _count_check(n: int, what: str) -> None:
    if n > MAX_FILE_ITEMS:
        raise ConfigError(
            f"{what} has {n:,} items; ArduPilot stores at most a few hundred (sitlpool reads {MAX_FILE_ITEMS:,})"
        )


def _size_check(text, what: str) -> str:
    if not isinstance(text, str):
        raise ConfigError(f"{what} is {show(text)}; give the file's text")
    if len(text) > MAX_FILE_CHARS:
        raise ConfigError(f"{what} is {len(text):,} characters; sitlpool reads files of at most {MAX_FILE_CHARS:,}")
    return text


def _finite(value: float, where: str, col: str) -> float:
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX and col not in ("lat/x", "lon/y"):
        raise ConfigError(f"{where}: {col} is {value!r}, not a number a mission item carries")
    return value


WPL_COLUMNS = "index current frame command param1 param2 param3 param4 lat/x lon/y alt/z autocontinue".split()


def read_waypoints(text, what: str = "the .waypoints file") -> MissionFile:
    """A QGC WPL 110 file. A mission's item 0 is home; a file of fence (or rally) items only,
    as MAVProxy saves them, is a fence (or rally) list without home. One clear line when a
    line is wrong, naming it."""
    text = _size_check(text, what)
    lines = text.splitlines()
    first = lines[0].strip() if lines else ""
    if first != HEADER:
        raise ConfigError(
            f"{what}: line 1 is {show(first)}; a .waypoints file starts with {HEADER!r} "
            "(as Mission Planner and MAVProxy write it)"
        )
    _count_check(sum(1 for ln in lines[1:] if ln.strip() and not ln.lstrip().startswith("#")), what)
    rows: list[Item] = []
    for n, line in enumerate(lines[1:], start=2):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        cols = s.split()
        where = f"{what} line {n}"
        if len(cols) != 12:
            raise ConfigError(
                f"{where} has {len(cols)} values; a QGC WPL 110 line has 12 (index, current, frame, "
                "command, param1-4, lat, lon, alt, autocontinue)"
            )
        ints: list[int] = []
        for i in (0, 1, 2, 3, 11):
            try:
                ints.append(int(cols[i]))
            except ValueError:
                raise ConfigError(f"{where}: {WPL_COLUMNS[i]} is {show(cols[i])}; it needs a whole number") from None
        nums: list[float] = []
        for i in range(4, 11):
            try:
                v = float(cols[i])
            except ValueError:
                raise ConfigError(f"{where}: {WPL_COLUMNS[i]} is {show(cols[i])}; it needs a number") from None
            # param1-4 "nan": unchanged (e.g. a takeoff's yaw), as MAVProxy writes it and a .plan's null
            nums.append(v if i <= 7 and math.isnan(v) else _finite(v, where, WPL_COLUMNS[i]))
        index, current, frame, command, ac = ints
        if index != len(rows):
            raise ConfigError(f"{where}: item number {index}, expected {len(rows)} (items are numbered from 0)")
        if not (0 <= frame <= 255 and 0 <= command <= 65535 and 0 <= current <= 255 and 0 <= ac <= 255):
            raise ConfigError(
                f"{where}: frame {frame}, command {command}, current {current}, autocontinue {ac} do not fit MAVLink's fields"
            )
        p = (nums[0], nums[1], nums[2], nums[3])
        rows.append(Item(command, frame, p, nums[4], nums[5], nums[6], ac, current))
    for i, it in enumerate(rows):
        if it.frame in GLOBAL_FRAMES and not (-90 <= it.x <= 90 and -180 <= it.y <= 180):
            raise ConfigError(f"{what} item {i}: ({it.x:g}, {it.y:g}) is not a position on Earth")
    kinds = {list_of(it.command) for it in rows}
    style = {"wpl": _wpl_style(text, rows), "newline": "\r\n" if "\r\n" in text else "\n"}
    if rows and kinds == {"fence"}:
        return MissionFile(None, [], fence=rows, style=style)
    if rows and kinds == {"rally"}:
        return MissionFile(None, [], rally=rows, style=style)
    if len(kinds - {"mission"}) and len(rows) > 1:
        bad = next(i for i, it in enumerate(rows) if i and list_of(it.command) != "mission")
        raise ConfigError(
            f"{what} item {bad}: command {rows[bad].command} is a {list_of(rows[bad].command)} item in a mission; "
            "a .waypoints file holds a mission, a fence or rally points, not a mix"
        )
    return MissionFile(rows[0] if rows else None, rows[1:], style=style)


def list_of(command: int) -> str:
    if command in FENCE_POLYGON or command in FENCE_CIRCLE or command == FENCE_RETURN:
        return "fence"
    return "rally" if command == RALLY_POINT else "mission"


def _wpl_style(text: str, rows: list[Item]) -> str:
    """The program whose writer gives back ``text`` exactly (Mission Planner when none does)."""
    nl = "\r\n" if "\r\n" in text else "\n"
    if rows and list_of(rows[0].command) != "mission":
        return "mavproxy"  # a fence or rally list: MAVProxy saves them, Mission Planner does not
    for style in ("missionplanner", "mavproxy"):
        if _wpl_lines(rows, style, nl) == text:
            return style
    return "missionplanner"


def write_waypoints(
    home: Item | None, items: list[Item], style: str = "missionplanner", newline: str | None = None
) -> str:
    """QGC WPL 110 as Mission Planner (``style="missionplanner"``) or MAVProxy (``"mavproxy"``)
    writes it. ``home`` None: a fence or rally list (items numbered from 0)."""
    rows = ([home] if home is not None else []) + list(items)
    nl = newline or ("\r\n" if style == "missionplanner" else "\n")
    return _wpl_lines(rows, style, nl, has_home=home is not None)


def _wpl_lines(rows: list[Item], style: str, nl: str, has_home: bool | None = None) -> str:
    if has_home is None:
        has_home = bool(rows) and list_of(rows[0].command) == "mission"
    out = [HEADER]
    for i, w in enumerate(rows):
        p1, p2, p3, p4 = w.params
        if style == "mavproxy" or not has_home:
            out.append(
                "%u\t%u\t%u\t%u\t%f\t%f\t%f\t%f\t%f\t%f\t%f\t%u"
                % (i, w.current, w.frame, w.command, p1, p2, p3, p4, w.x, w.y, w.z, w.autocontinue)
            )
        elif i == 0:  # Mission Planner writes home from its home fields
            out.append(f"0\t1\t0\t16\t0\t0\t0\t0\t{w.x:.6f}\t{w.y:.6f}\t{w.z:.6f}\t1")
        else:
            out.append(
                f"{i}\t0\t{w.frame}\t{w.command}\t{p1:.8f}\t{p2:.8f}\t{p3:.8f}\t{p4:.8f}"
                f"\t{w.x:.8f}\t{w.y:.8f}\t{w.z:.6f}\t{w.autocontinue}"
            )
    return nl.join(out) + nl


# ---- QGroundControl .plan ------------------------------------------------------------------


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ConfigError(what)


def _num(v, what: str) -> float:
    if v is None:
        return math.nan  # QGC writes NaN (e.g. "yaw: unchanged") as null
    _need(isinstance(v, (int, float)) and not isinstance(v, bool), f"{what} is {show(v)}; it needs a number")
    return float(v)


def _position(v, what: str, alt: bool = False) -> tuple[float, ...]:
    n = 3 if alt else 2
    _need(
        isinstance(v, list) and len(v) == n,
        f"{what} is {show(v)}; it needs [latitude, longitude{', altitude' if alt else ''}]",
    )
    p = tuple(_num(x, what) for x in v)
    _need(-90 <= p[0] <= 90 and -180 <= p[1] <= 180, f"{what} ({p[0]:g}, {p[1]:g}) is not a position on Earth")
    return p


def read_plan(text, what: str = "the .plan file") -> MissionFile:
    """A QGroundControl plan (its text, or the object it holds): its mission (SimpleItems),
    geofence and rally points."""
    if isinstance(text, dict):  # already parsed (an MCP client may send the plan as an object)
        text = json.dumps(text)
    text = _size_check(text, what)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply to be a plan") from None
    _need(isinstance(doc, dict), f"{what} is JSON but not a plan (a QGroundControl plan is an object)")
    _need(
        doc.get("fileType") == "Plan",
        f"{what}: fileType is {show(doc.get('fileType'))}; a QGroundControl plan has 'Plan'",
    )
    _need(
        doc.get("version") == 1,
        f"{what}: unsupported plan version {show(doc.get('version'))}; sitlpool reads version 1",
    )
    style = {k: doc[k] for k in ("groundStation",) if k in doc}
    mission = doc.get("mission")
    home, items = None, []
    if mission is not None:
        _need(isinstance(mission, dict), f"{what}: 'mission' is {show(mission)}; it needs an object")
        _need(
            mission.get("version") == 2,
            f"{what}: unsupported mission version {show(mission.get('version'))}; sitlpool reads version 2",
        )
        for k in QGC_DEFAULTS:
            if k in mission:
                v = mission[k]
                if k in ("cruiseSpeed", "hoverSpeed"):  # written back as JSON: a finite number or nothing
                    _need(
                        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)),
                        f"{what}: mission {k} is {show(v)}; it needs a finite number",
                    )
                style[k] = v
        raw = mission.get("items", [])
        _need(isinstance(raw, list), f"{what}: mission 'items' is {show(raw)}; it needs a list")
        _count_check(len(raw), what)
        items = [_plan_item(i, it, what) for i, it in enumerate(raw, start=1)]
        if "plannedHomePosition" in mission:
            lat, lon, alt = _position(mission["plannedHomePosition"], f"{what}: plannedHomePosition", alt=True)
            home = Item(16, 0, (0.0, 0.0, 0.0, 0.0), lat, lon, alt)
    fence = _plan_fence(doc["geoFence"], what) if "geoFence" in doc else None
    rally = _plan_rally(doc["rallyPoints"], what) if "rallyPoints" in doc else None
    return MissionFile(home, items, fence, rally, style)


def _plan_item(n: int, it, what: str) -> Item:
    where = f"{what}: mission item {n}"
    _need(isinstance(it, dict), f"{where} is {show(it)}; it needs an object")
    kind = it.get("type")
    _need(
        kind == "SimpleItem",
        f"{where} is a {show(kind)} ({show(it.get('complexItemType'))}); sitlpool reads SimpleItems: "
        "in QGroundControl, save the mission after 'Upload' and 'Download' (it turns surveys into items)",
    )
    cmd, frame = it.get("command"), it.get("frame")
    _need(
        isinstance(cmd, int) and not isinstance(cmd, bool) and 0 <= cmd <= 65535,
        f"{where}: command is {show(cmd)}; it needs a MAV_CMD number",
    )
    _need(
        isinstance(frame, int) and not isinstance(frame, bool) and 0 <= frame <= 255,
        f"{where}: frame is {show(frame)}; it needs a MAV_FRAME number",
    )
    params = it.get("params")
    _need(
        isinstance(params, list) and len(params) == 7,
        f"{where}: params is {show(params)}; it needs 7 values (null for none)",
    )
    p = [_num(v, f"{where}: param{i}") for i, v in enumerate(params, start=1)]
    for i, v in enumerate(p, start=1):
        _need(
            not math.isinf(v) and (i in (5, 6) or not abs(v) > FLOAT32_MAX),
            f"{where}: param{i} is {v!r}, not a number a mission item carries",
        )
    if (
        frame in GLOBAL_FRAMES
        and not (math.isnan(p[4]) or -90 <= p[4] <= 90)
        or frame in GLOBAL_FRAMES
        and not (math.isnan(p[5]) or -180 <= p[5] <= 180)
    ):
        raise ConfigError(f"{where}: ({p[4]:g}, {p[5]:g}) is not a position on Earth")
    ac = it.get("autoContinue", True)
    _need(isinstance(ac, bool), f"{where}: autoContinue is {show(ac)}; it needs true or false")
    return Item(cmd, frame, (p[0], p[1], p[2], p[3]), p[4], p[5], p[6], int(ac))


def _plan_fence(fence, what: str) -> list[Item]:
    where = f"{what}: geoFence"
    _need(isinstance(fence, dict), f"{where} is {show(fence)}; it needs an object")
    _need(
        fence.get("version") == 2,
        f"{where}: unsupported version {show(fence.get('version'))}; sitlpool reads version 2",
    )
    shapes: list = []
    polys, circles = fence.get("polygons", []), fence.get("circles", [])
    _need(isinstance(polys, list) and isinstance(circles, list), f"{where}: polygons and circles are lists")
    for i, p in enumerate(polys, start=1):
        _need(isinstance(p, dict), f"{where} polygon {i} is {show(p)}; it needs an object")
        shapes.append({"polygon": p.get("polygon"), "inclusion": p.get("inclusion", True)})
    for i, c in enumerate(circles, start=1):
        _need(
            isinstance(c, dict) and isinstance(c.get("circle"), dict),
            f"{where} circle {i} is {show(c)}; it needs an object with 'circle'",
        )
        shapes.append({"circle": c["circle"], "inclusion": c.get("inclusion", True)})
    ret = fence.get("breachReturn")
    if isinstance(ret, list) and len(ret) >= 2 and all(isinstance(v, (int, float)) for v in ret[:2]):
        shapes.append({"return_point": ret[:2]})
    return fence_items(shapes, where)


def _plan_rally(rally, what: str) -> list[Item]:
    where = f"{what}: rallyPoints"
    _need(isinstance(rally, dict), f"{where} is {show(rally)}; it needs an object")
    _need(
        rally.get("version") == 2,
        f"{where}: unsupported version {show(rally.get('version'))}; sitlpool reads version 2",
    )
    return rally_items(rally.get("points", []), where)


def _qgc_number(x: float):
    """A number as QJsonDocument writes it: NaN null, whole numbers without a point."""
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if x.is_integer() and abs(x) < 2**53:
            return int(x)
    return x


def write_plan(
    home: Item | None, items: list[Item], fence: list[Item] | None, rally: list[Item] | None, style: dict | None = None
) -> str:
    """A QGroundControl plan (what QGC's 'Save' writes for an ArduPilot quad unless ``style``
    carries the original file's cruiseSpeed, hoverSpeed, ...)."""
    style = style or {}
    q = _qgc_number
    out_items = []
    for n, it in enumerate(items, start=1):
        d: dict = {
            "autoContinue": bool(it.autocontinue),
            "command": it.command,
            "doJumpId": n,
            "frame": it.frame,
            "params": [q(float(v)) for v in (*it.params, it.x, it.y, it.z)],
            "type": "SimpleItem",
        }
        if it.command in QGC_ALTITUDE_COMMANDS and it.frame in QGC_ALTITUDE_MODES:
            d.update(
                {"AMSLAltAboveTerrain": None, "Altitude": q(float(it.z)), "AltitudeMode": QGC_ALTITUDE_MODES[it.frame]}
            )
        out_items.append(d)
    mission: dict = {k: style.get(k, v) for k, v in QGC_DEFAULTS.items()}
    mission.update({"items": out_items, "version": 2})
    if home is not None:
        mission["plannedHomePosition"] = [q(float(home.x)), q(float(home.y)), q(float(home.z))]
    doc: dict = {
        "fileType": "Plan",
        "groundStation": style.get("groundStation", "QGroundControl"),
        "mission": mission,
        "version": 1,
    }
    if fence is not None:
        shapes = fence_shapes(fence)
        polys = [
            {"inclusion": s["inclusion"], "polygon": [[q(a), q(b)] for a, b in s["polygon"]], "version": 1}
            for s in shapes
            if "polygon" in s
        ]
        circles = [
            {
                "circle": {
                    "center": [q(s["circle"]["center"][0]), q(s["circle"]["center"][1])],
                    "radius": q(s["circle"]["radius"]),
                },
                "inclusion": s["inclusion"],
                "version": 1,
            }
            for s in shapes
            if "circle" in s
        ]
        gf: dict = {"circles": circles, "polygons": polys, "version": 2}
        ret = [s["return_point"] for s in shapes if "return_point" in s]
        if ret:
            gf["breachReturn"] = [q(ret[0][0]), q(ret[0][1]), 0]
        doc["geoFence"] = gf
    if rally is not None:
        doc["rallyPoints"] = {"points": [[q(r.x), q(r.y), q(float(r.z))] for r in rally], "version": 2}
    return qt_json(doc) + "\n"


def qt_json(v, depth: int = 0) -> str:
    """JSON as QJsonDocument::toJson(Indented) writes it: keys sorted, 4 spaces, every array
    element on its own line, an empty array or object opened and closed on two lines."""
    pad, inner = "    " * depth, "    " * (depth + 1)
    if isinstance(v, dict):
        body = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {qt_json(v[k], depth + 1)}" for k in sorted(v)]
        return "{\n" + ",\n".join(body) + ("\n" if body else "") + pad + "}"
    if isinstance(v, list):
        body = [inner + qt_json(x, depth + 1) for x in v]
        return "[\n" + ",\n".join(body) + ("\n" if body else "") + pad + "]"
    if isinstance(v, float):
        return json.dumps(_qgc_number(v))
    return json.dumps(v, ensure_ascii=False)


# ---- fence and rally as shapes -------------------------------------------------------------


def fence_items(shapes, what: str = "the fence") -> list[Item]:
    """Fence shapes -> NAV_FENCE_* items. A shape is ``{"polygon": [[lat, lon], ...] (3 or more),
    "inclusion": true|false}``, ``{"circle": {"center": [lat, lon], "radius": m}, "inclusion": ...}``
    or ``{"return_point": [lat, lon]}``."""
    _need(isinstance(shapes, list), f"{what} is {show(shapes)}; it needs a list of polygons and circles")
    _count_check(len(shapes), what)
    out: list[Item] = []
    for i, s in enumerate(shapes, start=1):
        where = f"{what} shape {i}"
        _need(
            isinstance(s, dict),
            f"{where} is {show(s)}; write {{'polygon': [[lat, lon], ...], 'inclusion': true}} or a circle",
        )
        inclusion = s.get("inclusion", True)
        _need(isinstance(inclusion, bool), f"{where}: inclusion is {show(inclusion)}; it needs true or false")
        keys = set(s) & {"polygon", "circle", "return_point"}
        _need(len(keys) == 1, f"{where} has {sorted(s)}; a fence shape is one 'polygon', 'circle' or 'return_point'")
        if "polygon" in s:
            pts = s["polygon"]
            _need(
                isinstance(pts, list) and len(pts) >= 3,
                f"{where} is not a polygon: {show(pts)} ({len(pts) if isinstance(pts, list) else 0} vertices); "
                "a polygon needs 3 or more [lat, lon] vertices",
            )
            _count_check(len(pts), where)
            cmd = 5001 if inclusion else 5002
            corners = [_position(p, f"{where} vertex {j}") for j, p in enumerate(pts, start=1)]
            _need(
                _area_m2(corners) >= 1.0,
                f"{where} is not a polygon: its vertices enclose no area (repeated or in one line); "
                "give 3 or more corners of an area",
            )
            for lat, lon in corners:
                out.append(Item(cmd, 0, (float(len(pts)), 0.0, 0.0, 0.0), lat, lon, 0.0))
        elif "circle" in s:
            c = s["circle"]
            _need(isinstance(c, dict), f"{where}: circle is {show(c)}; it needs {{'center': [lat, lon], 'radius': m}}")
            lat, lon = _position(c.get("center"), f"{where} center")
            r = _num(c.get("radius"), f"{where} radius")
            _need(0 < r <= 1e7, f"{where} radius is {r:g} m; a fence circle needs a radius above 0")
            out.append(Item(5003 if inclusion else 5004, 0, (r, 0.0, 0.0, 0.0), lat, lon, 0.0))
        else:
            lat, lon = _position(
                s["return_point"][:2] if isinstance(s["return_point"], list) else None, f"{where} return_point"
            )
            out.append(Item(FENCE_RETURN, 0, (0.0, 0.0, 0.0, 0.0), lat, lon, 0.0))
    if sum(1 for it in out if it.command == FENCE_RETURN) > 1:
        raise ConfigError(f"{what} has more than one return_point; ArduPilot keeps one")
    return out


def fence_shapes(items: list[Item]) -> list[dict]:
    """NAV_FENCE_* items (as the vehicle keeps them) -> shapes."""
    out: list[dict] = []
    i = 0
    while i < len(items):
        it = items[i]
        if it.command in FENCE_POLYGON:
            n = max(1, int(it.params[0]))
            run = items[i : i + n]
            out.append({"polygon": [[r.x, r.y] for r in run], "inclusion": FENCE_POLYGON[it.command]})
            i += len(run)
            continue
        if it.command in FENCE_CIRCLE:
            out.append(
                {"circle": {"center": [it.x, it.y], "radius": it.params[0]}, "inclusion": FENCE_CIRCLE[it.command]}
            )
        elif it.command == FENCE_RETURN:
            out.append({"return_point": [it.x, it.y]})
        i += 1
    return out


def rally_items(points, what: str = "the rally points") -> list[Item]:
    """Rally points -> NAV_RALLY_POINT items (altitude above home): each ``[lat, lon, alt]`` or
    ``{"lat", "lon", "alt_m"}``."""
    _need(isinstance(points, list), f"{what} is {show(points)}; it needs a list of [lat, lon, alt] points")
    _count_check(len(points), what)
    out = []
    for i, p in enumerate(points, start=1):
        where = f"{what} point {i}"
        if isinstance(p, dict):
            extra = sorted(set(p) - {"lat", "lon", "alt_m"})
            _need(not extra, f"{where}: field {show(extra[:1])} does not belong to a rally point (lat, lon, alt_m)")
            p = [p.get("lat"), p.get("lon"), p.get("alt_m")]
        lat, lon, alt = _position(p, where, alt=True)
        _need(
            -32768 <= alt <= 32767, f"{where}: altitude {alt:g} m is beyond what ArduPilot keeps (whole metres, ±32767)"
        )
        out.append(Item(RALLY_POINT, 3, (0.0, 0.0, 0.0, 0.0), lat, lon, alt))
    return out


def rally_points(items: list[Item]) -> list[dict]:
    return [{"lat": it.x, "lon": it.y, "alt_m": it.z} for it in items]


def _area_m2(corners: list[tuple[float, ...]]) -> float:
    """The area a polygon of (lat, lon) corners encloses, in square metres (shoelace, local metres)."""
    lat0 = corners[0][0]
    k = 6378137.0 * math.pi / 180
    xy = [((lon - corners[0][1]) * k * math.cos(math.radians(lat0)), (lat - lat0) * k) for lat, lon in corners]
    return abs(sum(x1 * y2 - x2 * y1 for (x1, y1), (x2, y2) in zip(xy, xy[1:] + xy[:1]))) / 2
