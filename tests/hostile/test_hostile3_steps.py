"""Hostile pass 3 on step programs: validate_steps (what fly_steps, repro and batch_fly check
"before anything runs") checks each step's tool and the kinds of its arguments, but not their
values, though the checks that need no vehicle exist (world.wind_params, world.check_speedup,
params.check_values, the mission file readers, the conditions' values, a latitude's range).
So fly_steps answers a run_id and batch_fly a batch_id, then every run launches a SITL only to
fail at that step: 1000 runs of a batch, 1000 SITLs. Each is one line before anything flies."""

from __future__ import annotations

import pytest

from sitlpool.steps.vocabulary import StepError, validate_steps

BAD = {
    "goto-latitude": ({"tool": "goto", "lat": 1e39, "lon": 149.16, "altitude_m": 5}, "lat"),
    "set_wind-1000": ({"tool": "set_wind", "speed_m_s": 1000, "direction_deg": 0}, "wind speed"),
    "set_speedup-0": ({"tool": "set_speedup", "speedup": 0}, "speedup"),
    "set_params-1e39": ({"tool": "set_params", "values": {"RTL_ALT": 1e39}}, "RTL_ALT"),
    "wait_until-value": ({"tool": "wait_until", "condition": "altitude_above", "value": "high"}, "value"),
    "waypoints-header": ({"tool": "upload_mission", "waypoints": "QGC WPL 999\n"}, "QGC WPL 110"),
}


@pytest.mark.parametrize("step,named", list(BAD.values()), ids=list(BAD))
def test_a_step_whose_values_cannot_fly_is_refused_before_anything_runs(step, named):
    with pytest.raises(StepError) as e:
        validate_steps([{"tool": "arm"}, step])
    msg = str(e.value)
    assert "step 2" in msg and named in msg and "\n" not in msg, msg
