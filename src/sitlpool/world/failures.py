"""Failures through SIM_* parameters (and the link's GCS heartbeat): ``KINDS``,
``inject_failure``, ``clear_failure``, ``list_failures``."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from ..errors import SitlpoolError
from ..flight import check_finite, vehicle_kind
from .core import _read, apply_params, elsewhere, link_of, world_of

M_PER_DEG = 111319.49

log = logging.getLogger("sitlpool.world")


@dataclass(frozen=True)
class Kind:
    name: str
    what: str
    params: tuple[str, ...]  # what it sets (support: the vehicle has them all)
    options: tuple[str, ...]
    failsafe: tuple[str, ...]  # the parameters of the vehicle's reaction, reported with it
    arducopter: str  # ArduCopter 4.7's reaction, as measured


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "gps_loss",
            "GPS 1 off (SIM_GPS1_ENABLE 0)",
            ("SIM_GPS1_ENABLE",),
            (),
            ("FS_EKF_ACTION", "FS_EKF_THRESH"),
            "no fix at once; ~8 s later 'EKF Failsafe: changed to LAND Mode' (FS_EKF_ACTION 1)",
        ),
        Kind(
            "gps_glitch",
            "GPS 1 position offset (SIM_GPS1_GLTCH_X/Y)",
            ("SIM_GPS1_GLTCH_X", "SIM_GPS1_GLTCH_Y"),
            ("north_m", "east_m"),
            ("FS_EKF_ACTION",),
            "'GPS Glitch or Compass error' at +1.1-1.4 s, EKF resets to the glitched position at +10 s; no mode change",
        ),
        Kind(
            "compass",
            "compass 1 failed (SIM_MAG1_FAIL; all=True: all three)",
            ("SIM_MAG1_FAIL",),
            ("all",),
            (),
            "MAG health bit off at +0.6 s, 'switching to compass 1' at +10 s; no mode change",
        ),
        Kind(
            "baro",
            "barometer 1 off (SIM_BARO_DISABLE; all=True: both)",
            ("SIM_BARO_DISABLE",),
            ("all",),
            (),
            "BARO health bit off; with both off the copter climbs away at +10 s (no failsafe)",
        ),
        Kind(
            "battery_low",
            "battery voltage below BATT_LOW_VOLT (SIM_BATT_VOLTAGE)",
            ("SIM_BATT_VOLTAGE",),
            ("voltage",),
            ("BATT_LOW_VOLT", "BATT_LOW_TIMER", "BATT_FS_LOW_ACT"),
            "after BATT_LOW_TIMER (10 s): 'Battery 1 is low', 'Battery Failsafe', mode by BATT_FS_LOW_ACT (2 = RTL)",
        ),
        Kind(
            "battery_critical",
            "battery voltage below BATT_CRT_VOLT (SIM_BATT_VOLTAGE)",
            ("SIM_BATT_VOLTAGE",),
            ("voltage",),
            ("BATT_CRT_VOLT", "BATT_LOW_TIMER", "BATT_FS_CRT_ACT"),
            "after BATT_LOW_TIMER: 'Battery 1 is critical', 'Battery Failsafe', mode by BATT_FS_CRT_ACT (1 = LAND)",
        ),
        Kind(
            "motor",
            "one motor weakened or lost (SIM_ENGINE_MUL, then SIM_ENGINE_FAIL bitmask)",
            ("SIM_ENGINE_MUL", "SIM_ENGINE_FAIL"),
            ("motor", "thrust"),
            ("FS_CRASH_CHECK",),
            "thrust 0: flips and falls in 1.7 s from 10 m; 0.5: spins, descends, 'Potential Thrust Loss'; 0.75: holds; "
            "no failsafe, no disarm",
        ),
        Kind(
            "rc_loss",
            "RC receiver loses its pulses (SIM_RC_FAIL 1; neutral=True: 2, throttle 950)",
            ("SIM_RC_FAIL",),
            ("neutral",),
            ("FS_THR_ENABLE", "FS_THR_VALUE"),
            "+1.0 s (neutral: +0.1 s): 'Radio Failsafe', RTL (FS_THR_ENABLE 1); RC overrides count as RC input",
        ),
        Kind(
            "gcs_loss",
            "sitlpool's link stops its GCS heartbeats (the link stays open)",
            (),
            (),
            ("FS_GCS_ENABLE", "FS_GCS_TIMEOUT"),
            "FS_GCS_TIMEOUT (5 s) after the last heartbeat: 'GCS Failsafe', RTL; only with FS_GCS_ENABLE 1 (default 0)",
        ),
    )
}
#: the parameter that must be non-zero for ArduCopter to react, per kind
REACTS_WITH = {
    "gps_loss": "FS_EKF_ACTION",
    "battery_low": "BATT_FS_LOW_ACT",
    "battery_critical": "BATT_FS_CRT_ACT",
    "rc_loss": "FS_THR_ENABLE",
    "gcs_loss": "FS_GCS_ENABLE",
}

#: ArduPlane's names for the parameters of its reaction
PLANE_FAILSAFE = {
    "gps_loss": ("FS_EKF_THRESH",),
    "battery_low": ("BATT_LOW_VOLT", "BATT_LOW_TIMER", "BATT_FS_LOW_ACT"),
    "battery_critical": ("BATT_CRT_VOLT", "BATT_LOW_TIMER", "BATT_FS_CRT_ACT"),
    "motor": ("CRASH_DETECT",),
    "rc_loss": ("THR_FAILSAFE", "THR_FS_VALUE", "FS_SHORT_ACTN", "FS_LONG_ACTN", "FS_SHORT_TIMEOUT", "FS_LONG_TIMEOUT"),
    "gcs_loss": ("FS_GCS_ENABL", "FS_LONG_ACTN", "FS_LONG_TIMEOUT"),
}
#: ArduPlane's reaction, as measured (tests/gcs/test_gcs_world_plane.py, LOITER at 50 m); the other
#: kinds have their SIM_* parameters on Plane but no failsafe of their own measured
PLANE_REACTION = {
    "rc_loss": "'Throttle failsafe on', 'RC Short Failsafe On' (FS_SHORT_TIMEOUT 1.5 s), 'RC Long Failsafe On: RTL' "
    "(FS_LONG_TIMEOUT 5 s; FS_LONG_ACTN 0 = RTL); cleared: 'Throttle failsafe off', 'RC Long Failsafe Cleared'",
    "gcs_loss": "with FS_GCS_ENABL 1 (default 0): 'GCS Failsafe On: RTL' FS_LONG_TIMEOUT after the last heartbeat; "
    "'GCS Failsafe Off' when they resume",
    "battery_low": "after BATT_LOW_TIMER (10 s): 'Battery 1 is low', the BATT_FS_LOW_ACT mode (1 = RTL) without a "
    "'Battery Failsafe' text",
    "battery_critical": "after BATT_LOW_TIMER: 'Battery 1 is critical', the BATT_FS_CRT_ACT mode (not measured)",
}
PLANE_REACTS_WITH = {
    "battery_low": "BATT_FS_LOW_ACT",
    "battery_critical": "BATT_FS_CRT_ACT",
    "rc_loss": "THR_FAILSAFE",
    "gcs_loss": "FS_GCS_ENABL",
}


def check_kind(kind: Any) -> Kind:
    if kind not in KINDS:
        raise SitlpoolError(f"unknown failure kind {kind!r}; the kinds are: {', '.join(KINDS)}")
    return KINDS[kind]


def failure_params(link, kind: str, opts: dict[str, Any]) -> dict[str, float]:
    """The parameters ``kind`` with ``opts`` sets, in order, checked (reads the vehicle where a
    default depends on it: the battery thresholds, home latitude)."""
    k = check_kind(kind)
    wrong = sorted(set(opts) - set(k.options))
    if wrong:
        takes = f"takes {', '.join(k.options)}" if k.options else "takes no options"
        raise SitlpoolError(f"failure {kind} {takes}; not {', '.join(wrong)}")
    if kind == "gps_loss":
        return {"SIM_GPS1_ENABLE": 0.0}
    if kind == "gps_glitch":
        n = check_finite(opts.get("north_m", 30.0), "gps_glitch north_m", -100000, 100000, "m")
        e = check_finite(opts.get("east_m", 0.0), "gps_glitch east_m", -100000, 100000, "m")
        lat = link.vehicle.lat or 0.0
        return {
            "SIM_GPS1_GLTCH_X": n / M_PER_DEG,
            "SIM_GPS1_GLTCH_Y": e / (M_PER_DEG * max(0.01, math.cos(math.radians(lat)))),
        }
    if kind in ("compass", "baro"):
        every = opts.get("all", False)
        if not isinstance(every, bool):
            raise SitlpoolError(f"failure {kind}: all must be true or false, not {every!r}")
        names = (
            ("SIM_MAG1_FAIL", "SIM_MAG2_FAIL", "SIM_MAG3_FAIL")
            if kind == "compass"
            else ("SIM_BARO_DISABLE", "SIM_BAR2_DISABLE")
        )
        return {n: 1.0 for n in (names if every else names[:1])}
    if kind in ("battery_low", "battery_critical"):
        return {"SIM_BATT_VOLTAGE": _battery_voltage(link, kind, opts.get("voltage"))}
    if kind == "motor":
        motor = opts.get("motor", 1)
        if isinstance(motor, bool) or not isinstance(motor, int) or not 1 <= motor <= 12:
            raise SitlpoolError(
                f"failure motor: motor {motor!r} is not a motor number from 1 to 12 (ArduPilot's numbering)"
            )
        thrust = check_finite(opts.get("thrust", 0.0), "failure motor: thrust", 0, 1, "(fraction of full thrust)")
        return {"SIM_ENGINE_MUL": thrust, "SIM_ENGINE_FAIL": float(1 << (motor - 1))}  # MUL first, as measured
    if kind == "rc_loss":
        neutral = opts.get("neutral", False)
        if not isinstance(neutral, bool):
            raise SitlpoolError(f"failure rc_loss: neutral must be true or false, not {neutral!r}")
        return {"SIM_RC_FAIL": 2.0 if neutral else 1.0}
    return {}  # gcs_loss: no parameter


def _battery_voltage(link, kind: str, voltage) -> float:
    if voltage is not None:
        return check_finite(voltage, f"failure {kind}: voltage", 0, 60, "V")
    low, crit = _read(link, "BATT_LOW_VOLT") or 0.0, _read(link, "BATT_CRT_VOLT") or 0.0
    if kind == "battery_low":
        if low <= 0:
            raise SitlpoolError(
                "failure battery_low: BATT_LOW_VOLT is 0 (the low-battery failsafe is off); give voltage"
            )
        return round(max(low - 0.3, (low + crit) / 2 if crit > 0 else 0.0), 2)
    if crit <= 0:
        raise SitlpoolError(
            "failure battery_critical: BATT_CRT_VOLT is 0 (the critical-battery failsafe is off): "
            "set_param BATT_CRT_VOLT (e.g. 10.2) and BATT_FS_CRT_ACT, or give voltage"
        )
    return round(crit - 0.3, 2)


def _supported(link, k: Kind) -> bool:
    w = world_of(link)
    return all(w.has_param(p) for p in k.params)


def list_failures(x: Any) -> dict:
    """Every kind: what it does, whether this vehicle has its parameters, ArduCopter's reaction
    (and ArduPlane's on a plane), and what is injected now."""
    link = link_of(x)
    far = elsewhere(link)
    if far is not None:
        return far("list_failures")
    w = world_of(link)
    plane = vehicle_kind(link.vehicle.vehicle_type) == "plane"
    kinds = []
    for k in KINDS.values():
        row = {
            "kind": k.name,
            "what": k.what,
            "options": list(k.options),
            "supported": _supported(link, k),
            "arducopter_4_7": k.arducopter,
        }
        if plane:
            row["arduplane"] = PLANE_REACTION.get(k.name, "no failsafe of its own (the SIM_* fault only)")
        kinds.append(row)
    return {"kinds": kinds, "injected": {k: dict(v) for k, v in w.failures.items()}, "sim_time_s": w.sim_time_s}


def _failsafe_report(link, k: Kind) -> dict:
    plane = vehicle_kind(link.vehicle.vehicle_type) == "plane"
    w = world_of(link)
    names = PLANE_FAILSAFE.get(k.name, ()) if plane else k.failsafe
    params = {p: v for p in names if w.has_param(p) and (v := _read(link, p)) is not None}
    out: dict[str, Any] = {"params": params, "arducopter_4_7": k.arducopter}
    if plane:
        out["arduplane"] = PLANE_REACTION.get(k.name, "no failsafe of its own (the SIM_* fault only)")
    gate = (PLANE_REACTS_WITH if plane else REACTS_WITH).get(k.name)
    if gate is not None and params.get(gate) == 0:
        out["warning"] = f"{gate} is 0: the vehicle will not react; set_param {gate} (e.g. 1) to arm this failsafe"
    return out


def inject_failure(x: Any, kind: str, **opts: Any) -> dict:
    """Inject ``kind`` (``KINDS``) with its options; all its parameters or none are set."""
    link = link_of(x)
    k = check_kind(kind)
    opts = {n: v for n, v in opts.items() if v is not None}
    far = elsewhere(link)
    if far is not None:  # the kind checked here; its options, the vehicle's parameters and the set there
        return far("inject_failure", kind, **opts)
    link.require_writable(f"inject_failure {kind}")
    w = world_of(link)
    with w.lock:
        values = failure_params(link, kind, opts)
        before = apply_params(link, values, f"inject_failure {kind}") if values else {}
        for name, old in before.items():
            if not any(name in f for f in w.failures.values()):
                w.originals.setdefault(name, old)
        if kind == "gcs_loss":
            link.gcs_heartbeat = False
        replaced = w.failures.pop(kind, None)
        w.failures[kind] = dict(values)
        out = {
            "injected": kind,
            "what": k.what,
            "set": values or {"gcs_heartbeat": False},
            "failsafe": _failsafe_report(link, k),
            "injected_now": sorted(w.failures),
            "sim_time_s": w.sim_time_s,
        }
        if replaced is not None:  # the same kind again: this one in its place (clear_failure undoes both)
            out["replaced"] = replaced
        return out


def clear_failure(x: Any, kind: str) -> dict:
    """Undo ``kind``: each parameter back to its value before the first failure that set it
    (or to another failure still injected that sets it)."""
    link = link_of(x)
    check_kind(kind)
    far = elsewhere(link)
    if far is not None:
        return far("clear_failure", kind)
    w = world_of(link)
    with w.lock:
        if kind not in w.failures:
            now = ", ".join(sorted(w.failures)) or "none"
            raise SitlpoolError(f"no {kind} failure was injected on this vehicle (injected now: {now})")
        link.require_writable(f"clear_failure {kind}")
        others = {k: v for k, v in w.failures.items() if k != kind}
        restore: dict[str, float] = {}
        for name in w.failures[kind]:
            still = [v[name] for v in others.values() if name in v]
            restore[name] = still[-1] if still else w.originals[name]
        if "SIM_ENGINE_FAIL" in restore:  # the bitmask off first, then the multiplier back
            restore = {"SIM_ENGINE_FAIL": restore["SIM_ENGINE_FAIL"], **restore}
        if restore:
            apply_params(link, restore, f"clear_failure {kind}")
        for name in restore:
            if not any(name in v for v in others.values()):
                w.originals.pop(name, None)
        if kind == "gcs_loss":
            link.gcs_heartbeat = True
        del w.failures[kind]
        return {
            "cleared": kind,
            "restored": restore or {"gcs_heartbeat": True},
            "injected_now": sorted(w.failures),
            "sim_time_s": w.sim_time_s,
        }


def undo_failures(link: Any) -> list[str]:
    """Clear every failure injected through ``link`` (newest first), for a vehicle this link does
    not own (an attachment closing: the failures it set must not outlive it); the kinds cleared.
    Errors are logged, never raised: a close goes on."""
    if elsewhere(link) is not None or link.read_only:
        return []
    w = world_of(link)
    cleared = []
    for kind in reversed(list(w.failures)):
        try:
            clear_failure(link, kind)
            cleared.append(kind)
        except Exception as e:  # the vehicle may be gone: the close goes on
            log.warning("could not clear the %s failure on closing: %s", kind, e)
    return cleared
