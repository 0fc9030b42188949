"""The wind's turbulence seed (issue 22, a sitlpool extra): ``--wind-seed`` at start, or live by a
PARAM_SET of ``SIM_WIND_SEED``, a name that is no parameter (so, as ArduPilot does for any unknown
name, nothing answers it and real SITL ignores it; the parameter list keeps ArduCopter's 1354)."""

from __future__ import annotations

import math

from conftest import Gcs, start_sim
from sitlpool.instances import ports
from sitlpool.sim.world import Wind

PARAMS = {"SIM_WIND_SPD": 10, "SIM_WIND_DIR": 0, "SIM_WIND_TURB": 2, "SIM_WIND_TC": 5, "SIM_WIND_T": 1}


class P(dict):
    def get(self, k, d=0.0):
        return super().get(k, d)


def gusts(w: Wind, steps: int = 500) -> list[float]:
    out = []
    for _ in range(steps):
        w.update(P(PARAMS), 10.0, 0.04)
        out.append(round(math.hypot(w.n, w.e), 9))
    return out


def test_reseed_starts_the_same_gusts_again():
    a = gusts(Wind(7))
    w = Wind(0)
    gusts(w, 100)
    w.reseed(7)
    w.n = w.e = w.d = w.tn = w.te = w.td = 0.0
    assert gusts(w) == a
    assert gusts(Wind(8)) != a


def test_sim_wind_seed_is_not_a_parameter(procs, tmp_path, instances):
    n = instances[0]
    start_sim(procs, tmp_path, n, "--speedup", 5, "--wind-seed", 3)
    g = Gcs(ports(n).serial0)
    g.heartbeat()
    g.m.mav.param_set_send(1, 1, b"SIM_WIND_SEED", 42, 9)
    assert g.recv("PARAM_VALUE", 1.5, lambda m: m.param_id == "SIM_WIND_SEED") is None
    g.m.mav.param_request_read_send(1, 1, b"SIM_WIND_SPD", -1)
    got = g.recv("PARAM_VALUE", 5, lambda m: m.param_id == "SIM_WIND_SPD")
    assert got is not None and got.param_count == 1354
    g.close()
