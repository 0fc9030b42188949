"""`sitlpool mission check | convert | upload | download | clear` (issue 23): the mission files
people bring, for people. The samples in tests/flight/data are written as Mission Planner,
MAVProxy and QGroundControl write them: converted they come back to the character, uploaded
to a vehicle and downloaded again they come back as they went but for home (the vehicle keeps
its own). Bad input is one line and leaves the vehicle's mission as it was; a vehicle someone
else leases is refused, naming the holder; its lease holder (here the test process, the
command's parent) may write it. One built-in vehicle for the module; one real ArduCopter."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import hold_lease, release_blocks, reserve_blocks
from sitlpool.cli import main
from sitlpool.config import load_settings
from sitlpool.instances import ports
from sitlpool.process import ManagedManager

DATA = Path(__file__).resolve().parents[1] / "flight" / "data"
ON_THE_VEHICLE = pytest.mark.xdist_group("cli_mission")  # one worker, one built-in vehicle (--dist loadgroup)


def sample(name: str) -> str:
    return (DATA / name).read_bytes().decode()  # CRLF kept (Mission Planner's)


def sitlpool(*args, env, cwd, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", "mission", *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, r.stderr
    return r


def without_home(text: str) -> str:
    """The file with its home (line 2 of a .waypoints, plannedHomePosition of a .plan) blanked."""
    if text.startswith("QGC WPL"):
        nl = "\r\n" if "\r\n" in text else "\n"
        lines = text.split(nl)
        assert re.fullmatch(r"0\t[01]\t0\t16(\t-?[0-9.]+){7}\t1", lines[1]), lines[1]
        return nl.join(lines[:1] + lines[2:])
    return re.sub(r'"plannedHomePosition": \[[^\]]*\]', "HOME", text)


class Vehicle:
    def __init__(self, env: dict, instance: int, work: Path, pool: list[int]):
        self.env, self.instance, self.work, self.pool = env, instance, work, pool

    def run(self, *args, **kw):
        return sitlpool(*args, env=self.env, cwd=self.work, **kw)

    def mission(self, fmt: str = "waypoints", *extra) -> str:
        out = self.work / f"download.{fmt}"  # (standard output read as text would turn CRLF into LF)
        ok(self.run("download", self.instance, "--format", fmt, "-o", out, *extra))
        return out.read_bytes().decode()


def _vehicle(tmp: Path, instances: list[int], binary: Path | None):
    """A vehicle leased by this process (the commands run as its children: the holder's own)."""
    data, work = tmp / "data", tmp / "work"
    data.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SITLPOOL_")}
    env.update(SITLPOOL_DATA_DIR=str(data), SITLPOOL_POOL=f"{instances[0]}-{instances[-1]}")
    m = ManagedManager(
        load_settings(data_dir=data, lock_dir=data / "leases", pool=tuple(instances), sitl_binary=binary)
    )
    h = m.start("cli-mission", speedup=5)
    return m, Vehicle(env, h.instance, work, instances)


@pytest.fixture(scope="module")
def vehicle(tmp_path_factory):
    instances = reserve_blocks(1)
    m = None
    try:
        m, v = _vehicle(tmp_path_factory.mktemp("cli-mission"), instances, None)
        yield v
    finally:
        if m is not None:
            m.close_all()
        release_blocks(instances)


@pytest.fixture
def cli(vehicle, capsys, monkeypatch):
    """``sitlpool mission ARGS`` run in this process (the same code, without a process start
    each): its exit code and standard error, checked to be one line (and a warning at most)."""
    for k, v in vehicle.env.items():
        if k.startswith("SITLPOOL_"):
            monkeypatch.setenv(k, v)

    def run(*args) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["mission", *map(str, args)])
        got = capsys.readouterr().err
        assert (got.count("\n") <= 1 or got.startswith("sitlpool: warning")) and len(got) < 600, got
        return code, got

    return run


# ---- files alone --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["missionplanner.waypoints", "mavproxy.waypoints", "mavproxy-fence.waypoints", "qgroundcontrol.plan"]
)
def test_convert_to_its_own_format_gives_the_file_back(name, capsys):
    to = "plan" if name.endswith(".plan") else "waypoints"
    assert main(["mission", "convert", str(DATA / name), "--to", to]) == 0
    assert capsys.readouterr().out == sample(name)


def test_convert_round_trips_between_formats(tmp_path, capsys):
    mp, mv, qgc = (str(DATA / n) for n in ("missionplanner.waypoints", "mavproxy.waypoints", "qgroundcontrol.plan"))

    def convert(src, to, *extra) -> str:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.{'json' if to == 'items' else to}"
        assert main(["mission", "convert", str(src), "--to", to, "-o", str(out), *extra]) == 0
        return str(out)

    assert (
        Path(convert(convert(mp, "plan"), "waypoints")).read_bytes() == (DATA / "missionplanner.waypoints").read_bytes()
    )
    back = convert(convert(mv, "plan"), "waypoints", "--like", mv)  # MAVProxy's %f, LF
    assert Path(back).read_text() == sample("mavproxy.waypoints")
    items = convert(qgc, "items")
    doc = json.loads(Path(items).read_text())
    assert (doc["count"], len(doc["fence"]), len(doc["rally"])) == (5, 4, 2)
    assert [i["command"] for i in doc["items"]] == ["takeoff", "waypoint", "change_speed", "loiter_time", "rtl"]
    assert Path(convert(convert(items, "plan"), "items")).read_text() == Path(items).read_text()
    assert Path(convert(convert(items, "waypoints"), "items")).read_text().startswith('{\n  "count": 5')
    capsys.readouterr()
    assert main(["mission", "convert", qgc, "--to", "waypoints"]) == 0
    got = capsys.readouterr()
    assert (
        got.out.count("\n") == 7 and "the fence (9 items) and 2 rally points" in got.err
    )  # said, not dropped silently


def test_a_plans_null_params_go_through_waypoints_and_back(tmp_path, capsys):
    """QGroundControl's null ("unchanged", e.g. a takeoff's yaw) is NaN: a .waypoints file
    writes it "nan", as MAVProxy does, and reads it back as null, not as a bad line."""
    plan = json.loads(sample("qgroundcontrol.plan"))
    for it in plan["mission"]["items"]:
        if it.get("type") == "SimpleItem" and it["command"] in (16, 22):
            it["params"][3] = None
    src = tmp_path / "nulls.plan"
    src.write_text(json.dumps(plan))
    wp, back = tmp_path / "nulls.waypoints", tmp_path / "back.plan"
    assert main(["mission", "convert", str(src), "--to", "waypoints", "-o", str(wp)]) == 0
    assert "\tnan\t" in wp.read_text()
    assert main(["mission", "convert", str(wp), "--to", "plan", "-o", str(back)]) == 0
    params = [it["params"] for it in json.loads(back.read_text())["mission"]["items"] if it["command"] in (16, 22)]
    assert params and all(p[3] is None for p in params), params
    capsys.readouterr()


def test_check_names_lists_and_commands(capsys):
    assert main(["mission", "check", str(DATA / "qgroundcontrol.plan")]) == 0
    out = capsys.readouterr().out
    assert "a QGroundControl .plan: 5 mission items, fence 9 items (2 polygons, 2 circles), 2 rally points" in out
    assert "NAV_TAKEOFF" in out and "NAV_RETURN_TO_LAUNCH" in out
    assert main(["mission", "check", "--json", str(DATA / "mavproxy-fence.waypoints")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "waypoints" and doc["mission_items"] is None and doc["fence_items"] == 6
    assert doc["written_like"] == "mavproxy"


def _cut_line(text: str, n: int) -> str:
    lines = text.split("\n")
    lines[n - 1] = lines[n - 1].rsplit("\t", 1)[0]
    return "\n".join(lines)


BAD_FILES = {
    "bad header": (
        "m.waypoints",
        "QGC WPL 100\n0\t1\t0\t16\t0\t0\t0\t0\t1\t2\t3\t1\n",
        r"m.waypoints: line 1 is 'QGC WPL 100'",
    ),
    "short line": ("m.waypoints", _cut_line(sample("mavproxy.waypoints"), 7), r"m.waypoints line 7 has 11 values"),
    "plan not JSON": ("m.plan", '{"fileType": "Plan", ', r"m.plan is not JSON: .* at line 1 column"),
    "plan version": (
        "m.plan",
        sample("qgroundcontrol.plan").replace('"version": 1\n}', '"version": 2\n}'),
        r"m.plan: unsupported plan version 2; sitlpool reads version 1",
    ),
    "100,000 items": ("m.json", json.dumps([{"command": "rtl"}] * 100_000), r"a mission of 100000 items is too long"),
    "100,000 waypoints": (
        "m.waypoints",
        "QGC WPL 110\n" + "".join(f"{i}\t0\t3\t16\t0\t0\t0\t0\t-35.36\t149.16\t20\t1\n" for i in range(100_000)),
        r"has 100,000 items; ArduPilot stores at most",
    ),
    "items not JSON": ("m.json", "[{", r"m.json is not JSON"),
    "neither": ("m.dat", "hello", r"m.dat is neither a .waypoints file"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_is_one_line_naming_it(case, tmp_path, capsys):
    name, text, message = BAD_FILES[case]
    (tmp_path / name).write_text(text)
    assert main(["mission", "check", str(tmp_path / name)]) == 1
    line = capsys.readouterr().err
    assert re.search(message, line), line
    assert line.count("\n") == 1 and len(line) < 400, line


def test_missing_file_and_unknown_format(tmp_path, capsys):
    assert main(["mission", "convert", str(tmp_path / "nope.plan"), "--to", "items"]) == 1
    assert "nope.plan: No such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["mission", "convert", str(DATA / "qgroundcontrol.plan"), "--to", "kml"])
    assert e.value.code == 2 and "invalid choice: 'kml'" in capsys.readouterr().err


# ---- on the built-in vehicle ----------------------------------------------------------------


@ON_THE_VEHICLE
def test_a_waypoints_file_comes_back_from_the_vehicle(vehicle):
    for name, like in (
        ("missionplanner.waypoints", ()),
        ("mavproxy.waypoints", ("--like", DATA / "mavproxy.waypoints")),
    ):
        r = ok(vehicle.run("upload", DATA / name, vehicle.instance))
        assert "mission items" in r.stdout
        assert without_home(vehicle.mission("waypoints", *like)) == without_home(sample(name))


@ON_THE_VEHICLE
def test_a_plan_with_fence_and_rally_comes_back_and_items_too(vehicle, cli):
    r = ok(vehicle.run("upload", DATA / "qgroundcontrol.plan", vehicle.instance))
    assert "5 mission items, fence 9 items, 2 rally points" in r.stdout
    assert without_home(vehicle.mission("plan")) == without_home(sample("qgroundcontrol.plan"))
    items, empty, back = (vehicle.work / f"{n}.json" for n in ("items", "empty", "back"))
    assert cli("download", vehicle.instance, "--format", "items", "-o", items) == (0, "")
    assert cli("clear", vehicle.instance, "--fence", "--rally") == (0, "")
    assert cli("download", vehicle.instance, "--format", "items", "-o", empty) == (0, "")
    assert json.loads(empty.read_text()) | {"home": None} == {
        "count": 0,
        "items": [],
        "home": None,
        "fence": [],
        "rally": [],
    }
    assert cli("upload", items, vehicle.instance) == (0, "")  # the items form, with its fence and rally points
    assert cli("download", vehicle.instance, "--format", "items", "-o", back) == (0, "")
    assert back.read_text() == items.read_text()


@ON_THE_VEHICLE
def test_bad_input_and_others_vehicles_leave_the_mission(vehicle, cli, tmp_path, procs):
    ok(vehicle.run("upload", DATA / "missionplanner.waypoints", vehicle.instance))
    before = vehicle.mission("plan")
    bad = tmp_path / "bad.waypoints"
    bad.write_text(_cut_line(sample("mavproxy.waypoints"), 4))
    code, e = cli("upload", bad, vehicle.instance)
    assert code == 1 and "bad.waypoints line 4 has 11 values" in e
    fence = tmp_path / "fence.json"
    fence.write_text('[{"polygon": [[-35.36, 149.16], [-35.37, 149.17]]}]')
    code, e = cli("upload", DATA / "mavproxy.waypoints", vehicle.instance, "--fence", fence)
    assert code == 1 and "the fence shape 1 is not a polygon" in e
    code, e = cli("upload", DATA / "mavproxy.waypoints", "tcp:127.0.0.1:1", "--timeout", "0.5")
    assert code == 1 and "cannot attach to tcp:127.0.0.1:1" in e
    assert vehicle.mission("plan") == before
    # another holder's instance: refused naming it, before anything is attached
    other = next(n for n in vehicle.pool if n != vehicle.instance)
    holder = hold_lease(procs, Path(vehicle.env["SITLPOOL_DATA_DIR"]) / "leases", other, "alice: her flight")
    for args in (("upload", DATA / "mavproxy.waypoints", other), ("clear", other)):
        code, e = cli(*args)
        assert code == 1 and f"instance {other} is leased to alice: her flight pid {holder.pid}" in e
    code, e = cli("upload", DATA / "mavproxy.waypoints", f"tcp:localhost:{ports(other).serial1}")
    assert code == 1 and "leased to alice: her flight" in e  # what the endpoint reaches, not its spelling
    code, e = cli("upload", DATA / "mavproxy.waypoints", other, "--force", "--timeout", "0.5")
    assert "warning: an upload forced while alice: her flight" in e
    assert code == 1 and f"cannot attach to instance {other}" in e  # no vehicle there
    code, e = cli("download", other, "--timeout", "0.5")  # reading is always allowed
    assert code == 1 and "leased" not in e and f"cannot attach to instance {other}" in e


# ---- on real ArduCopter ---------------------------------------------------------------------


def test_round_trips_on_real_arducopter(real_copter, instances, tmp_path):
    m, v = _vehicle(tmp_path, instances, real_copter)
    try:
        ok(v.run("upload", DATA / "missionplanner.waypoints", v.instance))
        assert without_home(v.mission("waypoints")) == without_home(sample("missionplanner.waypoints"))
        ok(v.run("upload", DATA / "qgroundcontrol.plan", v.instance))
        assert without_home(v.mission("plan")) == without_home(sample("qgroundcontrol.plan"))
    finally:
        m.close_all()
