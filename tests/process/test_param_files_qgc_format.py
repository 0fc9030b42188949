"""A QGroundControl parameter file (``sysid<TAB>compid<TAB>NAME<TAB>VALUE<TAB>type``) and a
Mission Planner one (``NAME,VALUE``) are applied at boot: neither vehicle reads those formats
as --defaults, so each user file goes to the SITL as a NAME VALUE copy in its directory."""

import pytest

from sitlpool.config import load_settings
from sitlpool.process import ManagedManager, reap_orphans
from sitlpool.process.paramfiles import LAUNCH_PARM, parse_param_file

QGC = (
    "# Onboard parameters for Vehicle 1\n"
    "#\n"
    "# Vehicle-Id Component-Id Name Value Type\n"
    "1\t1\tRTL_ALT\t1800\t9\n"
    "1\t1\tWPNAV_SPEED\t750.000000000000000000\t9\n"
)


def start_with_files(m, tmp_path, **kw):
    q = tmp_path / "vehicle.params"
    q.write_text(QGC)
    mp = tmp_path / "mp.param"
    mp.write_text("LAND_SPEED,45\n")
    h = m.start("qgc", speedup=5, param_files=[q, mp], **kw)
    copies = h.argv[h.argv.index("--defaults") + 1].split(",")
    return h, q, mp, copies


def check(h, q, mp, copies):
    assert h.config["params"] == {"RTL_ALT": 1800, "WPNAV_SPEED": 750, "LAND_SPEED": 45}
    assert "not_applied" not in h.config, h.config.get("not_applied")
    assert h.config["param_files"] == [str(q), str(mp)], "the user's own names"
    assert h.link.get_param("RTL_ALT") == 1800 and h.link.get_param("LAND_SPEED") == 45
    ours = [c for c in copies if c.startswith(str(h.cwd))]
    assert [parse_param_file(c) for c in ours] == [parse_param_file(q), parse_param_file(mp)], "NAME VALUE copies"
    assert str(q) not in copies and str(mp) not in copies


@pytest.fixture
def manager(env):
    m = ManagedManager(load_settings())
    yield m
    m.close_all()
    reap_orphans(load_settings())


def test_qgc_and_mission_planner_files_apply_on_the_built_in_vehicle(manager, tmp_path):
    h, q, mp, copies = start_with_files(manager, tmp_path, params={"FENCE_ENABLE": 1})
    assert copies[-1] == str(h.cwd / LAUNCH_PARM), "the session's params still come last"
    assert h.config["params"]["FENCE_ENABLE"] == 1
    h.config["params"].pop("FENCE_ENABLE")
    check(h, q, mp, copies[:-1])


def test_real_copter_reads_a_qgc_file(env, real_copter, tmp_path, monkeypatch):
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_copter))
    m = ManagedManager(load_settings())
    try:
        h, q, mp, copies = start_with_files(m, tmp_path)
        check(h, q, mp, copies)
    finally:
        m.close_all()
