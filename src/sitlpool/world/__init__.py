"""The world a vehicle flies in: wind, injected failures and sim time, through the vehicle's
own ``SIM_*`` parameters (the interface real ArduPilot SITL and the built-in vehicle share).

Every function takes the vehicle's ``VehicleLink`` or anything with a ``.link`` (a ``Flight``,
the pytest plugin's ``sitl.flight``, a session): ``set_wind``, ``wind_history``,
``inject_failure``, ``clear_failure``, ``list_failures``, ``set_speedup``, ``sim_time_s``.
Given a link another process holds (a fleet's ``RemoteSitl`` on a Ray node: ``elsewhere``),
each runs there, on the node's link, and answers the same.
Everything is checked before anything is sent; a parameter set refused half-way is undone,
so a call applies all of its parameters or none. ``Pacer`` slows paced vehicles while no
call runs (the MCP server's ``open_sitl(pace=True)``).

What real ArduCopter 4.7 does with each parameter is measured in
``bench/measure_real_world/README.md`` and ``../shared/ardupilot/FAILSAFES.md``; ``KINDS`` names
the reaction next to each failure.
"""

from __future__ import annotations

from .core import WIND_PARAMS, World, apply_params, elsewhere, held_elsewhere, link_of, sim_time_s, world_of
from .failures import (
    KINDS,
    REACTS_WITH,
    Kind,
    check_kind,
    clear_failure,
    failure_params,
    inject_failure,
    list_failures,
    undo_failures,
)
from .pacing import MAX_SPEEDUP, PACE_SPEEDUP, Pacer, check_speedup, send_speedup, set_speedup
from .wind import (
    MAX_TURBULENCE_M_S,
    MAX_WIND_M_S,
    PROFILES,
    WIND_SEED_PARAM,
    felt_wind,
    record_open_wind,
    set_wind,
    wind_answer,
    wind_history,
    wind_option,
    wind_params,
)

__all__ = [
    "KINDS",
    "MAX_SPEEDUP",
    "MAX_TURBULENCE_M_S",
    "MAX_WIND_M_S",
    "PACE_SPEEDUP",
    "PROFILES",
    "REACTS_WITH",
    "WIND_PARAMS",
    "WIND_SEED_PARAM",
    "Kind",
    "Pacer",
    "World",
    "apply_params",
    "check_kind",
    "check_speedup",
    "clear_failure",
    "elsewhere",
    "held_elsewhere",
    "failure_params",
    "felt_wind",
    "inject_failure",
    "undo_failures",
    "link_of",
    "list_failures",
    "record_open_wind",
    "send_speedup",
    "set_speedup",
    "set_wind",
    "sim_time_s",
    "wind_answer",
    "wind_history",
    "wind_option",
    "wind_params",
    "world_of",
]
