"""Wind through SIM_WIND_*: ``set_wind``, ``wind_history``, the wind felt at an altitude."""

from __future__ import annotations

import math
from typing import Any

from ..errors import SitlpoolError
from ..flight import check_finite
from .core import WIND_PARAMS, World, _read, apply_params, elsewhere, link_of, world_of

MAX_WIND_M_S = 60.0  # a copter holds ~10 m/s of air; beyond 60 m/s no vehicle of SITL flies
MAX_TURBULENCE_M_S = 30.0
PROFILES = {"ardupilot": 0, "uniform": 1, "linear": 2}  # -> SIM_WIND_T
WIND_SEED_PARAM = "SIM_WIND_SEED"  # a vehicle's, if it has one; ArduPilot's turbulence has no seed


def felt_wind(speed: float, t: float, t_alt: float, coef: float, altitude_m: float | None) -> float | None:
    """The wind ArduPilot's SITL blows at ``altitude_m`` above home for SIM_WIND_SPD ``speed``:
    SIM_WIND_T 0 scales by sqrt(alt/T_ALT) below T_ALT (measured), 1 none, 2 linearly."""
    if int(t) == 1:
        return speed
    if altitude_m is None:
        return None
    alt = max(0.0, altitude_m)
    if int(t) == 0:
        return speed * (math.sqrt(alt / t_alt) if 0 < t_alt and alt < t_alt else 1.0)
    if int(t) == 2:
        return max(0.0, speed * (1 + coef * (alt - t_alt)))
    return speed


def set_wind(
    x: Any,
    speed_m_s: float,
    direction_deg: float,
    turbulence: float = 0,
    seed: int | None = None,
    profile: str | None = None,
) -> dict:
    """Blow ``speed_m_s`` FROM ``direction_deg`` (0 = from the north, as SIM_WIND_DIR), with
    ``turbulence`` (SIM_WIND_TURB, m/s); ``profile`` ardupilot (SIM_WIND_T 0: weaker below
    SIM_WIND_T_ALT), uniform (1) or linear (2); None keeps the vehicle's."""
    values = wind_params(speed_m_s, direction_deg, turbulence, profile)
    if seed is not None:
        seed = _seed(seed)
    link = link_of(x)
    far = elsewhere(link)
    if far is not None:  # checked here, set where the vehicle's link is
        return far("set_wind", speed_m_s, direction_deg, turbulence, seed, profile)
    w = world_of(link)
    with w.lock:
        seeded = False
        if seed is not None and w.has_param(WIND_SEED_PARAM):
            values[WIND_SEED_PARAM] = float(seed)
            seeded = True
        w.quiet = True
        try:
            apply_params(link, values, "set_wind")
        finally:
            w.quiet = False
        for k, v in values.items():
            if k in WIND_PARAMS:
                w.wind[k] = v
        out = wind_answer(link, w)
        entry = w.record("set_wind", {k: v for k, v in values.items()})
        if seed is not None:
            entry["seed"] = seed
            out["seed"] = (
                {"value": seed, "applied": True, "param": WIND_SEED_PARAM}
                if seeded
                else {
                    "value": seed,
                    "applied": False,
                    "why": "no seed parameter on this vehicle: ArduPilot's turbulence takes none; the built-in "
                    "vehicle's is seeded at launch and re-seeded at each wind change",
                }
            )
        out["set"] = values
        return out


def wind_params(speed_m_s, direction_deg, turbulence=0, profile: str | None = None) -> dict[str, float]:
    """The SIM_WIND_* values for a wind, checked (nothing is sent)."""
    spd = check_finite(speed_m_s, "wind speed", 0, MAX_WIND_M_S, "m/s")
    d = check_finite(direction_deg, "wind direction", -360, 360, "degrees")
    turb = check_finite(turbulence, "turbulence", 0, MAX_TURBULENCE_M_S, "m/s")
    values = {"SIM_WIND_SPD": spd, "SIM_WIND_DIR": d % 360, "SIM_WIND_TURB": turb}
    if profile is not None:
        if profile not in PROFILES:
            raise SitlpoolError(f"unknown wind profile {profile!r}; use one of {', '.join(PROFILES)}")
        values["SIM_WIND_T"] = float(PROFILES[profile])
    return values


def wind_option(wind: Any) -> dict[str, float]:
    """``open_sitl``'s ``wind={"speed_m_s", "direction_deg", "turbulence", "profile"}`` as parameters."""
    if not isinstance(wind, dict):
        raise SitlpoolError(
            f"wind {str(wind)[:60]!r} is not a mapping; give e.g. {{'speed_m_s': 5, 'direction_deg': 90}}"
        )
    known = {"speed_m_s", "direction_deg", "turbulence", "profile"}
    extra = sorted(set(wind) - known)
    if extra or "speed_m_s" not in wind:
        raise SitlpoolError(f"wind needs speed_m_s (and direction_deg, turbulence, profile); not {extra or 'empty'}")
    return wind_params(wind["speed_m_s"], wind.get("direction_deg", 0), wind.get("turbulence", 0), wind.get("profile"))


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**24:
        raise SitlpoolError(
            f"seed {seed!r} is not a whole number from 0 to {2**24 - 1} (a float parameter carries 24 bits)"
        )
    return seed


def wind_answer(link, w: World | None = None) -> dict:
    """The wind as set and as the vehicle feels it at its altitude now."""
    w = w or world_of(link)
    for k in WIND_PARAMS:
        if k not in w.wind:
            v = _read(link, k)
            if v is not None:
                w.wind[k] = v
    spd = w.wind.get("SIM_WIND_SPD", 0.0)
    t, t_alt = w.wind.get("SIM_WIND_T", 0.0), w.wind.get("SIM_WIND_T_ALT", 60.0)
    alt = link.vehicle.rel_alt
    felt = felt_wind(spd, t, t_alt, _read(link, "SIM_WIND_T_COEF") or 0.01 if int(t) == 2 else 0.01, alt)
    profile = {0: "ardupilot", 1: "uniform", 2: "linear"}.get(int(t), f"SIM_WIND_T {t:g}")
    return {
        "speed_m_s": spd,
        "from_direction_deg": w.wind.get("SIM_WIND_DIR"),
        "turbulence_m_s": w.wind.get("SIM_WIND_TURB"),
        "profile": profile,
        "felt_at_vehicle": {
            "altitude_m": alt,
            "speed_m_s": None if felt is None else round(felt, 2),
            "note": f"SIM_WIND_T 0 scales the wind by sqrt(altitude/{t_alt:g} m) below SIM_WIND_T_ALT"
            if int(t) == 0
            else "the same at every altitude"
            if int(t) == 1
            else "scaled linearly with altitude (SIM_WIND_T_COEF)",
        },
        "sim_time_s": w.sim_time_s,
    }


def wind_history(x: Any) -> dict:
    """Every wind change seen on this link (by set_wind, open_sitl or any PARAM_SET), with its sim time."""
    link = link_of(x)
    far = elsewhere(link)
    if far is not None:
        return far("wind_history")
    w = world_of(link)
    return {"changes": [dict(e) for e in w.history], "now": wind_answer(link, w)}


def record_open_wind(x: Any, values: dict[str, float]) -> None:
    """A wind given at launch (``open_sitl(wind=...)``) as the first entry of the history."""
    far = elsewhere(link_of(x))
    if far is not None:
        far("record_open_wind", values)
        return
    w = world_of(x)
    w.wind.update({k: v for k, v in values.items() if k in WIND_PARAMS})
    w.record("open_sitl", dict(values))
