"""Every session option on a fleet: a preset (resolved on the driver), parameter files and Lua
scripts (read on the driver, carried to the node by content), wind; and bad input refused on
the driver in one line, with nothing placed or left on a node. (``serve --ray``'s open_sitl
with a preset, a parameter file and pace=True: test_fleet.py's MCP hop.)"""

from __future__ import annotations

import pytest

from conftest import wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet_b")  # a second worker and its own shared cluster for half the fleet modules

SPEEDUP = 10

PRESETS = """
[fleet-cmac]
description = "CMAC with a frame file, 10x"
home = "CMAC"
speedup = 10
param_files = ["frame.parm"]
params = { RTL_ALT = 1700 }
"""


@pytest.fixture
def driver(tmp_path, monkeypatch):
    """This process as a user's driver: its presets file, a parameter file beside it, a scripts folder."""
    (tmp_path / "frame.parm").write_text("# Mission Planner style\nWPNAV_SPEED,750\nLAND_SPEED 40\n")
    (tmp_path / "presets.toml").write_text(PRESETS)
    (tmp_path / "lua").mkdir()
    (tmp_path / "lua" / "hello.lua").write_text('gcs:send_text(6, "hello")\n')
    monkeypatch.setenv("SITLPOOL_PRESETS", str(tmp_path / "presets.toml"))
    monkeypatch.setenv("SITLPOOL_SCRIPTS_DIR", str(tmp_path / "lua"))
    return tmp_path


@pytest.fixture
def fleet(fleet_cluster):
    yield fleet_cluster.fleet
    fleet_cluster.fleet.close_all()


def held(node) -> list[int]:
    from sitlpool.leases import LeasePool

    return [h.instance for h in LeasePool(node.data_dir / "leases", node.pool, check=False).status()]


def node_files(c) -> list[str]:
    """What the actors left in the nodes' fleet-files folders."""
    return [str(p) for n in c.nodes for p in (n.data_dir / "fleet-files").glob("*/**/*")]


def test_a_preset_with_files_and_wind_configures_a_remote_sitl(fleet_cluster, fleet, driver):
    extra = driver / "extra.parm"
    extra.write_text("RTL_ALT 1800\nPILOT_SPEED_UP 300\n")
    s = fleet.open(preset="fleet-cmac", param_files=[str(extra)], wind={"speed_m_s": 4, "direction_deg": 90})
    config = s.info["config"]
    # the preset's file, then the given one, then the preset's params: read back from the vehicle
    assert config["param_files"] == [str(driver / "frame.parm"), str(extra)]
    assert config["params"]["WPNAV_SPEED"] == 750 and config["params"]["PILOT_SPEED_UP"] == 300
    assert config["params"]["RTL_ALT"] == 1700  # params over the files
    assert config["params"]["SIM_WIND_SPD"] == 4 and config["params"]["SIM_WIND_DIR"] == 90
    assert config["speedup"] == 10 and config["home"].startswith("-35.36")  # CMAC, resolved on the driver
    assert s.get_param("LAND_SPEED") == 40
    assert node_files(fleet_cluster), "the files were not on the node"
    s.close()
    assert not node_files(fleet_cluster), "the node kept the launch's files after close"


def test_bad_input_is_refused_on_the_driver_naming_what_exists(fleet_cluster, fleet, driver):
    from sitlpool.errors import SitlpoolError

    free = fleet.capacity()[1]
    with pytest.raises(SitlpoolError, match=r"unknown preset 'fleet-cmak': did you mean fleet-cmac\?.*fleet-cmac"):
        fleet.open(preset="fleet-cmak")
    bad = driver / "bad.parm"
    bad.write_text("RTL_ALT 1500\nthis is garbage\n")
    with pytest.raises(SitlpoolError, match=rf"parameter file {bad} line 2: 'this is garbage'"):
        fleet.open(param_files=[str(bad)])
    with pytest.raises(SitlpoolError, match="outside the scripts folder"):
        fleet.open(scripts=["../frame.parm"])
    with pytest.raises(SitlpoolError, match="wind and params both set SIM_WIND_SPD"):
        fleet.open(params={"SIM_WIND_SPD": 3}, wind={"speed_m_s": 4})
    # a name the vehicle lacks is found once it runs on the node: the driver's file and line are named
    typo = driver / "typo.parm"
    typo.write_text("RTL_ALT 1500\nRTL_ALTT 1500\n")
    with pytest.raises(SitlpoolError, match=rf"unknown parameter RTL_ALTT \({typo} line 2; did you mean RTL_ALT"):
        fleet.open(param_files=[str(typo)], speedup=SPEEDUP)
    # a node of built-in vehicles refuses Lua in one line: its slot, lease and files go with it
    with pytest.raises(SitlpoolError, match="Lua scripts run on real ArduPilot SITL only"):
        fleet.open(scripts=["hello.lua"], speedup=SPEEDUP)
    wait_for(lambda: fleet.capacity()[1] == free, 60, 0.2, "every slot free again")  # Ray frees a slot asynchronously
    assert not any(held(n) for n in fleet_cluster.nodes)
    assert not node_files(fleet_cluster)


def test_map_items_get_the_preset_and_files(fleet_cluster, fleet, driver, by_value):
    results = fleet.map(read_params, [0], preset="fleet-cmac", progress=False)
    assert results == [{"WPNAV_SPEED": 750, "RTL_ALT": 1700, "SIM_SPEEDUP": 10}], results
    assert not node_files(fleet_cluster)


def read_params(sitl, item):
    return {n: sitl.link.get_param(n) for n in ("WPNAV_SPEED", "RTL_ALT", "SIM_SPEEDUP")}
