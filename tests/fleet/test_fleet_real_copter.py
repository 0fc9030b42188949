"""Real ArduCopter on a Ray node: a loopback cluster of this module's own (one node, its
``ray start`` environment naming the real binary in SITLPOOL_SITL_BINARY), driven the way a
user's machine drives one, from other processes (this test process never joins a Ray):

- ``Fleet(address).open`` with a preset, a Mission Planner parameter file and a Lua script (the
  files travel to the node by content): the configuration read back from the real vehicle, the
  script run there, the binary's own AUTOPILOT_VERSION; close frees the slot and the node's files;
- ``sitlpool serve --ray``: a Mission Planner ``.waypoints`` and a QGroundControl ``.plan``
  (mission, geofence, rally) through the real vehicle on the node and back, as docs/missions.md
  promises (the same text but for the vehicle's own home);
- ``sitlpool ab --ray``: WPNAV_SPEED_UP 250 against 100, one run each, on the node.

Skipped without a real ArduCopter (SITLPOOL_TEST_SITL_BINARY / --sitl-binary)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _real_binary, release_blocks, reserve_blocks, wait_for
from sitlpool.logs import LogStore

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet_real")  # its own cluster (a real binary on its node), on any worker

from ray_cluster import RayCluster  # noqa: E402

DATA = Path(__file__).parents[1] / "flight" / "data"  # the mission files as each program writes them
SPEEDUP = 10
VERSION = r"4\.\d+\.\d+\S* \([0-9a-f]{8}\)"  # AUTOPILOT_VERSION as ArduPilot's banner shows it

PRESETS = """
[real-cmac]
description = "real ArduCopter at CMAC with a frame file, 10x"
home = "CMAC"
speedup = 10
param_files = ["frame.parm"]
params = { RTL_ALT = 1700 }
"""
FRAME = "# sitlpool's own form\nRTL_ALT 1500\nPILOT_SPEED_UP 300\n"
# as Mission Planner's "Save to file" writes one: a #NOTE line, NAME,VALUE, CRLF
MP_PARM = "#NOTE: 01/12/2026 18:52:51 Frame : QUAD/X\r\nLAND_SPEED,40\r\nRTL_ALT,1600\r\nWPNAV_SPEED,750\r\n"
LUA = """\
param:set("SCR_USER1", 4242)
function update()
  gcs:send_text(6, "lua on the node: hello")
  return update, 1000
end
return update()
"""

OPEN_DRIVER = """
import json, sys, time
from sitlpool.fleet import Fleet

fleet = Fleet(sys.argv[1])
free = fleet.capacity()[1]
s = fleet.open(preset="real-cmac", param_files=[sys.argv[2]], scripts=["hello.lua"], label="real-lua", wait_s=60)
deadline = time.monotonic() + 60  # the script runs a few sim seconds after boot
while time.monotonic() < deadline and not (
    s.get_param("SCR_USER1") == 4242 and "lua on the node: hello" in [t for _, _, t in s.link.vehicle.texts]
):
    time.sleep(0.2)
print(json.dumps({
    "info": s.info, "free": free, "free_open": fleet.capacity()[1],
    "scr_user1": s.get_param("SCR_USER1"), "land_speed": s.get_param("LAND_SPEED"),
    "texts": [t for _, _, t in s.link.vehicle.texts],
}), flush=True)
sys.stdin.readline()  # the test looks at the node meanwhile
s.close()
deadline = time.monotonic() + 20
while fleet.capacity()[1] != free and time.monotonic() < deadline:
    time.sleep(0.1)
print(json.dumps({"free_closed": fleet.capacity()[1], "recipe": s.recipe_doc}, default=str), flush=True)
fleet.close()
"""

CLIMB = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 120},
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 120},
]


@pytest.fixture(scope="module")
def cluster(pytestconfig):
    binary = _real_binary(pytestconfig, "arducopter")
    if binary is None:
        pytest.skip("real ArduCopter not given (--sitl-binary PATH or SITLPOOL_TEST_SITL_BINARY)")
    pool = reserve_blocks(1, real=True)  # real SITL keeps -I in a uint8
    try:
        c = RayCluster.start([pool], sitl_per_node=2, env_extra={"SITLPOOL_SITL_BINARY": str(binary)}, timeout=120)
    except BaseException:
        release_blocks(pool)
        raise
    c.binary = binary
    yield c
    for n in c.nodes:  # every session is closed by now: SIGKILL after 1 s, not RayCluster's 5 s of grace
        n.stop(grace=1.0)
    c.stop()
    release_blocks(pool)


@pytest.fixture(scope="module")
def user(tmp_path_factory, cluster):
    """A user's machine (the driver): presets, parameter files, a scripts folder; never the node's."""
    d = tmp_path_factory.mktemp("driver")
    (d / "presets.toml").write_text(PRESETS)
    (d / "frame.parm").write_text(FRAME)
    (d / "mp.parm").write_bytes(MP_PARM.encode())
    (d / "lua").mkdir()
    (d / "lua" / "hello.lua").write_text(LUA)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SITLPOOL_"))}
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        HOME=str(cluster.root),
        SITLPOOL_DATA_DIR=str(d / "data"),
        SITLPOOL_POOL="1-2",  # the driver's own pool: never used, every SITL is the node's
        SITLPOOL_PRESETS=str(d / "presets.toml"),
        SITLPOOL_SCRIPTS_DIR=str(d / "lua"),
    )
    (d / "data").mkdir()
    return d, env


def held(node) -> list[int]:
    from sitlpool.leases import LeasePool

    return [h.instance for h in LeasePool(node.data_dir / "leases", node.pool, check=False).status()]


def node_files(node) -> list[str]:
    return [str(p) for p in (node.data_dir / "fleet-files").glob("*/**/*")]


def json_line(p: subprocess.Popen, err: Path) -> dict:
    assert p.stdout is not None
    for line in p.stdout:
        if line.startswith("{"):
            return json.loads(line)
    p.wait(30)
    pytest.fail(f"the driver ended without an answer (exit {p.returncode}): {err.read_text()[-3000:]}")


def test_a_preset_a_parameter_file_and_lua_on_real_arducopter_on_a_node(cluster, user, procs):
    d, env = user
    (node,) = cluster.nodes
    with open(d / "open.err", "wb") as err:
        driver = procs.python(
            OPEN_DRIVER,
            cluster.address,
            d / "mp.parm",
            env=env,
            cwd=d,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    got = json_line(driver, d / "open.err")
    info, config = got["info"], got["info"]["config"]
    # the node's real binary runs it, with the tree's defaults beside it
    assert os.readlink(f"/proc/{info['pid']}/exe") == str(cluster.binary), info
    assert [Path(f).name for f in config["defaults"]] == ["copter.parm"], config
    assert info["instance"] in node.pool and held(node) == [info["instance"]]
    # read back from the vehicle: the preset's file, then the given one, then the preset's params
    assert config["param_files"] == [str(d / "frame.parm"), str(d / "mp.parm")]
    p = config["params"]
    assert (p["PILOT_SPEED_UP"], p["LAND_SPEED"], p["WPNAV_SPEED"], p["RTL_ALT"]) == (300, 40, 750, 1700), p
    assert p["SCR_ENABLE"] == 1 and config["scripts"] == ["hello.lua"], config
    assert got["land_speed"] == 40
    assert config["speedup"] == SPEEDUP and config["home"].startswith("-35.363261,149.16523,584"), config
    # the script ran on the node's vehicle: the parameter it set, the text it sends
    assert got["scr_user1"] == 4242, got["texts"][-20:]
    assert "lua on the node: hello" in got["texts"], got["texts"][-20:]
    assert got["free_open"] == got["free"] - 1
    # on the node, by content: the launch's copies of the driver's files, the script in scripts/
    files = [Path(f) for f in node_files(node) if Path(f).is_file()]
    assert sorted(f.read_bytes() for f in files) == sorted(x.encode() for x in (FRAME, MP_PARM, LUA)), files
    assert [f.parent.name for f in files if f.name == "hello.lua"] == ["scripts"], files

    driver.stdin.write("close\n")
    driver.stdin.flush()
    closed = json_line(driver, d / "open.err")
    assert closed["free_closed"] == got["free"], closed
    assert driver.wait(60) == 0, (d / "open.err").read_text()[-3000:]
    assert not os.path.exists(f"/proc/{info['pid']}") or _zombie(info["pid"])
    assert held(node) == [] and node_files(node) == []
    # its recipe, made on the node at close: the real binary by hash and the AUTOPILOT_VERSION it
    # answered, the files by the driver's names and content hashes
    recipe = closed["recipe"]
    assert recipe["binary"]["path"] == str(cluster.binary) and not recipe["binary"]["builtin"], recipe
    assert recipe["binary"]["sha256"] == hashlib.sha256(cluster.binary.read_bytes()).hexdigest()
    assert re.fullmatch(VERSION, recipe["binary"]["version"]), recipe["binary"]
    assert [(f["path"], f["sha256"]) for f in recipe["param_files"]] == [
        (str(d / "frame.parm"), hashlib.sha256(FRAME.encode()).hexdigest()),
        (str(d / "mp.parm"), hashlib.sha256(MP_PARM.encode()).hexdigest()),
    ]
    assert recipe["home"] == config["home"] and recipe["params"] == {"RTL_ALT": 1700}


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---- serve --ray: the mission files people bring --------------------------------------------


def _with_home(text: str, home: dict) -> str:
    """A Mission Planner ``.waypoints`` with its home line as Mission Planner writes the vehicle's home."""
    lines = text.split("\r\n")
    lines[1] = f"0\t1\t0\t16\t0\t0\t0\t0\t{home['lat']:.6f}\t{home['lon']:.6f}\t{home['alt_m']:.6f}\t1"
    return "\r\n".join(lines)


def _plan_with_home(text: str, home: dict) -> str:
    def q(x):
        return int(x) if float(x).is_integer() else x

    block = ",\n".join(f"            {json.dumps(q(v))}" for v in (home["lat"], home["lon"], home["alt_m"]))
    return re.sub(r'"plannedHomePosition": \[\n[^\]]*\]', f'"plannedHomePosition": [\n{block}\n        ]', text)


def test_mission_files_round_trip_through_serve_ray_on_real_arducopter(cluster, user):
    import anyio

    from mcp_client import server

    d, env = user
    (node,) = cluster.nodes
    wpl = (DATA / "missionplanner.waypoints").read_bytes().decode()
    plan = (DATA / "qgroundcontrol.plan").read_bytes().decode()

    async def agent():
        with open(d / "serve.err", "w") as log:
            async with server(env, errlog=log, args=["--ray", cluster.address]) as call:
                s = await call("open_sitl", preset="real-cmac", label="real-files")
                sid = s["session_id"]
                try:
                    assert os.readlink(f"/proc/{s['pid']}/exe") == str(cluster.binary), s
                    # the preset's file by the name it has on the driver, in every answer
                    assert s["config"]["param_files"] == [str(d / "frame.parm")], s["config"]
                    snap = await call("snapshot", session_id=sid)
                    assert snap["config"]["param_files"] == [str(d / "frame.parm")], snap["config"]
                    assert s["instance"] in node.pool and s["config"]["params"]["RTL_ALT"] == 1700, s

                    up = await call("upload_mission", session_id=sid, waypoints=wpl)
                    assert up["uploaded"] == len([x for x in wpl.split("\r\n")[2:] if x]) == 13, up
                    down = await call("download_mission", session_id=sid, format="waypoints")
                    assert down["text"].split("\r\n")[2:] == wpl.split("\r\n")[2:]  # every item, to the character
                    assert down["text"] == _with_home(wpl, down["home"])  # and the vehicle's home in line 1

                    up = await call("upload_mission", session_id=sid, plan=plan)
                    assert (up["uploaded"], up["fence_items"], up["rally_points"]) == (5, 9, 2), up
                    down = await call("download_mission", session_id=sid, format="plan")
                    assert (down["count"], down["fence_items"], down["rally_points"]) == (5, 9, 2), down
                    assert down["text"] == _plan_with_home(plan, down["home"])
                finally:
                    await call("close_sitl", session_id=sid)

    anyio.run(agent)
    wait_for(lambda: not held(node), 20, 0.2, "the node's lease to be released")


# ---- sitlpool ab --ray ----------------------------------------------------------------------


def test_ab_on_a_ray_node_flies_real_arducopter_and_compares(cluster, user, procs):
    d, env = user
    (node,) = cluster.nodes
    (d / "fast.json").write_text(json.dumps({"WPNAV_SPEED_UP": 250}))
    (d / "slow.json").write_text(json.dumps({"WPNAV_SPEED_UP": 100}))
    (d / "climb.json").write_text(json.dumps(CLIMB))
    args = ["--a", d / "fast.json", "--b", d / "slow.json", "--runs", 1, "--steps", d / "climb.json"]
    args += ["--preset", "real-cmac", "--speedup", SPEEDUP, "--seed", 1, "--json", "--ray", cluster.address]
    with open(d / "ab.err", "wb") as err:
        p = procs.popen(
            [sys.executable, "-m", "sitlpool", "ab", *map(str, args)],
            env=env,
            cwd=d,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, (d / "ab.err").read_text()[-3000:]
    c = json.loads(out)
    assert c["runs"] == {"A": 1, "B": 1} and c["failed"] == {"A": 0, "B": 0} and not c["partial"], c
    m = c["metrics"]
    assert m["time_to_alt_s"]["A"]["n"] == m["time_to_alt_s"]["B"]["n"] == 1
    # 2.5 m/s against 1 m/s from lift-off to 95% of 5 m (measured 3.4 s against 4.6 s; one run
    # each, so no significance is claimed): the slower climb takes longer
    assert m["time_to_alt_s"]["B"]["mean"] > m["time_to_alt_s"]["A"]["mean"] + 0.6, m["time_to_alt_s"]
    for v in ("A", "B"):
        assert 4.5 < m["max_alt_m"][v]["mean"] < 6.5, m["max_alt_m"]
    # the results written beside the logs: what was asked (the preset under each variant), each
    # run flown on the node, its DataFlash log kept there with the real binary's version
    (folder,) = (d / "data" / "batches").iterdir()
    asked = json.loads((folder / "batch.json").read_text())
    assert asked["state"] == "done" and asked["where"] == "fleet", asked["state"]
    for v, up in (("A", 250), ("B", 100)):
        variant = asked["variants"][v]
        assert variant["params"] == {"RTL_ALT": 1700, "PILOT_SPEED_UP": 300, "WPNAV_SPEED_UP": up}, variant
        assert variant["home"].startswith("-35.363261,149.16523,584") and variant["speedup"] == SPEEDUP, variant
    runs = [json.loads(x) for x in (folder / "runs.jsonl").read_text().splitlines()]
    assert sorted(r["variant"] for r in runs) == ["A", "B"] and all(r["success"] for r in runs), runs
    assert all(r["host"] == "127.0.0.1" and r["node_id"] for r in runs), runs
    for r in runs:
        rec = LogStore(node.data_dir).get(r["log_id"])
        assert rec.kind == "bin" and rec.binary == "arducopter", rec
        assert re.fullmatch(VERSION, rec.binary_version or ""), rec
    assert (folder / "compare.json").is_file() and len((folder / "runs.csv").read_text().splitlines()) == 3
    assert held(node) == []


# ---- step programs on the node: fly_steps and repro through serve --ray, sitlpool fly --ray ----

HOLD_HOP = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 120},
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 30},
    {"hold_s": 2},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 60},
    {"hold_s": 1},
]


def test_step_programs_fly_on_real_arducopter_on_a_node(cluster, user, procs):
    import anyio

    from mcp_client import server

    d, env = user
    (node,) = cluster.nodes

    async def finished(call, run_id: str) -> dict:
        for _ in range(240):
            st = await call("steps_status", run_id=run_id)
            if st["done"]:
                return st
            await anyio.sleep(0.5)
        raise AssertionError(f"step run {run_id} did not finish: {st}")

    async def agent():
        with open(d / "steps.err", "w") as log:
            async with server(env, errlog=log, args=["--ray", cluster.address]) as call:
                first = await finished(call, (await call("fly_steps", steps=HOLD_HOP, preset="real-cmac"))["run_id"])
                again = await finished(call, (await call("repro", run_id=first["run_id"]))["run_id"])
                return first, again

    first, again = anyio.run(agent)
    assert first["ok"] and again["ok"], (first["error"], again["error"])
    bins = [lg for lg in first["logs"] if lg["kind"] == "bin"]
    assert bins and str(node.data_dir) in bins[0]["path"], first["logs"]  # the node's log, of the real binary
    assert LogStore(node.data_dir).get(bins[0]["id"]).binary == "arducopter"
    c = again["comparison"]
    assert c["same_binary"] is True and c["logs"]["differences"] == [], c
    assert c["max_position_difference_m"] < 0.10, c["positions"]  # real SITL: within centimetres

    # the same program from the command line: sitlpool fly --ray
    (d / "hop.json").write_text(json.dumps(HOLD_HOP))
    cmd = ["fly", str(d / "hop.json"), "--ray", cluster.address, "--preset", "real-cmac"]
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", *cmd],
        env=env,
        cwd=d,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-3000:]
    assert f"ok: {len(HOLD_HOP)}/{len(HOLD_HOP)} steps" in out, out
    wait_for(lambda: not held(node), 20, 0.2, "the node's lease to be released")
