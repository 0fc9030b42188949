"""The pytest plugin takes every session option: ``preset=`` (and ``--sitl-preset``), parameter
files, parameters, a named home, wind; bad input fails the test asking for it in one line,
with nothing left running or leased. One user's suite, run through pytester in a subprocess."""

from __future__ import annotations

import pytest

from sitlpool.leases import LeasePool

PRESETS = """
[plugin-cmac]
description = "CMAC, a frame file, 10x"
home = "CMAC"
speedup = 10
param_files = ["frame.parm"]
params = { RTL_ALT = 1700 }

[plugin-slow]
speedup = 3
"""

SUITE = """
import pytest
from sitlpool.world import wind_history


@pytest.mark.sitl(preset="plugin-cmac", params={"LAND_SPEED": 45})
def test_marker_preset(sitl):
    assert sitl.link.get_param("RTL_ALT") == 1700        # the preset's params
    assert sitl.link.get_param("WPNAV_SPEED") == 750     # its file, relative to the presets file
    assert sitl.link.get_param("LAND_SPEED") == 45       # the marker's, over the preset
    assert sitl.link.get_param("SIM_SPEEDUP") == 10      # the preset's speedup over --sitl-speedup
    assert sitl.handle.home.startswith("-35.36")         # CMAC
    assert sitl.handle.config["params"]["RTL_ALT"] == 1700


def test_factory_options(sitl_factory, tmp_path):
    extra = tmp_path / "extra.parm"
    extra.write_text("PILOT_SPEED_UP 300\\n")
    s = sitl_factory(preset="plugin-cmac", param_files=[str(extra)], wind={"speed_m_s": 4, "direction_deg": 90},
                     home="CMAC_South", speedup=8)
    assert s.link.get_param("PILOT_SPEED_UP") == 300 and s.link.get_param("WPNAV_SPEED") == 750
    assert s.link.get_param("SIM_WIND_SPD") == 4 and s.link.get_param("SIM_WIND_DIR") == 90
    assert s.link.get_param("SIM_SPEEDUP") == 8
    assert wind_history(s.link)["changes"][0]["by"] == "open_sitl"
    assert s.handle.home != sitl_factory(preset="plugin-cmac").handle.home


def test_default_preset_from_the_command_line(sitl):
    assert sitl.link.get_param("SIM_SPEEDUP") == 3


def test_unknown_preset(sitl_factory):
    sitl_factory(preset="plugin-cmak")


def test_garbage_line(sitl_factory, tmp_path):
    bad = tmp_path / "bad.parm"
    bad.write_text("RTL_ALT 1500\\nthis is garbage\\n")
    sitl_factory(param_files=[str(bad)])


def test_wind_clash(sitl_factory):
    sitl_factory(params={"SIM_WIND_SPD": 2}, wind={"speed_m_s": 4})
"""


@pytest.fixture
def suite(pytester, env, instances, tmp_path, monkeypatch):
    d = tmp_path / "conf"
    d.mkdir()
    (d / "presets.toml").write_text(PRESETS)
    (d / "frame.parm").write_text("WPNAV_SPEED,750\n")
    monkeypatch.setenv("SITLPOOL_PRESETS", str(d / "presets.toml"))
    monkeypatch.setenv("SITLPOOL_SCRIPTS_DIR", str(tmp_path / "lua"))
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester


def test_fixtures_take_presets_files_homes_and_wind(suite, instances):
    suite.makepyfile(test_options=SUITE)
    r = suite.runpytest_subprocess(
        "-p", "no:randomly", "--sitl-preset", "plugin-slow", "--sitl-speedup", "10",
        "--sitl-pool", f"{instances[0]}-{instances[3]}", timeout=240,
    )  # fmt: skip
    r.assert_outcomes(passed=3, failed=3)
    out = r.stdout.str()
    assert "unknown preset 'plugin-cmak': did you mean plugin-cmac" in out
    assert "plugin-cmac, plugin-slow" in out
    assert "bad.parm line 2: 'this is garbage' is not 'NAME VALUE'" in out
    assert "sitl: wind and params both set SIM_WIND_SPD; give one" in out
    assert LeasePool.from_env().status() == []  # nothing left leased (nor running: the data_dir fixture checks)


def test_an_unknown_default_preset_is_a_usage_error(suite, instances):
    suite.makepyfile(test_one="def test_it(sitl):\n    pass\n")
    r = suite.runpytest_subprocess("-p", "no:randomly", "--sitl-preset", "nope", timeout=120)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown preset 'nope'" in r.stderr.str() + r.stdout.str()


REAL_SUITE = """
import pytest


@pytest.mark.sitl(preset="real-lua", params={"LAND_SPEED": 45})
def test_real(sitl):
    config = sitl.handle.config
    assert config["scripts"] == ["hello.lua"] and config["params"]["SCR_ENABLE"] == 1
    assert config["params"]["WPNAV_SPEED"] == 750 and config["params"]["LAND_SPEED"] == 45
    assert sitl.link.get_param("FRAME_CLASS") == 2  # the hexa's frame file, as sim_vehicle.py -f hexa
"""


def test_real_copter_from_a_preset_with_a_frame_file_and_lua(suite, instances, real_copter, tmp_path):
    conf = tmp_path / "conf"
    (conf / "presets.toml").write_text(
        PRESETS + '\n[real-lua]\nmodel = "hexa"\nspeedup = 5\nparam_files = ["frame.parm"]\nscripts = ["hello.lua"]\n'
    )
    (tmp_path / "lua").mkdir()
    (tmp_path / "lua" / "hello.lua").write_text('gcs:send_text(6, "hello from the plugin")\n')
    suite.makepyfile(test_real=REAL_SUITE)
    r = suite.runpytest_subprocess(
        "-p", "no:randomly", "--sitl-binary", str(real_copter), "--sitl-pool", f"{instances[0]}-{instances[1]}",
        timeout=300,
    )  # fmt: skip
    r.assert_outcomes(passed=1)
