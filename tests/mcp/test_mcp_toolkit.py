"""Issue 14's toolkit through the real MCP client talking to ``sitlpool serve``: missions,
RC override, parameters in bulk, the flight picture; and the state file behind
``sitlpool status``. On the built-in vehicle, and on real ArduCopter when it is given."""

import base64
import io
import json
import math
import os
import signal
import subprocess
import sys

import anyio
import pytest

from conftest import BLOCK_LOCK_DIR, Gcs, listening, start_sim, wait_for
from mcp_client import ToolFailed, server
from sitlpool import statefile
from sitlpool.errors import ConfigError
from sitlpool.instances import ports

pytestmark = pytest.mark.anyio
M_PER_DEG = 111320.0


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def until(call, tool, timeout=30, **args):
    """Retry a tool the vehicle refuses until it is ready (GPS/EKF), as an agent would."""
    deadline = anyio.current_time() + timeout
    while True:
        try:
            return await call(tool, **args)
        except ToolFailed:
            if anyio.current_time() > deadline:
                raise
            await anyio.sleep(0.3)


async def ready_home(call, sid, timeout=60):
    """The vehicle's home once it has one (GPS/EKF ready)."""
    deadline = anyio.current_time() + timeout
    while True:
        v = (await call("snapshot", session_id=sid))["vehicle"]
        if v["home"] is not None and (v["gps_fix_type"] or 0) >= 3:
            return v["home"]
        assert anyio.current_time() < deadline, "the vehicle never got a home position"
        await anyio.sleep(0.2)


def north_east(home, n, e):
    return home["lat"] + n / M_PER_DEG, home["lon"] + e / (M_PER_DEG * math.cos(math.radians(home["lat"])))


def mission_around(home):
    lat1, lon1 = north_east(home, 30, 0)
    lat2, lon2 = north_east(home, 30, 30)
    return [
        {"command": "takeoff", "alt_m": 10},
        {"command": "waypoint", "lat": lat1, "lon": lon1, "alt_m": 12},
        {"command": "change_speed", "speed_m_s": 5},
        {"command": "waypoint", "lat": lat2, "lon": lon2, "alt_m": 12, "seconds": 1},
        {"command": "loiter_time", "seconds": 2},  # where it is
        {"command": "land"},
    ]


async def picture(call, sid, **kw):
    """(PIL image, summary) of flight_picture."""
    from PIL import Image

    r = await call.session.call_tool("flight_picture", {"session_id": sid, **kw})
    assert not r.is_error, " ".join(getattr(c, "text", "") for c in r.content)
    images = [c for c in r.content if c.type == "image"]
    texts = [c for c in r.content if c.type == "text"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    img = Image.open(io.BytesIO(base64.b64decode(images[0].data)))
    img.load()
    return img.convert("RGB"), json.loads(texts[0].text)


def has_colour(img, rgb, box=None) -> int:
    """How many pixels of exactly ``rgb`` (inside ``box``)."""
    region = img.crop(box) if box else img
    return dict((c, k) for k, c in region.getcolors(1 << 24)).get(rgb, 0)


async def fly_mission(call, sid, home):
    items = mission_around(home)
    up = await call("upload_mission", session_id=sid, items=items)
    assert up["uploaded"] == 6
    down = await call("download_mission", session_id=sid)
    assert [i["command"] for i in down["items"]] == [i["command"] for i in items]
    assert down["items"][1]["lat"] == pytest.approx(items[1]["lat"], abs=1e-6)
    assert down["items"][1]["alt_m"] == pytest.approx(12) and down["items"][2]["speed_m_s"] == pytest.approx(5)
    assert down["items"][4] == items[4] and down["items"][5] == items[5], "the same records come back"
    st = await call("mission_status", session_id=sid)
    assert st["total_items"] == 6 and st["items_reached"] == [] and st["finished"] is False
    started = await until(call, "start_mission", timeout=60, session_id=sid)
    assert started["started_at_item"] == 1 and started["armed"]
    w = await call("wait_until", session_id=sid, condition="mission_item", value=2, timeout_s=55)
    assert w["result"] == "met"
    v = w["snapshot"]["vehicle"]
    assert v["relative_alt_m"] > 5 and v["armed"]
    st = await call("mission_status", session_id=sid)
    # MISSION_CURRENT comes a few times a second: it may still name item 2 as its REACHED arrives
    assert {1, 2} <= set(st["items_reached"]) and not st["finished"] and st["current_item"] >= 2
    w = await call("wait_until", session_id=sid, condition="mission_done", timeout_s=55)
    assert w["result"] == "met"
    st = await call("mission_status", session_id=sid)
    assert st["finished"] and st["items_reached"] == [1, 2, 3, 4, 5, 6]
    w = await call("wait_until", session_id=sid, condition="disarmed", timeout_s=30)
    assert w["result"] == "met"
    v = w["snapshot"]["vehicle"]
    n = (v["lat"] - home["lat"]) * M_PER_DEG
    e = (v["lon"] - home["lon"]) * M_PER_DEG * math.cos(math.radians(home["lat"]))
    assert abs(n - 30) < 3 and abs(e - 30) < 3, (n, e)  # landed at the last waypoint


async def test_mission_flown_waited_for_and_pictured(env, data_dir):
    from sitlpool import picture as pic

    async with server(env) as call:
        s = await call("open_sitl", speedup=10, label="mission")
        sid = s["session_id"]
        home = await ready_home(call, sid)
        await fly_mission(call, sid, home)
        img, summary = await picture(call, sid)
        assert img.size == (pic.W, pic.H)
        assert summary["positions"] > 20 and summary["mission_waypoints"] == 2
        assert 11 < summary["max_relative_alt_m"] < 13
        left = (pic.MARGIN_L, pic.MARGIN_T, pic.MARGIN_L + pic.TRACK_W, pic.H - pic.MARGIN_B)
        right = (pic.MARGIN_L + pic.TRACK_W + pic.GAP, pic.MARGIN_T, pic.W, pic.H - pic.MARGIN_B)
        assert has_colour(img, pic.TRACK, left) > 50, "the ground track is drawn"
        assert has_colour(img, pic.WAYPOINT, left) > 20, "the waypoints are drawn"
        assert has_colour(img, pic.ALT, right) > 50, "the altitude line is drawn"
        assert has_colour(img, pic.START, right) > 10 and has_colour(img, pic.END, right) > 10, "arm and disarm marked"
        _, recent = await picture(call, sid, last_s=1)
        assert 0 < recent["positions"] < summary["positions"]
        with pytest.raises(ToolFailed, match="last_s -1.0 must be a number of seconds above 0"):
            await call("flight_picture", session_id=sid, last_s=-1)


async def test_bad_missions_are_refused_before_anything_is_sent(env):
    async with server(env) as call:
        sid = (await call("open_sitl", speedup=10))["session_id"]
        home = await ready_home(call, sid)
        good = [{"command": "takeoff", "alt_m": 5}, {"command": "rtl"}]
        assert (await call("upload_mission", session_id=sid, items=good))["uploaded"] == 2
        lat, lon = north_east(home, 10, 0)
        bad = {
            "item 2 \\(waypoint\\): field 'lat' is missing": [good[0], {"command": "waypoint", "lon": lon, "alt_m": 5}],
            "item 1: command 'jump' is not one of takeoff, waypoint": [{"command": "jump"}],
            "item 1 \\(takeoff\\): field 'alt_m' is -5; a takeoff climbs above home": [
                {"command": "takeoff", "alt_m": -5}
            ],
            "item 2 \\(waypoint\\): field 'altitude' does not belong to a waypoint item": [
                good[0],
                {"command": "waypoint", "lat": lat, "lon": lon, "altitude": 5},
            ],
            "item 2 \\(land\\): field 'frame' is 'agl'": [good[0], {"command": "land", "frame": "agl"}],
            "item 2 \\(waypoint\\): field 'lat'/'lon' \\(95.0,": [
                good[0],
                {"command": "waypoint", "lat": 95, "lon": lon, "alt_m": 5},
            ],
            "item 3 \\(loiter_time\\): field 'seconds' is missing": [good[0], good[0], {"command": "loiter_time"}],
            "item 1 \\(change_speed\\): field 'speed_m_s' is 'fast'; it needs a finite number": [
                {"command": "change_speed", "speed_m_s": "fast"}
            ],
            "a mission is a non-empty list": [],
        }
        for msg, items in bad.items():
            with pytest.raises(ToolFailed, match=msg):
                await call("upload_mission", session_id=sid, items=items)
        down = await call("download_mission", session_id=sid)
        assert [i["command"] for i in down["items"]] == ["takeoff", "rtl"], "nothing of the bad missions was sent"
        with pytest.raises(ToolFailed, match="start item 9 is not an item of this mission: use 1..2"):
            await call("start_mission", session_id=sid, item=9)
        with pytest.raises(ToolFailed, match="mission_item needs the item number"):
            await call("wait_until", session_id=sid, condition="mission_item", value="first")
        assert (await call("clear_mission", session_id=sid))["cleared"]
        assert (await call("download_mission", session_id=sid))["count"] == 0
        with pytest.raises(ToolFailed, match="has no mission; upload_mission first"):
            await call("start_mission", session_id=sid)
        st = await call("snapshot", session_id=sid)
        assert not st["vehicle"]["armed"], "a refused start changed nothing"


async def test_read_only_attachment_refuses_every_change(env, procs, tmp_path, instances):
    n = instances[3]
    start_sim(procs, tmp_path / "foreign", n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)
    owner.heartbeat()
    wait_for(lambda: listening(ports(n).serial1))
    async with server(env) as call:
        sid = (await call("attach_sitl", instance=n, label="watcher"))["session_id"]
        for tool, args in [
            ("upload_mission", {"items": [{"command": "takeoff", "alt_m": 5}]}),
            ("clear_mission", {}),
            ("start_mission", {}),
            ("rc_override", {"channels": {"3": 1700}}),
            ("rc_override", {"channels": {}}),
            ("set_params", {"values": {"RTL_ALT": 2000}}),
        ]:
            with pytest.raises(ToolFailed, match="attached read-only"):
                await call(tool, session_id=sid, **args)
        assert (await call("download_mission", session_id=sid))["count"] == 0
        assert (await call("get_params", session_id=sid, prefix="RTL_ALT"))["params"]["RTL_ALT"] == 1500
        assert (await call("mission_status", session_id=sid))["finished"] is False
        _, summary = await picture(call, sid)
        assert summary["positions"] > 0
    assert owner.heartbeat()
    owner.close()


async def steady_altitude(call, sid, timeout=15):
    """The altitude once the vehicle has stopped climbing or sinking (fails if it never does)."""
    deadline = anyio.current_time() + timeout
    await anyio.sleep(0.3)
    while True:
        v = (await call("snapshot", session_id=sid))["vehicle"]
        if abs(v["climb_m_s"]) < 0.05:
            return v["relative_alt_m"]
        assert anyio.current_time() < deadline, f"still climbing at {v['climb_m_s']} m/s"
        await anyio.sleep(0.1)


async def test_rc_override_holds_until_released_or_timed_out(env):
    async with server(env) as call:
        sid = (await call("open_sitl", speedup=10))["session_id"]
        await ready_home(call, sid)
        await call("set_mode", session_id=sid, mode="ALT_HOLD")
        await until(call, "arm", session_id=sid)
        held = await call("rc_override", session_id=sid, channels={"3": 1700})
        assert held["holding"] and held["channels"] == {"3": 1700} and held["seconds_left"] is None
        # one override lasts 1 s of sim time (0.1 s here): climbing to 6 m needs it repeated
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=6, timeout_s=30)
        assert w["result"] == "met"
        released = await call("rc_override", session_id=sid, channels={})
        assert released["released"] and released["channels"] == {}
        a = await steady_altitude(call, sid)  # the last override runs out (1 s of sim time): it holds
        await anyio.sleep(1.0)  # 10 s of sim time: still climbing would add metres
        b = (await call("snapshot", session_id=sid))["vehicle"]["relative_alt_m"]
        assert abs(b - a) < 0.5, (a, b)
        timed = await call("rc_override", session_id=sid, channels={"3": 1700}, seconds=0.3)
        assert 0 < timed["seconds_left"] <= 0.3
        c = await steady_altitude(call, sid)
        await anyio.sleep(1.0)
        d = (await call("snapshot", session_id=sid))["vehicle"]["relative_alt_m"]
        assert c > b + 0.2, "the timed override climbed while it lasted"
        assert abs(d - c) < 0.5, "and stopped when its time ran out"
        for channels, seconds, msg in [
            ({"19": 1500}, None, "RC channel 19 does not exist"),
            ({"3": 5000}, None, "RC channel 3: 5000.0 is not a PWM value"),
            ({"three": 1500}, None, "RC channel 'three' is not a channel number"),
            ({"3": 1500}, -1, "seconds -1.0 is out of range"),
        ]:
            with pytest.raises(ToolFailed, match=msg):
                await call("rc_override", session_id=sid, channels=channels, seconds=seconds)


async def test_parameters_in_bulk(env):
    async with server(env) as call:
        sid = (await call("open_sitl", speedup=5))["session_id"]
        every = await call("get_params", session_id=sid)
        assert every["count"] == every["total"] == len(every["params"]) > 40
        assert every["params"]["RTL_ALT"] == 1500 and isinstance(every["params"]["RTL_ALT"], int)
        rtl = await call("get_params", session_id=sid, prefix="rtl_")
        assert rtl["count"] >= 3 and all(k.startswith("RTL_") for k in rtl["params"])
        assert rtl["params"] == {k: v for k, v in every["params"].items() if k.startswith("RTL_")}
        done = await call("set_params", session_id=sid, values={"RTL_ALT": 2000, "wpnav_speed": 750.5})
        assert done["set"] == {"RTL_ALT": 2000, "WPNAV_SPEED": 750.5}
        assert (await call("get_param", session_id=sid, name="RTL_ALT"))["value"] == 2000
        with pytest.raises(ToolFailed, match="unknown parameter NO_SUCH_PARAM: .*nothing was set"):
            await call("set_params", session_id=sid, values={"RTL_ALT": 3000, "NO_SUCH_PARAM": 1})
        assert (await call("get_param", session_id=sid, name="RTL_ALT"))["value"] == 2000
        with pytest.raises(ToolFailed, match="non-empty record"):
            await call("set_params", session_id=sid, values={})


def test_parameter_values_must_be_finite():
    from sitlpool.mavlink.params import check_values

    for bad in (float("nan"), float("inf"), "12", True):
        with pytest.raises(ConfigError, match="RTL_ALT: value .*finite number"):
            check_values({"rtl_alt": bad})
    assert check_values({" rtl_alt ": 5}) == {"RTL_ALT": 5.0}


# ---- the state file behind `sitlpool status` -----------------------------------------------

LAUNCHER = """
import time
from sitlpool.process import ManagedManager
from sitlpool.statefile import start_writer
m = ManagedManager()
h = m.start("state-file", speedup=5)
if getattr(h, "_state_writer", None) is None:  # until managed.py starts it itself
    start_writer(h.link, m.settings.data_dir, h.instance, h.pid)
print(h.instance, h.pid, flush=True)
time.sleep(3600)
"""


def test_state_file_is_live_then_stale_when_its_launcher_dies(env, data_dir, procs):
    p = procs.python(LAUNCHER, env=env, stdout=subprocess.PIPE, text=True)
    n, sitl_pid = map(int, p.stdout.readline().split())
    d = wait_for(lambda: statefile.read(data_dir, n), what="the state file")
    d = wait_for(
        lambda: (x := statefile.read(data_dir, n)) and x["mode"] and x["battery_pct"] is not None and x,
        what="a state file with the vehicle's state",
    )
    assert d["stale"] is False and d["link"] == "connected" and d["sitl_pid"] == sitl_pid and d["armed"] is False
    assert d["writer_pid"] == p.pid and d["mode"] == "STABILIZE"
    assert statefile.describe(d).startswith("STABILIZE, disarmed, 0.0 m, battery ")
    assert [x["instance"] for x in statefile.read_all(data_dir)] == [n]
    t0 = d["time"]
    wait_for(lambda: statefile.read(data_dir, n)["time"] > t0, timeout=5, what="the next write")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    d = statefile.read(data_dir, n)
    assert d["stale"] and d["stale_reason"] == f"its launcher (pid {p.pid}) is gone"
    assert statefile.describe(d).startswith(f"STALE (its launcher (pid {p.pid}) is gone;")
    wait_for(
        lambda: subprocess.run(["kill", "-0", str(sitl_pid)], capture_output=True).returncode != 0,
        what="the SITL exits with its launcher",
    )


def test_state_file_goes_when_the_session_closes(env, data_dir):
    from sitlpool.process import ManagedManager

    m = ManagedManager()
    h = m.start("state-close", speedup=5)
    try:
        w = getattr(h, "_state_writer", None) or statefile.start_writer(h.link, data_dir, h.instance, h.pid)
        path = statefile.state_path(data_dir, h.instance)
        wait_for(path.exists, what="the state file")
        assert json.loads(path.read_text())["writer_pid"] == os.getpid()
    finally:
        h.kill(wait=True)
    wait_for(lambda: not path.exists(), timeout=5, what="the state file removed with the session")
    w.stop()
    assert statefile.read(data_dir, h.instance) is None


async def test_status_shows_the_live_state_of_a_served_sitl(env, data_dir):
    async with server(env) as call:
        s = await call("open_sitl", speedup=5)
        n = s["instance"]
        path = statefile.state_path(data_dir, n)
        wait_for(path.exists, timeout=10, what="the launcher's state file")

        def status(*args):
            r = subprocess.run(
                [sys.executable, "-m", "sitlpool", "status", *args], env=env, capture_output=True, text=True, timeout=60
            )
            assert r.returncode == 0, r.stderr
            return r.stdout

        live = {d["instance"]: d for d in json.loads(status("--json"))["live"]}
        assert live[n]["mode"] == "STABILIZE" and live[n]["stale"] is False and live[n]["sitl_pid"] == s["pid"]
        assert "STABILIZE, disarmed" in status()
    wait_for(lambda: not path.exists(), timeout=10, what="the state file removed with the session")


# ---- real ArduCopter ---------------------------------------------------------------------------

REAL_POOL = "160-199"  # real SITL keeps -I in a uint8: test instances 1000+ alias 0-255; flight's tests use 200-251


@pytest.fixture
def real_env(env, real_copter):
    # a lock dir shared by every run of these tests on this machine: sitlpool's own leases and
    # port probe keep concurrent runs apart
    lock_dir = BLOCK_LOCK_DIR / "toolkit-real-leases"
    lock_dir.mkdir(parents=True, exist_ok=True)
    return dict(env, SITLPOOL_SITL_BINARY=str(real_copter), SITLPOOL_POOL=REAL_POOL, SITLPOOL_LOCK_DIR=str(lock_dir))


async def test_real_arducopter_mission_params_and_picture(real_env):
    async with server(real_env) as call:
        sid = (await call("open_sitl", speedup=10, label="real-toolkit"))["session_id"]
        # just booted: ArduCopter would accept an arm in GUIDED and then refuse AUTO; the start says why instead
        await call("upload_mission", session_id=sid, items=[{"command": "takeoff", "alt_m": 5}, {"command": "land"}])
        with pytest.raises(ToolFailed, match="the mission cannot start yet: the vehicle is not ready to arm"):
            await call("start_mission", session_id=sid)
        assert not (await call("snapshot", session_id=sid))["vehicle"]["armed"]
        every = await call("get_params", session_id=sid)
        assert every["count"] == every["total"] > 1000 and "WPNAV_SPEED" in every["params"]
        done = await call("set_params", session_id=sid, values={"RTL_ALT": 2000, "WPNAV_SPEED": 800})
        assert done["set"] == {"RTL_ALT": 2000, "WPNAV_SPEED": 800}
        with pytest.raises(ToolFailed, match="unknown parameter NO_SUCH_PARAM"):
            await call("set_params", session_id=sid, values={"NO_SUCH_PARAM": 1})
        home = await ready_home(call, sid)
        await fly_mission(call, sid, home)
        _, summary = await picture(call, sid)
        assert summary["positions"] > 20 and summary["mission_waypoints"] == 2
        # RC: throttle up in ALT_HOLD climbs; released, SITL's own RC input (throttle low) brings it down
        await call("set_mode", session_id=sid, mode="ALT_HOLD")
        await until(call, "arm", session_id=sid)
        await call("rc_override", session_id=sid, channels={"3": 1800})
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=4, timeout_s=40)
        assert w["result"] == "met"
        await call("rc_override", session_id=sid, channels={})
        w = await call("wait_until", session_id=sid, condition="altitude_below", value=1, timeout_s=40)
        assert w["result"] == "met"
