"""A small A/B batch on real ArduCopter SITL (2 variants x 2 runs, speedup 10, the default
concurrency measured as it flies): every run flies, the metrics come out of the real
DataFlash logs, and batch_compare compares them (WPNAV_SPEED_UP 250 vs 100 cm/s: the slower
climb takes longer to 95% of the takeoff altitude in every run)."""

import pytest

from sitlpool.batch import batch_compare, batch_fly
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool

HOME = "-35.363261,149.165230,584,353"
CLIMB = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 120},
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 10},
    {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 120},
]


@pytest.fixture
def real_env(env, real_copter, monkeypatch):
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_copter))
    return env


def test_a_batch_on_real_arducopter_measures_and_compares(real_env, instances):
    out = batch_fly(
        {"fast": {"params": {"WPNAV_SPEED_UP": 250}}, "slow": {"params": {"WPNAV_SPEED_UP": 100}}},
        runs=2,
        steps=CLIMB,
        metrics=["time_to_alt_s", "max_alt_m", "duration_s", "landing_speed_m_s", "max_tilt_deg"],
        seed=3,
        speedup=10,
        home=HOME,
    )
    assert out["state"] == "done" and out["done"] == 4, out
    assert out["failed"] == 0, out["failures"]
    assert LeasePool.from_settings(load_settings()).status() == []  # every lease given back
    c = batch_compare(out["batch_id"], picture=False)
    m = c["metrics"]
    for metric in ("time_to_alt_s", "max_alt_m", "duration_s", "landing_speed_m_s", "max_tilt_deg"):
        assert m[metric]["fast"]["n"] == 2 and m[metric]["slow"]["n"] == 2, (metric, m[metric])
    assert 9.3 < m["max_alt_m"]["fast"]["mean"] < 11.5 and 9.3 < m["max_alt_m"]["slow"]["mean"] < 11.5
    assert m["time_to_alt_s"]["slow"]["min"] > m["time_to_alt_s"]["fast"]["max"] * 1.3, m["time_to_alt_s"]
    rows = {r["metric"]: r for r in c["tests"]}
    t = rows["time_to_alt_s"]
    assert t["p_value"] is not None and t["p_adjusted"] >= t["p_value"] and "significant" in t
    assert rows["success"]["p_value"] is not None or rows["success"].get("note")
    assert "time_to_alt_s" in c["verdict"] and not c["partial"]
