"""A/B batches flown on the built-in vehicle (speedup 20): a parameter that truly changes
the climb (WPNAV_SPEED_UP 250 vs 100 cm/s) is found significant in time_to_alt_s; two
variants that fly alike are not; failed runs are counted and shown, never dropped; steps
that never end are stopped by the time limit; results are JSON and CSV on disk; no lease or
SITL is left behind (the data_dir fixture fails a test that leaves a process in it)."""

from __future__ import annotations

import csv
import json
import os
import time

from sitlpool.batch import batch_compare, batch_fly, batch_status
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool

CLIMB = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 10},
    {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]


def no_lease_left() -> None:
    assert LeasePool.from_settings(load_settings()).status() == []


def rows(c: dict) -> dict:
    return {r["metric"]: r for r in c["tests"]}


def test_wpnav_speed_up_is_found_significant_in_time_to_alt(env):
    out = batch_fly(
        {"fast": {"params": {"WPNAV_SPEED_UP": 250}}, "slow": {"params": {"WPNAV_SPEED_UP": 100}}},
        runs=4,
        steps=CLIMB,
        metrics=["time_to_alt_s", "max_alt_m", "duration_s"],
        seed=7,
        speedup=20,
    )
    assert out["state"] == "done" and out["failed"] == 0 and out["done"] == 8
    no_lease_left()
    # the default concurrency was measured: a built-in vehicle's run costs a small share of a core,
    # so more runs flew at once than there are cores (when the pool has more instances than cores)
    assert out["concurrency_auto"] and 0 < out["cpu_share_per_run"] < 0.5, out
    cores = os.cpu_count() or 1
    assert out["concurrency_peak"] > min(cores, out["concurrency"] - 1), out
    c = batch_compare(out["batch_id"])
    r = rows(c)["time_to_alt_s"]
    assert r["significant"] and r["p_value"] < 0.001 and r["mean_variant"] > r["mean_baseline"] * 1.5
    assert r["p_adjusted"] >= r["p_value"] and (r["effect_size"] is None or r["effect_size"] > 2)
    assert c["metrics"]["time_to_alt_s"]["slow"]["n"] == 4 and not c["partial"]
    assert "time_to_alt_s: slow is" in c["verdict"]
    assert c["png"][:8] == b"\x89PNG\r\n\x1a\n"
    d = out["directory"]
    with open(f"{d}/runs.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and {t["variant"] for t in table} == {"fast", "slow"}
    assert all(float(t["time_to_alt_s"]) > 0 for t in table)
    order = json.load(open(f"{d}/batch.json"))["order"]
    assert [o["variant"] for o in order[:2]] != [o["variant"] for o in order[2:4]] or len(
        {o["variant"] for o in order[:2]}
    ) == 2  # interleaved: every round flies each variant once
    assert all(len({o["variant"] for o in order[i : i + 2]}) == 2 for i in range(0, 8, 2))
    assert json.load(open(f"{d}/compare.json"))["tests"][0]["p_value"] is not None


def test_variants_that_fly_alike_are_not_significant(env):
    # WPNAV_SPEED is the horizontal speed: a straight climb and landing never uses it
    out = batch_fly(
        {"A": {"params": {"WPNAV_SPEED": 500}}, "A2": {"params": {"WPNAV_SPEED": 1000}}},
        runs=4,
        steps=CLIMB,
        seed=3,
        speedup=20,
    )
    assert out["state"] == "done" and out["failed"] == 0
    c = batch_compare(out["batch_id"], picture=False)
    assert not any(r["significant"] for r in c["tests"]), c["verdict"]
    assert c["verdict"].startswith("no metric differs significantly")
    assert rows(c)["time_to_alt_s"]["p_value"] is not None
    no_lease_left()


def test_failed_runs_are_counted_and_shown(env, tmp_path):
    not_a_sitl = "/bin/true"  # exists and runs, but is no SITL: every B run fails to start
    out = batch_fly(
        {"A": {}, "B": {"binary": not_a_sitl}},
        runs=2,
        steps=CLIMB,
        metrics={"climb_m_s": lambda summary, log_path: summary["speed"]["max_climb"]},  # a user's, beside the named
        speedup=20,
    )
    assert out["variants"]["A"] == {"total": 2, "done": 2, "ok": 2, "failed": 0}
    assert out["variants"]["B"] == {"total": 2, "done": 2, "ok": 0, "failed": 2}
    assert out["failed"] == 2 and all(f["variant"] == "B" and f["error"] for f in out["failures"])
    c = batch_compare(out["batch_id"], picture=False)
    s = rows(c)["success"]
    assert s["n_variant"] == 2 and s["mean_variant"] == 0.0 and s["test"] == "fisher_exact"
    assert c["failed"] == {"A": 0, "B": 2}
    assert rows(c)["time_to_alt_s"]["note"] == "fewer than 2 values in a variant"
    assert c["metrics"]["climb_m_s"]["A"]["n"] == 2 and c["metrics"]["climb_m_s"]["A"]["mean"] > 1
    with open(f"{out['directory']}/runs.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 and sum(t["success"] == "False" for t in table) == 2 and "climb_m_s" in table[0]
    no_lease_left()


def test_steps_that_never_end_are_stopped_by_the_time_limit(env):
    out = batch_fly(
        {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}},
        runs=1,
        steps=[{"tool": "arm"}, {"hold_s": 86400}],
        time_limit_s=3,
        speedup=20,
    )
    assert out["state"] == "done" and out["failed"] == 2
    assert all("time limit" in (f["error"] or "") for f in out["failures"]), out["failures"]
    assert batch_status(out["batch_id"])["done"] == 2
    no_lease_left()


def test_an_aborted_batch_keeps_what_it_flew_marked_partial(env):
    from sitlpool.batch import abort_batch, active

    out = batch_fly(
        {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}},
        runs=3,
        steps=[{"tool": "arm"}, {"hold_s": 3600}],
        speedup=20,
        concurrency=2,
        wait=False,
    )
    bid = out["batch_id"]
    assert batch_status(bid)["state"] == "running"
    time.sleep(2)
    abort_batch(bid)
    b = active(bid)
    assert b is None or b.wait(60)
    st = batch_status(bid)
    assert st["state"] == "aborted" and st["partial"] and 0 < st["done"] < 6
    c = batch_compare(bid, picture=False)
    assert c["partial"] and c["verdict"].startswith(f"PARTIAL ({st['done']} of 6 runs)")
    no_lease_left()
