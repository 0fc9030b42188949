"""Step programs through the Python API on the built-in vehicle: a hop flown with
``steps.fly`` and flown again with ``steps.repro`` (it repeats exactly: same log summary,
held positions to the centimetre), ``hold_s`` on sim time (speedup 5 and 10 hold the same
sim seconds), the per-run time limit (failed, SITL stopped, lease freed), abort, and a
wait that times out failing its run."""

import json
import os
import threading
import time
from pathlib import Path

import pytest

from sitlpool import steps
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool
from sitlpool.sessions import Sessions

HOME = (-35.3632621, 149.1652374)
HOP = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 60},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 30},
    {"hold_s": 2},
    {"tool": "goto", "lat": HOME[0] + 0.0001, "lon": HOME[1], "altitude_m": 5},
    {"tool": "wait_until", "condition": "reached", "value": 0.5, "timeout_s": 30},
    {"hold_s": 2},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 60},
    {"hold_s": 1},
]


def no_lease_left(env, instances) -> bool:
    return LeasePool(Path(env["SITLPOOL_DATA_DIR"]) / "leases", instances).status() == []


def test_a_hop_flies_and_repeats_exactly(env, instances):
    seen = []
    r = steps.fly(HOP, speedup=20, label="hop", on_step=lambda o: seen.append((o.index, o.ok)))
    assert r.ok, r.error
    assert r.state == "done" and [o.ok for o in r.outcomes] == [True] * len(HOP)
    assert seen[:2] == [(1, None), (1, True)] and seen[-1] == (len(HOP), True)
    for o in r.outcomes:
        assert o.sim_time_start_s is not None and o.sim_time_end_s >= o.sim_time_start_s
    holds = [o for o in r.outcomes if o.tool == "hold_s"]
    # at least the sim seconds asked; the built-in vehicle's clock moves in ticks of 40 ms wall (0.8 s at 20x)
    assert all(
        o.step["hold_s"] <= round(o.sim_time_end_s - o.sim_time_start_s, 3) < o.step["hold_s"] + 1.2 for o in holds
    ), [(o.sim_time_start_s, o.sim_time_end_s) for o in holds]
    assert abs(r.outcomes[7].position["lat"] - (HOME[0] + 0.0001)) < 1e-6  # where the goto sent it
    assert r.outcomes[-1].position["relative_alt_m"] < 0.3
    # its SITL is stopped, its lease freed, its log kept, its recipe written
    assert no_lease_left(env, instances)
    assert r.log_ids and any(lg["kind"] == "bin" for lg in r.logs)
    recipe = json.loads(Path(r.recipe).read_text())
    assert recipe["binary"]["builtin"] and len(recipe["binary"]["sha256"]) == 64
    assert recipe["model"] == "quad" and recipe["speedup"] == 20 and recipe["steps"] == HOP
    assert [t["step"] for t in recipe["timeline"]] == list(range(1, len(HOP) + 1))
    assert json.loads((Path(r.recipe).parent / "run.json").read_text())["ok"] is True
    assert (Path(r.logs[0]["path"]).parent / f"recipe-{r.run_id}.json").is_file()  # a copy beside its logs

    again = steps.repro(run_id=r.run_id)
    assert again.ok, again.error
    c = again.comparison
    assert c["original_run_id"] == r.run_id and c["same_binary"] is True
    assert c["logs"]["differences"] == [], c["logs"]["differences"]
    assert [p["step"] for p in c["positions"]] == [5, 8, 11]
    # to the centimetre: one unit of GLOBAL_POSITION_INT's 1e-7 degrees (1.1 cm) at most
    assert c["max_position_difference_m"] <= 0.015, c["positions"]
    assert c["exact"] is True
    assert again.repro_of == r.run_id and no_lease_left(env, instances)


def test_hold_is_sim_time_whatever_the_speedup(env, instances):
    sessions = Sessions(load_settings())
    try:
        walls = {}
        for speedup in (5, 10):
            s = sessions.open(speedup=speedup)
            r = steps.run_steps(s, [{"hold_s": 0.5}, {"hold_s": 8}])
            assert r.ok, r.error
            o = r.outcomes[1]
            assert 8 <= round(o.sim_time_end_s - o.sim_time_start_s, 3) < 8.6  # a tick of the vehicle: 0.2 / 0.4 s
            walls[speedup] = o.wall_s
            assert not s.closed  # run_steps leaves the session open: its caller's
            sessions.close(s.id)
        # the same sim seconds took about twice the wall time at half the speedup
        assert 1.5 < walls[5] / walls[10] < 2.6, walls
    finally:
        sessions.close_all()


def test_a_time_limit_fails_the_run_and_stops_its_sitl(env, instances):
    t0 = time.monotonic()
    r = steps.fly([{"hold_s": 0.5}, {"hold_s": 600}, {"tool": "land"}], speedup=20, time_limit_s=5)
    assert time.monotonic() - t0 < 20
    assert r.state == "failed" and r.ok is False
    assert r.error == "step 2 (hold_s) failed: time limit of 5 sim seconds reached"
    assert 5 <= r.sim_duration_s < 6.2
    assert [o.ok for o in r.outcomes] == [True, False]  # step 3 never ran
    assert no_lease_left(env, instances)
    assert json.loads((Path(r.recipe).parent / "run.json").read_text())["state"] == "failed"


def test_abort_stops_the_steps_and_closes_the_session(env, instances):
    sessions = Sessions(load_settings())
    runs = steps.StepRuns(sessions)
    try:
        run = runs.start([{"hold_s": 600}], speedup=10)
        pid = run.session.handle.pid
        deadline = time.monotonic() + 10
        while runs.status(run.id)["current_step"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        out = runs.abort(run.id)
        assert out["aborted"] and out["state"] == "aborted"
        st = runs.status(run.id)
        assert st["done"] and st["ok"] is False and st["state"] == "aborted"
        assert no_lease_left(env, instances)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert runs.abort(run.id)["aborted"] is False  # once ended, abort says so
        with pytest.raises(steps.UnknownRun, match="unknown step run 'nope'"):
            runs.status("nope")
    finally:
        sessions.close_all()


def test_a_wait_that_times_out_fails_its_run(env, instances):
    stop = threading.Event()
    r = steps.fly(
        [{"tool": "wait_until", "condition": "altitude_above", "value": 50, "timeout_s": 3}, {"tool": "arm"}],
        speedup=20,
    )
    assert not stop.is_set()
    assert r.state == "failed"
    assert r.error == "step 1 (wait_until) failed: wait_until altitude_above timeout"
    o = r.outcomes[0]
    assert 3 <= round(o.sim_time_end_s - o.sim_time_start_s, 3) < 4.2 and o.result["result"] == "timeout"
    assert no_lease_left(env, instances)


def test_a_sitl_that_dies_fails_its_run_in_one_line(env, instances):
    sessions = Sessions(load_settings())
    runs = steps.StepRuns(sessions)
    try:
        run = runs.start([{"hold_s": 0.5}, {"hold_s": 600}], speedup=10)
        deadline = time.monotonic() + 10
        while runs.status(run.id)["current_step"] != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(run.session.handle.pid, 9)
        r = runs.wait(run.id, 30)
        assert r.state == "failed" and r.ok is False
        assert r.error.startswith(f"step 2 (hold_s) failed: the SITL of session {run.session.id} is ")
        assert [o.ok for o in r.outcomes] == [True, False]
        assert no_lease_left(env, instances)
    finally:
        sessions.close_all()


def test_fly_takes_a_preset_as_open_sitl_does(env, instances, tmp_path, monkeypatch):
    (tmp_path / "presets.toml").write_text("[quick]\nspeedup = 20\nparams = { RTL_ALT = 1700 }\n")
    monkeypatch.setenv("SITLPOOL_PRESETS", str(tmp_path / "presets.toml"))
    r = steps.fly([{"tool": "get_param", "name": "RTL_ALT"}], preset="quick", params={"RTL_ALT_FINAL": 100})
    assert r.ok, r.error
    assert r.outcomes[0].result["value"] == 1700  # the preset's parameter, under the one given
    recipe = json.loads(Path(r.recipe).read_text())
    assert recipe["speedup"] == 20 and recipe["params"] == {"RTL_ALT": 1700, "RTL_ALT_FINAL": 100}, recipe
