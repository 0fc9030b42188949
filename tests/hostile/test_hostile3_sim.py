"""Hostile pass 3 on the built-in vehicle, driven as a careless ground station or script drives
it: a PARAM_SET of NaN or infinity and a SIM_SPEEDUP far beyond what any machine runs.
ArduCopter 4.7's SITL (measured here) ignores a non-finite PARAM_SET (the value stays, the
vehicle lives) and runs SIM_SPEEDUP 1e9 as fast as it can while still answering (a PARAM_SET
back to 1 is confirmed in 0.04 s); the built-in vehicle must do the same."""

from __future__ import annotations

import math

import pytest

from conftest import Gcs, start_sim
from sitlpool.instances import ports


@pytest.fixture
def sim(procs, tmp_path, instances):
    n = instances[0]
    p = start_sim(procs, tmp_path / "sim", n, "--speedup", "1", "-w")
    g = Gcs(ports(n).serial0)
    g.heartbeat()
    g.m.mav.request_data_stream_send(1, 1, 0, 4, 1)  # every stream at 4 Hz: the position is heard
    yield p, g, n
    g.close()


def read_param(g: Gcs, name: str) -> float | None:
    g.m.mav.param_request_read_send(1, 1, name.encode(), -1)
    m = g.recv("PARAM_VALUE", 5, lambda m: m.param_id == name)
    return None if m is None else m.param_value


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FS_THR_ENABLE", math.nan),  # an integer parameter: int(round(nan)) raises
        ("FS_THR_ENABLE", math.inf),
        ("SIM_WIND_SPD", math.nan),  # a float parameter: NaN wind would reach the physics
        ("SIM_WIND_SEED", math.nan),  # the turbulence seed (no parameter): int(nan) raises
        ("FS_THR_ENABLE", 1.0),  # a finite value: the same checks hold (the test's own control)
    ],
    ids=["int-nan", "int-inf", "float-nan", "wind-seed-nan", "finite"],
)
def test_a_non_finite_param_set_is_ignored_and_the_vehicle_lives(sim, name, value):
    p, g, _ = sim
    before = read_param(g, name) if name != "SIM_WIND_SEED" else None
    g.m.mav.param_set_send(1, 1, name.encode(), value, 9)
    # still answering afterwards: a PARAM_VALUE of another parameter and a position
    after_ok = read_param(g, "SIM_SPEEDUP")
    assert p.poll() is None, f"the built-in vehicle died on a PARAM_SET of {name} = {value}"
    assert after_ok is not None, "the built-in vehicle stopped answering after a non-finite PARAM_SET"
    if before is not None:
        assert read_param(g, name) == before, f"{name} took a non-finite value (ArduPilot keeps the old one)"
    pos = g.recv("GLOBAL_POSITION_INT", 5)
    assert pos is not None and abs(pos.lat) > 0, "no position after a non-finite PARAM_SET"


def test_a_huge_sim_speedup_keeps_the_vehicle_answering(sim):
    """set_params / a GCS may send SIM_SPEEDUP 1e9 (set_speedup caps at 1000, a PARAM_SET does
    not): ArduPilot then runs as fast as it can; the built-in vehicle must too, not spend hours
    in one tick's sub-steps with its sockets unread."""
    p, g, _ = sim
    g.m.mav.request_data_stream_send(1, 1, 0, 10, 1)
    t0 = g.recv("ATTITUDE", 5)
    assert t0 is not None
    g.m.mav.param_set_send(1, 1, b"SIM_SPEEDUP", 1e9, 9)
    assert g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "SIM_SPEEDUP") is not None
    # the clock jumps (a tick at 1e9 has begun), or nothing more comes (the tick never ends)
    g.recv("ATTITUDE", 3, lambda m: m.time_boot_ms > t0.time_boot_ms + 60_000)
    g.m.mav.param_set_send(1, 1, b"SIM_SPEEDUP", 1.0, 9)
    back = g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "SIM_SPEEDUP" and m.param_value == 1.0)
    assert p.poll() is None
    assert back is not None, "after SIM_SPEEDUP 1e9 the built-in vehicle stopped reading its link"
