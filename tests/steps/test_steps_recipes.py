"""What a run's recipe records (parameter files by content hash, launch parameters, wind and
its seeds, the binary's hash) and that a recipe flies the same vehicle again; bad run options
refused in one line before anything is launched."""

import json
from pathlib import Path

import pytest

from sitlpool import steps
from sitlpool.leases import LeasePool

PROGRAM = [
    {"tool": "get_param", "name": "WPNAV_SPEED_UP"},
    {"tool": "get_param", "name": "RTL_ALT"},
    {"tool": "set_wind", "speed_m_s": 3, "direction_deg": 45, "turbulence": 1, "seed": 7},
    {"hold_s": 1},
]


def values(r) -> list:
    return [o.result["value"] for o in r.outcomes[:2]]


def test_the_recipe_records_parameters_files_wind_and_seeds(env, instances, tmp_path):
    f = tmp_path / "tuned.parm"
    f.write_text("WPNAV_SPEED_UP 100\nRTL_ALT 2000\n")
    r = steps.fly(PROGRAM, speedup=20, param_files=[f], params={"RTL_ALT": 1500}, wind={"speed_m_s": 2})
    assert r.ok, r.error
    assert values(r) == [100, 1500]  # the file first, then params
    doc = json.loads(Path(r.recipe).read_text())
    assert doc["params"] == {"RTL_ALT": 1500}
    [pf] = doc["param_files"]
    assert pf["path"] == str(f) and pf["values"] == {"WPNAV_SPEED_UP": 100, "RTL_ALT": 2000} and len(pf["sha256"]) == 64
    assert doc["wind"] == {"speed_m_s": 2}
    assert doc["seeds"] == {"wind_seeds": [7]}
    assert doc["binary"]["builtin"] is True and doc["binary"]["sha256"] == steps.recipe.builtin_hash()
    assert doc["home_seen"]["lat"] == pytest.approx(-35.3632621)
    assert r.logs == []  # never armed: no DataFlash log (ArduCopter opens one at arming)

    f.unlink()  # a recipe carries its files' values: it flies without them
    again = steps.repro(recipe=r.recipe)
    assert again.ok and values(again) == [100, 1500]
    assert json.loads(Path(again.recipe).read_text())["param_files"][0]["sha256"] == pf["sha256"]


def test_bad_options_are_refused_before_anything_is_launched(env, instances, tmp_path):
    with pytest.raises(steps.StepError, match="time_limit_s 0 is out of range"):
        steps.fly([{"hold_s": 1}], time_limit_s=0)
    with pytest.raises(steps.StepError, match="params 'RTL_ALT' is not a mapping"):
        steps.fly([{"hold_s": 1}], params="RTL_ALT")
    with pytest.raises(Exception, match=r"parameter file .*missing.parm: No such file"):
        steps.fly([{"hold_s": 1}], param_files=[tmp_path / "missing.parm"])
    with pytest.raises(Exception, match="binary /nonexistent/arducopter does not exist"):
        steps.fly([{"hold_s": 1}], binary="/nonexistent/arducopter")
    with pytest.raises(steps.StepError, match="exactly one of run_id, log_id, session_id or recipe"):
        steps.repro()
    with pytest.raises(steps.UnknownRun, match="no finished step run 'nope'"):
        steps.repro(run_id="nope")
    assert LeasePool(Path(env["SITLPOOL_DATA_DIR"]) / "leases", instances).status() == []
    assert not (Path(env["SITLPOOL_DATA_DIR"]) / "runs").exists()


def test_a_session_whose_recipe_cannot_be_written_says_so_when_closed(env, instances, data_dir):
    """``<data_dir>/runs`` not a folder (or not writable): the close still stops the SITL and
    releases the lease, and its answer says the recipe was not written and why."""
    from sitlpool.sessions import Sessions

    (Path(data_dir) / "runs").write_text("not a folder")
    sessions = Sessions()
    steps.runs_for(sessions)  # every session of the registry records its recipe at close
    try:
        s = sessions.open(speedup=10)
        out = sessions.close(s.id)
    finally:
        sessions.close_all()
    assert out["closed"] == "SITL stopped, lease released"
    (warning,) = out["warnings"]
    assert f"session {s.id}'s recipe was not written under {Path(data_dir) / 'runs'}" in warning, warning
    assert LeasePool.from_env().status() == []
