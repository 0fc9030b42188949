"""Each launch its own configuration: parameter files after the tree's defaults (every format
people bring; a garbage line named by file and line), the frame's defaults from the tree, the
values read back once it runs (an unknown name refused with close matches, nothing left
running), and Lua scripts copied into the SITL's ``scripts/`` on real ArduCopter."""

import os
import time

import pytest

from conftest import processes_under
from sitlpool.config import load_settings
from sitlpool.errors import ConfigError
from sitlpool.leases import LeasePool
from sitlpool.process import ManagedManager, reap_orphans
from sitlpool.process.binaries import tree_defaults
from sitlpool.process.paramfiles import LAUNCH_PARM, parse_param_file, write_run_files


@pytest.fixture
def manager(env):
    m = ManagedManager(load_settings())
    yield m
    m.close_all()
    reap_orphans(load_settings())


def test_every_format_people_bring(tmp_path):
    f = tmp_path / "mixed.parm"
    f.write_text(
        "# MAVProxy / ArduPilot defaults\n"
        "RTL_ALT          1500.000000\n"
        "WPNAV_SPEED,750\n"  # Mission Planner
        "land_speed\t40  # lower case, a tab, a comment\n"
        "FENCE_ENABLE 1 @READONLY\n"
        "1\t1\tBATT_CAPACITY\t5200\t6\n"  # QGroundControl: vehicle, component, name, value, type
        "\n"
    )
    assert parse_param_file(f) == {
        "RTL_ALT": 1500,
        "WPNAV_SPEED": 750,
        "LAND_SPEED": 40,
        "FENCE_ENABLE": 1,
        "BATT_CAPACITY": 5200,
    }


@pytest.mark.parametrize(
    "line, says",
    [
        ("this is garbage", "'this is garbage' is not 'NAME VALUE'"),
        ("RTL_ALT", "'RTL_ALT' is not 'NAME VALUE'"),
        ("RTL_ALT fifteen", "RTL_ALT's value 'fifteen' is not a finite number"),
        ("RTL_ALT nan", "RTL_ALT's value 'nan' is not a finite number"),
        ("1RTL 5", "'1RTL' is not a parameter name"),
        ("A_NAME_OF_SEVENTEEN 5", "is not a parameter name"),
    ],
)
def test_a_garbage_line_names_the_file_and_line(tmp_path, line, says):
    f = tmp_path / "bad.parm"
    f.write_text(f"RTL_ALT 1500\n# fine\n{line}\n")
    with pytest.raises(ConfigError) as e:
        parse_param_file(f)
    assert str(e.value).startswith(f"parameter file {f} line 3: ") and says in str(e.value)
    assert "\n" not in str(e.value)


def test_the_frames_defaults_come_from_the_tree(tmp_path):
    tree = tmp_path / "ardupilot"
    (tree / "build/sitl/bin").mkdir(parents=True)
    (tree / "build/sitl/bin/arducopter").write_text("")
    d = tree / "Tools/autotest/default_params"
    d.mkdir(parents=True)
    for name in ("copter.parm", "copter-hexa.parm", "copter-X.parm", "copter-single.parm", "copter-coax.parm"):
        (d / name).write_text("FRAME_CLASS 1\n")
    b = tree / "build/sitl/bin/arducopter"
    assert tree_defaults(b, "quad") == [d / "copter.parm"]
    assert tree_defaults(b, "hexa") == [d / "copter.parm", d / "copter-hexa.parm"]
    assert tree_defaults(b, "x") == [d / "copter.parm", d / "copter-X.parm"]
    assert tree_defaults(b, "octa") == [d / "copter.parm"]  # the tree has no copter-octa.parm
    assert tree_defaults(b, "coaxcopter") == [d / "copter-single.parm", d / "copter-coax.parm"]


def test_run_files_are_this_launchs_only(tmp_path):
    cwd = tmp_path / "run"
    cwd.mkdir()
    lua = tmp_path / "hello.lua"
    lua.write_text("return\n")
    (cwd / "scripts").mkdir()
    (cwd / "scripts" / "stale.lua").write_text("return\n")  # an earlier launch's
    (cwd / "scripts" / "sub").mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (cwd / "scripts" / "link").symlink_to(victim)
    fd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert write_run_files(fd, [lua], {"RTL_ALT": 1500.0}) == LAUNCH_PARM
        assert sorted(os.listdir(cwd / "scripts")) == ["hello.lua"]
        assert (victim / "keep.txt").read_text() == "mine", "a symlink in scripts/ is removed, never followed"
        assert parse_param_file(cwd / LAUNCH_PARM) == {"RTL_ALT": 1500.0, "SCR_ENABLE": 1.0}
        assert write_run_files(fd, [], {}) is None
        assert not (cwd / "scripts").exists() and not (cwd / LAUNCH_PARM).exists()
        (cwd / "scripts").symlink_to(victim)  # scripts itself a symlink: removed, the target untouched
        write_run_files(fd, [lua], {})
        assert (cwd / "scripts").is_dir() and not (cwd / "scripts").is_symlink()
        assert (victim / "keep.txt").read_text() == "mine"
    finally:
        os.close(fd)


def test_files_and_params_read_back_on_the_built_in_vehicle(manager, tmp_path):
    f = tmp_path / "my.parm"
    f.write_text("RTL_ALT 1800\nWPNAV_SPEED,750\n")
    g = tmp_path / "later.parm"
    g.write_text("WPNAV_SPEED 650\n")
    h = manager.start("cfg", speedup=5, param_files=[str(f), g], params={"rtl_alt": 2100, "FENCE_ENABLE": 1})
    i = h.argv.index("--defaults")
    assert h.argv[i + 1].split(",") == [
        str(h.cwd / "sitlpool-param-1.parm"),
        str(h.cwd / "sitlpool-param-2.parm"),
        str(h.cwd / LAUNCH_PARM),
    ]  # each file as a NAME VALUE copy (QGroundControl's tab format read by sitlpool, not the SITL)
    assert h.config["params"] == {"RTL_ALT": 2100, "WPNAV_SPEED": 650, "FENCE_ENABLE": 1}  # later wins, params last
    assert h.config["param_files"] == [str(f), str(g)] and "not_applied" not in h.config
    assert h.link.get_param("WPNAV_SPEED") == 650 and h.link.get_param("RTL_ALT") == 2100


def test_a_named_home_is_launched_as_its_coordinates(manager):
    h = manager.start("home", speedup=5, home="CMAC_South")
    assert h.argv[h.argv.index("--home") + 1] == "-35.363261,149.16523,584,173"
    assert h.config["home"] == "-35.363261,149.16523,584,173"
    with pytest.raises(ConfigError, match="unknown home 'CMAK': did you mean CMAC"):
        manager.start("nowhere", home="CMAK")


@pytest.mark.parametrize("where", ["file", "params"])
def test_an_unknown_name_names_close_matches_and_nothing_is_left(manager, tmp_path, instances, where):
    f = tmp_path / "typo.parm"
    f.write_text("RTL_ALT 1500\nRTL_ALTT 10\n")
    kw = {"param_files": [f]} if where == "file" else {"params": {"RTL_ALTT": 10}}
    with pytest.raises(ConfigError) as e:
        manager.start("typo", speedup=5, **kw)
    msg = str(e.value)
    origin = f"({f} line 2;" if where == "file" else "(params;"
    assert msg.startswith(f"unknown parameter RTL_ALTT {origin} did you mean RTL_ALT"), msg
    assert "the SITL was stopped" in msg and "\n" not in msg
    assert LeasePool.from_settings(load_settings()).holder(instances[0]) is None, "its lease is released"
    assert manager.processes == {}, "the handle is forgotten"
    assert not [p for p in processes_under(load_settings().data_dir)], "no SITL left running"


def test_a_missing_param_file_is_refused_before_a_launch(manager, tmp_path, instances):
    with pytest.raises(ConfigError, match=r"parameter file .*nope.parm does not exist"):
        manager.start("x", param_files=[tmp_path / "nope.parm"])
    assert not (load_settings().data_dir / "sessions" / str(instances[0]) / "stdout").exists(), "nothing launched"


# ---- real ArduCopter ------------------------------------------------------------------------


@pytest.fixture
def real(env, real_copter, tmp_path, monkeypatch):
    lua = tmp_path / "lua"
    lua.mkdir()
    (lua / "hello.lua").write_text(
        'function update()\n  gcs:send_text(6, "hello from sitlpool lua")\n  return update, 1000\nend\nreturn update()\n'
    )
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_copter))
    monkeypatch.setenv("SITLPOOL_SCRIPTS_DIR", str(lua))
    m = ManagedManager(load_settings())
    yield m
    m.close_all()
    reap_orphans(load_settings())


def test_real_copter_a_hexa_with_a_param_file_and_a_lua_script(real, tmp_path):
    f = tmp_path / "my.parm"
    f.write_text("# Mission Planner\nRTL_ALT,1800\nWPNAV_SPEED,750\n")
    h = real.start("lua", model="hexa", speedup=5, param_files=[f], params={"LAND_SPEED": 45}, scripts=["hello.lua"])
    texts: list[str] = []
    h.link.add_listener(lambda m: texts.append(m.text) if m.get_type() == "STATUSTEXT" else None)
    assert h.config["params"] == {"RTL_ALT": 1800, "WPNAV_SPEED": 750, "LAND_SPEED": 45, "SCR_ENABLE": 1}
    assert h.config["scripts"] == ["hello.lua"] and [os.path.basename(p) for p in h.config["defaults"]] == [
        "copter.parm",
        "copter-hexa.parm",
    ]
    assert h.link.get_param("FRAME_CLASS") == 2, "the hexa's frame from the tree's copter-hexa.parm"
    deadline = time.monotonic() + 30
    while "hello from sitlpool lua" not in texts and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "hello from sitlpool lua" in texts, f"the script ran: {texts[-10:]}"
    assert sorted(os.listdir(h.cwd / "scripts")) == ["hello.lua"]


def test_real_copter_an_unknown_name_names_close_matches(real, tmp_path):
    f = tmp_path / "typo.parm"
    f.write_text("WPNAV_SPEDE 700\n")
    with pytest.raises(ConfigError, match=r"unknown parameter WPNAV_SPEDE \(.*line 1; did you mean WPNAV_SPEED"):
        real.start("typo", speedup=5, param_files=[f])
