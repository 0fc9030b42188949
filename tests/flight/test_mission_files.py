"""The mission files people bring (issue 23), on the built-in vehicle and on real ArduCopter:
.waypoints as Mission Planner and MAVProxy write them, QGroundControl .plan files with their
geofence and rally points, MAVProxy's fence and rally files, and any MAV_CMD in the items
form. The samples in ``data/`` are written in each program's own format; read and written
back they give the same text, and uploaded to a vehicle and downloaded again they give the
same text but for home (ArduPilot keeps its own home in item 0, so the file comes back with
the vehicle's). Bad input is refused in one line before anything is sent: the vehicle keeps
its mission, fence and rally points."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from mcp_client import ToolFailed, server
from sitlpool.config import load_settings
from sitlpool.errors import ConfigError, MavlinkError
from sitlpool.mavlink import mission
from sitlpool.mavlink import missionfiles as mf
from sitlpool.process import ManagedManager

DATA = Path(__file__).parent / "data"
HOME = (-35.363261, 149.165230)


def sample(name: str) -> str:
    return (DATA / name).read_bytes().decode()  # (CRLF kept: Mission Planner writes it)


# ---- the files alone ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["missionplanner.waypoints", "mavproxy.waypoints", "mavproxy-fence.waypoints", "mavproxy-rally.waypoints"]
)
def test_a_waypoints_file_reads_and_writes_back_the_same_text(name):
    text = sample(name)
    f = mf.read_waypoints(text)
    if f.fence is not None or f.rally is not None:
        assert f.home is None and not f.items
        assert mf.write_waypoints(None, f.fence or f.rally or [], f.style["wpl"], f.style["newline"]) == text
    else:
        assert f.home is not None and len(f.items) == text.count("\n") - 2
        assert mf.write_waypoints(f.home, f.items, f.style["wpl"], f.style["newline"]) == text
    assert f.style["wpl"] == ("missionplanner" if name.startswith("missionplanner") else "mavproxy")


def test_a_plan_reads_and_writes_back_the_same_text():
    text = sample("qgroundcontrol.plan")
    f = mf.read_plan(text)
    assert [it.command for it in f.items] == [22, 16, 178, 19, 20]
    assert [it.command for it in f.fence or []] == [5001] * 4 + [5002] * 3 + [5003, 5004]
    assert [(r.x, r.y, r.z) for r in f.rally or []] == [(-35.3628118, 149.1646792, 30), (-35.3637102, 149.1657808, 25)]
    assert mf.write_plan(f.home, f.items, f.fence, f.rally, f.style) == text


def _many_lines(n: int) -> str:
    row = "{}\t0\t3\t16\t0\t0\t0\t0\t-35.36\t149.16\t20\t1\n"
    return "QGC WPL 110\n" + "".join(row.format(i) for i in range(n))


def _cut_line(text: str, n: int) -> str:
    """``text`` with its line ``n`` (1 = the header) one column short."""
    lines = text.split("\n")
    lines[n - 1] = lines[n - 1].rsplit("\t", 1)[0]
    return "\n".join(lines)


PLAN = json.loads(sample("qgroundcontrol.plan"))


def _plan(**changes) -> str:
    doc = json.loads(json.dumps(PLAN))
    for path, value in changes.items():
        *keys, last = path.split("__")
        d = doc
        for k in keys:
            d = d[k]
        d[last] = value
    return json.dumps(doc)


BAD = {
    "wrong header": (dict(waypoints="QGC WPL 100\n0\t1\t0\t16\t0\t0\t0\t0\t1\t2\t3\t1\n"), r"line 1 is 'QGC WPL 100'"),
    "no header": (dict(waypoints=""), r"starts with 'QGC WPL 110'"),
    "short line": (
        dict(waypoints=_cut_line(sample("mavproxy.waypoints"), 7)),
        r"line 7 has 11 values; a QGC WPL 110 line has 12",
    ),
    "a word for a number": (
        dict(waypoints=sample("mavproxy.waypoints").replace("-35.362812", "north", 1)),
        r"line 4: lat/x is 'north'; it needs a number",
    ),
    "items out of order": (
        dict(waypoints=sample("mavproxy.waypoints").replace("\n3\t", "\n4\t", 1)),
        r"line 5: item number 4, expected 3",
    ),
    "plan not JSON": (dict(plan='{"fileType": "Plan", '), r"is not JSON: .* at line 1 column"),
    "plan version": (dict(plan=_plan(version=2)), r"unsupported plan version 2; sitlpool reads version 1"),
    "mission version": (dict(plan=_plan(mission__version=1)), r"unsupported mission version 1"),
    "fence version": (dict(plan=_plan(geoFence__version=1)), r"geoFence: unsupported version 1"),
    "not a plan": (dict(plan='{"fileType": "GeoFence", "version": 1}'), r"fileType is 'GeoFence'"),
    "100,000 items": (dict(items=[{"command": "rtl"}] * 100_000), r"a mission of 100000 items is too long"),
    "100,000 waypoints": (dict(waypoints=_many_lines(100_000)), r"has 100,000 items; ArduPilot stores at most"),
    "fence not a polygon": (
        dict(fence=[{"polygon": [[-35.36, 149.16], [-35.37, 149.17]], "inclusion": True}]),
        r"the fence shape 1 is not a polygon: .*\(2 vertices\); a polygon needs 3 or more",
    ),
    "fence file not a polygon": (
        dict(fence=sample("mavproxy-fence.waypoints").replace("4.000000", "5.000000")),
        r"the fence item 0 is not a polygon: it announces 5 vertices",
    ),
    "circle without radius": (
        dict(fence=[{"circle": {"center": [-35.36, 149.16], "radius": 0}}]),
        r"radius is 0 m; a fence circle needs a radius above 0",
    ),
    "rally too high": (dict(rally=[[-35.36, 149.16, 40000]]), r"altitude 40000 m is beyond what ArduPilot keeps"),
    "two ways at once": (
        dict(items=[{"command": "rtl"}], plan=sample("qgroundcontrol.plan")),
        r"give the mission one way",
    ),
    "fence twice": (dict(plan=sample("qgroundcontrol.plan"), fence=[]), r"the plan has its own fence"),
    "unknown MAV_CMD": (
        dict(items=[{"command": "other", "mav_cmd": "MAV_CMD_NAV_LOITER_TURN", "params": [1]}]),
        r"mav_cmd 'MAV_CMD_NAV_LOITER_TURN' is not a MAV_CMD; close: .*MAV_CMD_NAV_LOITER_TURNS",
    ),
    "complex item": (
        dict(plan=_plan(mission__items=[{"type": "ComplexItem", "complexItemType": "survey"}])),
        r"mission item 1 is a 'ComplexItem' \('survey'\); sitlpool reads SimpleItems",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_in_one_line(case):
    kw, message = BAD[case]
    with pytest.raises(ConfigError) as e:
        mission.what_to_send(kw.get("items"), kw.get("waypoints"), kw.get("plan"), kw.get("fence"), kw.get("rally"))
    text = str(e.value)
    assert re.search(message, text), text
    assert "\n" not in text and len(text) < 400, text


# ---- on a vehicle ------------------------------------------------------------------------


@pytest.fixture
def copter(env, vehicle_binary):
    overrides = {"sitl_binary": vehicle_binary} if vehicle_binary else {}
    m = ManagedManager(load_settings(**overrides))
    h = m.start("files", speedup=5)
    yield h.link
    m.close_all()


def _with_home(text: str, style: str, home: dict) -> str:
    """``text`` with its home line as the program writes the vehicle's home."""
    lat, lon, alt = home["lat"], home["lon"], home["alt_m"]
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(nl)
    if style == "missionplanner":
        lines[1] = f"0\t1\t0\t16\t0\t0\t0\t0\t{lat:.6f}\t{lon:.6f}\t{alt:.6f}\t1"
    else:
        lines[1] = "0\t0\t0\t16\t0.000000\t0.000000\t0.000000\t0.000000\t%f\t%f\t%f\t1" % (lat, lon, alt)
    return nl.join(lines)


def _plan_with_home(text: str, home: dict) -> str:
    def q(x):
        return int(x) if float(x).is_integer() else x

    block = ",\n".join(f"            {json.dumps(q(v))}" for v in (home["lat"], home["lon"], home["alt_m"]))
    return re.sub(r'"plannedHomePosition": \[\n[^\]]*\]', f'"plannedHomePosition": [\n{block}\n        ]', text)


@pytest.mark.parametrize(
    "name,style", [("missionplanner.waypoints", "missionplanner"), ("mavproxy.waypoints", "mavproxy")]
)
def test_a_waypoints_file_comes_back_from_the_vehicle_as_it_went(copter, name, style):
    text = sample(name)
    up = mission.upload(copter, waypoints=text)
    assert up["uploaded"] == len(mf.read_waypoints(text).items)
    down = mission.download(copter, format="waypoints")
    assert down["text"] == _with_home(text, style, down["home"])
    # the items form sees the same mission (ROI, spline, loiter turns, delay, jump: any MAV_CMD)
    records = mission.download(copter)["items"]
    assert len(records) == up["uploaded"] and records[0]["command"] == "takeoff"


def test_a_plan_with_fence_and_rally_comes_back_from_the_vehicle_as_it_went(copter):
    text = sample("qgroundcontrol.plan")
    up = mission.upload(copter, plan=text)
    assert (up["uploaded"], up["fence_items"], up["rally_points"]) == (5, 9, 2)
    down = mission.download(copter, format="plan")
    assert (down["count"], down["fence_items"], down["rally_points"]) == (5, 9, 2)
    assert down["text"] == _plan_with_home(text, down["home"])
    got = mission.download(copter, fence=True, rally=True)
    assert [s.get("inclusion") for s in got["fence"]] == [True, False, True, False]
    assert len(got["fence"][0]["polygon"]) == 4 and got["fence"][2]["circle"]["radius"] == 300
    assert got["rally"] == [
        {"lat": -35.3628118, "lon": 149.1646792, "alt_m": 30.0},
        {"lat": -35.3637102, "lon": 149.1657808, "alt_m": 25.0},
    ]


def test_mavproxy_fence_and_rally_files_and_shapes(copter):
    up = mission.upload(copter, fence=sample("mavproxy-fence.waypoints"), rally=sample("mavproxy-rally.waypoints"))
    assert (up["fence_items"], up["rally_points"]) == (6, 2) and "uploaded" not in up
    got = mission.download(copter, fence=True, rally=True)
    assert got["fence"][1] == {"circle": {"center": [-35.36371, 149.164679], "radius": 20.0}, "inclusion": False}
    assert got["fence"][2] == {"return_point": [-35.363261, 149.16523]}
    assert [p["alt_m"] for p in got["rally"]] == [30, 25]
    # shapes and points as records; an empty list clears
    triangle = [[-35.3628118, 149.1646792], [-35.3628118, 149.1657808], [-35.3637102, 149.1657808]]
    shapes = [
        {"polygon": triangle, "inclusion": False},
        {"circle": {"center": list(HOME), "radius": 150}, "inclusion": True},
    ]
    up = mission.upload(copter, fence=shapes, rally=[{"lat": HOME[0], "lon": HOME[1], "alt_m": 40}])
    assert "warning" not in up, up
    got = mission.download(copter, fence=True, rally=True)
    assert got["fence"] == [
        {"polygon": triangle, "inclusion": False},
        {"circle": {"center": [HOME[0], 149.16523], "radius": 150.0}, "inclusion": True},
    ]
    assert got["rally"] == [{"lat": HOME[0], "lon": 149.16523, "alt_m": 40.0}]
    mission.upload(copter, fence=[], rally=[])
    got = mission.download(copter, fence=True, rally=True)
    assert got["fence"] == [] and got["rally"] == []


def test_any_mav_cmd_in_the_items_form(copter):
    items = [
        {"command": "takeoff", "alt_m": 10},
        {
            "command": "other",
            "mav_cmd": "MAV_CMD_NAV_LOITER_TURNS",
            "params": [2, 0, 10, 0],
            "lat": -35.3628118,
            "lon": 149.16523,
            "alt_m": 20,
        },
        {"command": "MAV_CMD_CONDITION_YAW", "params": [90, 20, 1, 0]},
        {"command": "other", "mav_cmd": 177, "params": [2, 1]},  # DO_JUMP by number
        {"command": "rtl"},
    ]
    assert mission.upload(copter, items)["uploaded"] == 5
    got = mission.download(copter)["items"]
    assert got[1] == {
        "command": "other",
        "mav_cmd": "MAV_CMD_NAV_LOITER_TURNS",
        "params": [2.0, 0.0, 10.0, 0.0],
        "lat": -35.3628118,
        "lon": 149.16523,
        "alt_m": 20.0,
    }
    assert got[2]["mav_cmd"] == "MAV_CMD_CONDITION_YAW" and got[2]["params"] == [90.0, 20.0, 1.0, 0.0]
    assert got[3]["mav_cmd"] == "MAV_CMD_DO_JUMP" and got[3]["params"][:2] == [2.0, 1.0]
    assert mission.upload(copter, got)["uploaded"] == 5, "what comes back uploads again"
    # a MAV_CMD the vehicle does not know: refused by it, the previous mission put back
    with pytest.raises(
        MavlinkError, match=r"refused by the vehicle: unsupported.*previous mission \(5 items\) was put back"
    ):
        mission.upload(copter, [{"command": "takeoff", "alt_m": 5}, {"command": "other", "mav_cmd": 31999}])
    assert mission.download(copter)["items"] == got


def test_bad_input_leaves_mission_fence_and_rally_as_they_were(copter):
    mission.upload(copter, plan=sample("qgroundcontrol.plan"))
    before = mission.download(copter, format="plan")["text"]
    for case in ("short line", "plan version", "fence not a polygon", "100,000 items", "fence file not a polygon"):
        kw = BAD[case][0]
        with pytest.raises(ConfigError):
            mission.upload(copter, kw.get("items"), **{k: v for k, v in kw.items() if k != "items"})
    assert mission.download(copter, format="plan")["text"] == before


def test_a_fence_the_vehicle_refuses_puts_the_mission_back(copter):
    mission.upload(copter, plan=sample("qgroundcontrol.plan"))
    before = mission.download(copter, format="plan")["text"]
    # ArduCopter keeps at most 70 fence items: the mission goes first, then the fence is refused
    circles = [{"circle": {"center": list(HOME), "radius": 50 + i}, "inclusion": True} for i in range(80)]
    with pytest.raises(MavlinkError) as e:
        mission.upload(copter, waypoints=sample("mavproxy.waypoints"), fence=circles)
    text = str(e.value)
    assert "fence upload (80 items) refused by the vehicle: no_space" in text, text
    assert "previous mission (5 items) was put back" in text and "previous fence (9 items) was put back" in text, text
    assert mission.download(copter, format="plan")["text"] == before


# ---- through MCP -------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_upload_and_download_files(env, instances, anyio_backend):
    async with server(env) as call:
        s = await call("open_sitl", label="files", speedup=5)
        sid = s["session_id"]
        try:
            up = await call("upload_mission", session_id=sid, plan=sample("qgroundcontrol.plan"))
            assert (up["uploaded"], up["fence_items"], up["rally_points"]) == (5, 9, 2)
            down = await call("download_mission", session_id=sid, format="plan")
            assert down["text"] == _plan_with_home(sample("qgroundcontrol.plan"), down["home"])
            up = await call("upload_mission", session_id=sid, waypoints=sample("missionplanner.waypoints"))
            down = await call("download_mission", session_id=sid, format="waypoints")
            assert down["text"] == _with_home(sample("missionplanner.waypoints"), "missionplanner", down["home"])
            with pytest.raises(ToolFailed, match=r"line 1 is 'QGC WPL 999'"):
                await call("upload_mission", session_id=sid, waypoints="QGC WPL 999\n")
            with pytest.raises(ToolFailed, match=r"format 'kml' is not one of items, waypoints, plan"):
                await call("download_mission", session_id=sid, format="kml")
            got = await call("download_mission", session_id=sid, fence=True, rally=True)
            assert len(got["fence"]) == 4 and len(got["rally"]) == 2 and got["count"] == 13
        finally:
            await call("close_sitl", session_id=sid)
            await anyio.sleep(0)
