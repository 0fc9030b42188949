"""Presets (TOML, ``SITLPOOL_PRESETS`` or ``<data_dir>/presets.toml``) and named homes
(ArduPilot's locations.txt format: built-in, the tree's, ``SITLPOOL_LOCATIONS``): what
``open_options`` makes of them, and each bad input as one line naming what exists."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from sitlpool import locations, presets
from sitlpool.cli import presets as cli_presets
from sitlpool.config import load_settings
from sitlpool.errors import ConfigError, SitlpoolError
from sitlpool.process import ManagedManager
from sitlpool.process.paramfiles import check_scripts
from sitlpool.sessions import check_open_args

PRESETS = """
[windy-cmac]
description = "CMAC, my tuning"
model = "quad"
home = "CMAC"
speedup = 5
param_files = ["frame.parm"]
params = { RTL_ALT = 1500, WPNAV_SPEED = 700 }

[field]
home = "MyField"
"""


@pytest.fixture
def files(env, tmp_path, monkeypatch):
    d = tmp_path / "conf"
    d.mkdir()
    (d / "frame.parm").write_text("# my frame\nRTL_ALT 1800\nLAND_SPEED,40\n")
    (d / "presets.toml").write_text(PRESETS)
    (d / "homes.txt").write_text("#NAME=lat,lon,alt,heading\nMyField=51.5,-0.12,20,90  # the park\n")
    monkeypatch.setenv("SITLPOOL_PRESETS", str(d / "presets.toml"))
    monkeypatch.setenv("SITLPOOL_LOCATIONS", str(d / "homes.txt"))
    return d


def test_named_homes_built_in_users_and_the_trees(env, tmp_path, monkeypatch, files):
    assert locations.resolve_home("CMAC") == "-35.363261,149.16523,584,353"  # without any tree
    assert locations.resolve_home("cmac") == "-35.363261,149.16523,584,353"
    assert locations.resolve_home("-35.1,149.2,600,0") == "-35.1,149.2,600,0"  # coordinates pass through
    assert locations.resolve_home(None) is None
    s = load_settings()
    assert locations.resolve_home("MyField", s) == "51.5,-0.12,20,90"
    # the tree of the configured binary: <tree>/Tools/autotest/locations.txt
    tree = tmp_path / "ardupilot"
    (tree / "build/sitl/bin").mkdir(parents=True)
    (tree / "build/sitl/bin/arducopter").write_text("")
    (tree / "Tools/autotest").mkdir(parents=True)
    (tree / "Tools/autotest/locations.txt").write_text("TreeField=10,20,30,40\nCMAC=1,2,3,4\n")
    s = load_settings(sitl_binary=tree / "build/sitl/bin/arducopter")
    assert locations.resolve_home("TreeField", s) == "10,20,30,40"
    assert locations.resolve_home("CMAC", s) == "1,2,3,4"  # the tree's wins over the built-in set
    assert locations.known(s)["MyField"].source == str(files / "homes.txt")


def test_an_unknown_home_names_close_matches_and_where_names_come_from(files):
    with pytest.raises(ConfigError) as e:
        locations.resolve_home("CMAK", load_settings())
    msg = str(e.value)
    assert "unknown home 'CMAK'" in msg and "did you mean CMAC" in msg and str(files / "homes.txt") in msg
    assert "\n" not in msg


def test_a_bad_locations_line_names_the_file_and_line(files):
    (files / "homes.txt").write_text("Good=1,2,3,4\nBad=1,2,3\n")
    with pytest.raises(ConfigError, match=r"homes.txt line 2: .*NAME=lat,lon,alt,heading"):
        locations.resolve_home("Good", load_settings())
    (files / "homes.txt").write_text("Far=100,2,3,4\n")
    with pytest.raises(ConfigError, match="line 1: Far has no position on Earth"):
        locations.resolve_home("Far", load_settings())


def test_open_options_lays_the_preset_under_what_is_given(files):
    o = presets.open_options("windy-cmac", model=None, speedup=8, params={"wpnav_speed": 900, "FENCE_ENABLE": 1})
    assert o["model"] == "quad" and o["speedup"] == 8  # given wins; None is not given
    assert o["home"] == "-35.363261,149.16523,584,353"  # the preset's named home, resolved
    assert o["params"] == {"RTL_ALT": 1500, "WPNAV_SPEED": 900, "FENCE_ENABLE": 1}  # merged name by name
    assert o["param_files"] == [str(files / "frame.parm")]  # relative to the presets file
    assert o["wipe"] is True and o["wait_s"] == 0 and "scripts" not in o
    assert presets.open_options(None)["model"] == "quad"  # no preset: the defaults
    assert presets.open_options("field")["home"] == "51.5,-0.12,20,90"
    assert presets.open_options(None, home="CMAC_South")["home"] == "-35.363261,149.16523,584,173"


def test_bad_presets_are_one_line_naming_what_exists(files):
    cases = {
        "an unknown preset": (lambda: presets.open_options("windy"), "unknown preset 'windy': did you mean windy-cmac"),
        "another": (lambda: presets.open_options("nope"), "presets in .*presets.toml: field, windy-cmac"),
        "an unknown option": (lambda: presets.open_options(None, colour="red"), "unknown option 'colour'"),
        "a missing param file": (
            lambda: presets.open_options(None, param_files=["/nonexistent.parm"]),
            "does not exist",
        ),
    }
    for what, (fn, pattern) in cases.items():
        with pytest.raises(ConfigError, match=pattern) as e:
            fn()
        assert "\n" not in str(e.value), what
    (files / "presets.toml").write_text("[a]\nmodel = 'quad'\ncolour = 'red'\n")
    with pytest.raises(ConfigError, match="preset 'a': unknown option 'colour'; a preset sets model"):
        presets.load()
    (files / "presets.toml").write_text("[a\n")
    with pytest.raises(ConfigError, match="is not TOML"):
        presets.load()
    (files / "presets.toml").write_text("model = 'quad'\n")
    with pytest.raises(ConfigError, match="'model' is not a table"):
        presets.load()
    (files / "presets.toml").write_text("[a]\nhome = 'Atlantis'\n")
    with pytest.raises(ConfigError, match="preset 'a': unknown home 'Atlantis'"):
        presets.open_options("a")
    os.unlink(files / "presets.toml")
    with pytest.raises(ConfigError, match="SITLPOOL_PRESETS: presets file .* does not exist"):
        presets.open_options("a")


def test_the_default_presets_file_is_in_the_data_dir(env, data_dir, monkeypatch):
    monkeypatch.delenv("SITLPOOL_PRESETS", raising=False)
    with pytest.raises(ConfigError, match="there are no presets"):
        presets.open_options("x")
    (data_dir / "presets.toml").write_text("[x]\nspeedup = 3\n")
    assert presets.open_options("x")["speedup"] == 3
    assert presets.listing()["file"] == str(data_dir / "presets.toml")


def test_scripts_only_from_the_allowlisted_folder(env, tmp_path, monkeypatch):
    folder = tmp_path / "lua"
    folder.mkdir()
    (folder / "hello.lua").write_text("return\n")
    (tmp_path / "elsewhere.lua").write_text("return\n")
    binary = tmp_path / "arducopter"  # a real binary is not needed to check names
    with pytest.raises(ConfigError, match="no scripts folder: set SITLPOOL_SCRIPTS_DIR"):
        check_scripts(["hello.lua"], load_settings(), binary)
    s = load_settings(scripts_dir=folder)
    assert check_scripts(["hello.lua"], s, binary) == [folder / "hello.lua"]
    for bad in ("../elsewhere.lua", str(tmp_path / "elsewhere.lua")):
        with pytest.raises(ConfigError, match="outside the scripts folder"):
            check_scripts([bad], s, binary)
    with pytest.raises(ConfigError, match="no Lua file .*; the scripts folder has hello.lua"):
        check_scripts(["hullo.lua"], s, binary)
    with pytest.raises(ConfigError, match="real ArduPilot SITL only"):
        check_scripts(["hello.lua"], s, None)
    anywhere = load_settings(scripts_dir=folder, allow_paths="1")
    assert check_scripts([str(tmp_path / "elsewhere.lua")], anywhere, binary) == [tmp_path / "elsewhere.lua"]
    # through open_options: the built-in vehicle refuses them before anything is launched
    monkeypatch.setenv("SITLPOOL_SCRIPTS_DIR", str(folder))
    with pytest.raises(ConfigError, match="real ArduPilot SITL only"):
        presets.open_options(None, scripts=["hello.lua"])


def test_the_new_settings_parse_and_refuse(env, monkeypatch):
    s = load_settings()
    assert (s.presets, s.locations, s.scripts_dir, s.allow_paths) == (None, None, None, False)
    monkeypatch.setenv("SITLPOOL_ALLOW_PATHS", "yes")
    assert load_settings().allow_paths is True
    monkeypatch.setenv("SITLPOOL_ALLOW_PATHS", "perhaps")
    with pytest.raises(ConfigError, match="SITLPOOL_ALLOW_PATHS: 'perhaps' is not a yes or no"):
        load_settings()


def test_a_session_from_a_preset_on_the_built_in_vehicle(files):
    o = presets.open_options("windy-cmac", params={"FENCE_ENABLE": 1})
    m = ManagedManager()
    try:
        h = m.start(
            "preset",
            model=o["model"],
            speedup=o["speedup"],
            home=o["home"],
            params=o["params"],
            param_files=o["param_files"],
        )
        assert "scripts" not in o and "param_files" not in presets.open_options(None)
        assert h.config["params"] == {"RTL_ALT": 1500, "LAND_SPEED": 40, "WPNAV_SPEED": 700, "FENCE_ENABLE": 1}
        assert h.config["param_files"] == [str(files / "frame.parm")] and h.config["home"] == o["home"]
        assert h.link.wait(lambda v: v.home is not None and abs(v.home[0] - -35.363261) < 1e-5, 20), "home at CMAC"
    finally:
        m.close_all()


def _cli(argv):
    p = argparse.ArgumentParser()
    cli_presets.add_parser(p.add_subparsers(dest="command"))
    a = p.parse_args(argv)
    return a.fn(a)


def test_the_presets_command(files, capsys):
    assert _cli(["presets"]) == 0
    out = capsys.readouterr().out
    assert "windy-cmac  - CMAC, my tuning" in out and "home = CMAC" in out and "MyField" in out
    assert _cli(["presets", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in doc["presets"]] == ["windy-cmac", "field"]
    assert doc["homes"]["CMAC"]["lat"] == -35.363261 and doc["homes"]["MyField"]["source"].endswith("homes.txt")


def test_sitlpool_presets_is_a_command(files, env):
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool", "presets", "--json"], env=dict(os.environ), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert [p["name"] for p in json.loads(r.stdout)["presets"]] == ["windy-cmac", "field"]
    (files / "presets.toml").write_text("[broken\n")
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool", "presets"], env=dict(os.environ), capture_output=True, text=True
    )
    assert r.returncode == 1 and "is not TOML" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_resolved_home_is_checked_as_given_coordinates_are(files):
    (files / "homes.txt").write_text("High=1,2,20000,0\n")
    o = presets.open_options(None, home="High")
    with pytest.raises(SitlpoolError, match="home altitude"):
        check_open_args(o["model"], o["speedup"], home=o["home"])
