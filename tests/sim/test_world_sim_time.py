"""Sim time on the built-in vehicle (issue 22): SIM_SPEEDUP set live takes effect at once (real
SITL: within its first 0.5 s window); 0 runs unthrottled (real SITL: 14-25x on this machine, not a
pause); 0.01 nearly stops the clock; time_boot_ms, SYSTEM_TIME's UTC and TIMESYNC follow sim time.
Both vehicles at 2x and 0.1x: tests/gcs/test_gcs_world_wind.py."""

from __future__ import annotations

import time

from conftest import Gcs, start_sim


def clock_rate(g: Gcs, wall_s: float) -> dict[str, float]:
    """Sim seconds per wall second over ``wall_s``, by time_boot_ms, SYSTEM_TIME and TIMESYNC."""
    first: dict[str, tuple[float, float]] = {}
    last: dict[str, tuple[float, float]] = {}
    end = time.monotonic() + wall_s
    next_sync = 0.0
    while time.monotonic() < end:
        now = time.monotonic()
        if now >= next_sync:
            next_sync = now + 0.2
            g.m.mav.timesync_send(0, 777)
        m = g.m.recv_match(blocking=True, timeout=0.05)
        if m is None:
            continue
        now = time.monotonic()
        if m.get_type() == "SYSTEM_TIME":
            for key, value in (("boot", m.time_boot_ms / 1000), ("unix", m.time_unix_usec / 1e6)):
                first.setdefault(key, (now, value))
                last[key] = (now, value)
        elif m.get_type() == "TIMESYNC" and m.ts1 == 777 and m.tc1:
            first.setdefault("timesync", (now, m.tc1 / 1e9))
            last["timesync"] = (now, m.tc1 / 1e9)
    return {k: (last[k][1] - first[k][1]) / (last[k][0] - first[k][0]) for k in first if last[k][0] > first[k][0]}


def set_speedup(g: Gcs, value: float) -> float:
    g.m.mav.param_set_send(1, 1, b"SIM_SPEEDUP", value, 9)
    ack = g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "SIM_SPEEDUP")
    assert ack is not None
    return ack.param_value


def test_live_speedup_zero_is_unthrottled_and_small_values_nearly_stop(procs, tmp_path, instances):
    n = instances[0]
    start_sim(procs, tmp_path, n, "--speedup", 1, "--ready-delay", 1)
    from sitlpool.instances import ports

    g = Gcs(ports(n).serial0)
    g.heartbeat()
    g.m.mav.heartbeat_send(6, 8, 0, 0, 0)
    assert g.command(511, 2, 20000) == 0  # SYSTEM_TIME at 50 Hz of sim time
    base = clock_rate(g, 1.5)
    assert all(abs(r - 1) < 0.15 for r in base.values()) and len(base) == 3, base
    assert set_speedup(g, 5) == 5
    five = clock_rate(g, 1.5)
    assert all(abs(r - 5) < 0.75 for r in five.values()), five
    assert set_speedup(g, 0) == 0
    fast = clock_rate(g, 2.0)
    assert fast["boot"] > 8 and fast["timesync"] > 8, fast  # as fast as it can: well above 5
    assert abs(set_speedup(g, 0.01) - 0.01) < 1e-6
    time.sleep(0.3)
    slow = clock_rate(g, 3.0)
    assert slow["timesync"] < 0.03, slow
    assert set_speedup(g, 1) == 1
    g.close()
