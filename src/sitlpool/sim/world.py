"""The air the built-in vehicle flies in and what a failed motor does, from the same ``SIM_*``
parameters ArduPilot's SITL reads (measured on ArduCopter 4.7: bench/measure_real_world).

Wind: ``SIM_WIND_SPD`` (m/s), ``SIM_WIND_DIR`` (degrees the wind comes FROM), ``SIM_WIND_DIR_Z``
(degrees above the horizon it blows up along), ``SIM_WIND_TURB`` (m/s), ``SIM_WIND_TC`` (s, the
turbulence's time constant), ``SIM_WIND_T`` (altitude profile: 0 = scaled by sqrt(alt/T_ALT)
below ``SIM_WIND_T_ALT``, 1 = none, 2 = ``SIM_WIND_T_COEF`` per metre from T_ALT). A change
reaches the vehicle as a first-order lag of ``WIND_LAG_S`` (as measured: 63% after ~1 s).

Turbulence is a Gauss-Markov process per axis (std ``TURB_GAIN`` x TURB horizontally, half that
vertically, correlation time TC), drawn from a ``random.Random`` seeded with ``seed`` (the
simulator's ``--wind-seed``, default 0, or live by a PARAM_SET of ``SIM_WIND_SEED``, a name that
is no parameter: unanswered, and ignored by real SITL) and re-seeded whenever a wind parameter
changes: the same parameters set the same way give the same gusts. Real SITL's turbulence uses
``rand()`` and cannot be seeded: only its statistics compare.

Drag: SITL's copter needs tan(lean) = ``DRAG_A`` x u + ``DRAG_B`` x u² of horizontal thrust to
hold against air moving at u m/s relative to it (fitted to 3.7° at 2 m/s, 8.9° at 4 m/s, 28°
at 10 m/s, 30° = ANGLE_MAX at ~10.25 m/s: the measured upwind limit).
"""

from __future__ import annotations

import math
import random
import zlib

WIND_PARAMS = (
    "SIM_WIND_SPD",
    "SIM_WIND_DIR",
    "SIM_WIND_DIR_Z",
    "SIM_WIND_TURB",
    "SIM_WIND_TC",
    "SIM_WIND_T",
    "SIM_WIND_T_ALT",
    "SIM_WIND_T_COEF",
)
WIND_LAG_S = 1.0
TURB_GAIN = 1.2
DRAG_A, DRAG_B = 0.02655, 0.002902
G = 9.80665
HOLD_TA, HOLD_TB, HOLD_K = 0.8, 1.4, 0.8  # HoldError's band-pass (s, s, s²), fitted


def drag_tan(u: float) -> float:
    """tan(lean) that holds against air moving at ``u`` m/s relative to the vehicle."""
    return DRAG_A * u + DRAG_B * u * u


def drift_tau(wind: float) -> float:
    """ALT_HOLD/STABILIZE with centred sticks, level: the ground speed tends to the wind's as a
    first-order lag of this many seconds (measured: 63% after 3.9 s in 2 m/s of wind, 3.3 s in
    4 m/s, 2.55 s in 10 m/s)."""
    return max(1.5, 4.2 - 0.165 * wind)


def max_airspeed(angle_max_deg: float) -> float:
    """The air-relative speed at which the lean reaches ``angle_max_deg``."""
    k = math.tan(math.radians(max(1.0, min(80.0, angle_max_deg))))
    return (-DRAG_A + math.sqrt(DRAG_A * DRAG_A + 4 * DRAG_B * k)) / (2 * DRAG_B)


class Wind:
    """The wind at the vehicle: ``update(params, alt, dt)`` then ``n``, ``e``, ``d`` (m/s, NED,
    the air's velocity: where it blows TO)."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.n = self.e = self.d = 0.0  # lagged, what the vehicle feels
        self.tn = self.te = self.td = 0.0  # turbulence state
        self.scale = 1.0  # the altitude profile's factor, as of the last update
        self.sn = self.se = 0.0  # the same without turbulence (the steady wind the vehicle feels)
        self.key: tuple[float, ...] = ()
        self.rng = random.Random(seed)
        self.active = False

    def reseed(self, seed: int) -> None:
        """A new seed: the turbulence starts over from it now (as at a wind parameter change)."""
        self.seed = seed
        self.key = ()

    def target(self, p, alt: float, dt: float) -> tuple[float, float, float]:
        g = p.get
        key = tuple(g(k, 0.0) for k in WIND_PARAMS)
        if key != self.key:
            self.key = key
            self.rng.seed(zlib.crc32(repr((self.seed, key)).encode()))
        spd, dir_from, dir_z, turb, tc, wtype, t_alt, t_coef = key
        if spd <= 0 and turb <= 0:
            self.tn = self.te = self.td = 0.0
            return 0.0, 0.0, 0.0
        to = math.radians(dir_from + 180.0)
        z = math.radians(dir_z)
        n, e = math.cos(to) * math.cos(z) * spd, math.sin(to) * math.cos(z) * spd
        d = -math.sin(z) * spd
        if turb > 0:
            tau = max(0.1, tc)
            a = math.exp(-dt / tau)
            s = turb * TURB_GAIN * math.sqrt(max(0.0, 1 - a * a))
            gauss = self.rng.gauss
            self.tn = a * self.tn + s * gauss(0, 1)
            self.te = a * self.te + s * gauss(0, 1)
            self.td = a * self.td + 0.5 * s * gauss(0, 1)
            n, e, d = n + self.tn, e + self.te, d + self.td
        else:
            self.tn = self.te = self.td = 0.0
        scale = 1.0
        if int(wtype) == 0:
            if alt < t_alt and t_alt > 0:
                scale = math.sqrt(max(0.0, alt) / t_alt)
        elif int(wtype) == 2:
            h = math.hypot(n, e)
            if h > 0:
                scale = max(0.0, h + (alt - t_alt) * t_coef) / h
        self.scale = scale
        return n * scale, e * scale, d * scale

    def update(self, p, alt: float, dt: float) -> None:
        tn, te, td = self.target(p, alt, dt)
        if not (tn or te or td or self.n or self.e or self.d or self.sn or self.se):
            self.active = False
            return
        self.active = True
        k = 1 - math.exp(-dt / WIND_LAG_S)
        self.n += (tn - self.n) * k
        self.e += (te - self.e) * k
        self.d += (td - self.d) * k
        sn, se = tn - self.tn * self.scale, te - self.te * self.scale
        self.sn += (sn - self.sn) * k
        self.se += (se - self.se) * k
        if abs(self.n) + abs(self.e) + abs(self.d) + abs(self.sn) + abs(self.se) < 1e-4 and not (tn or te or td):
            self.n = self.e = self.d = self.sn = self.se = 0.0


class HoldError:
    """The position error a change of wind causes in a copter holding position (GUIDED, LOITER,
    ...), as ArduCopter's position controller lets it happen and takes it out: a band-pass of the
    drag the steady wind adds (G x ``drag_tan``), two lags of ``HOLD_TA`` then a high-pass of
    ``HOLD_TB``, times ``HOLD_K``. Fitted to a step from 0 to 10 m/s (measured: 0.39-0.40 m at
    +2.8-3.1 s with 4.1 m/s of air at 10 m, 1.33-1.35 m at +3.2-3.3 s with 10 m/s, half of it
    gone ~2.5 s after the peak; model 0.37 m at +3.1 s, 1.30 m at +3.2 s). ``dn``, ``de``: metres
    downwind of the held point."""

    def __init__(self) -> None:
        self.x = [0.0] * 6  # two lags and the high-pass's lag, north and east
        self.dn = self.de = 0.0

    def update(self, wn: float, we: float, dt: float) -> None:
        w = math.hypot(wn, we)
        a = G * drag_tan(w) / w if w > 1e-6 else 0.0
        x = self.x
        ka, kb = 1 - math.exp(-dt / HOLD_TA), 1 - math.exp(-dt / HOLD_TB)
        for i, ai in ((0, a * wn), (3, a * we)):
            x[i] += (ai - x[i]) * ka
            x[i + 1] += (x[i] - x[i + 1]) * ka
            x[i + 2] += (x[i + 1] - x[i + 2]) * kb
        self.dn, self.de = HOLD_K * (x[1] - x[2]), HOLD_K * (x[4] - x[5])

    @property
    def idle(self) -> bool:
        return not any(abs(v) > 1e-5 for v in self.x)


# ---- motors (SIM_ENGINE_FAIL bitmask, SIM_ENGINE_MUL multiplier), measured on frame + ----------

# per motor (1-based, + frame: 1 right, 2 left, 3 front, 4 back): the roll, pitch sign of the tip
# and the yaw rate's sign when it loses thrust (1 and 2 spin CCW seen from above, as measured)
MOTOR_TIP = {1: (1, 0, -1), 2: (-1, 0, -1), 3: (0, -1, 1), 4: (0, 1, 1)}


def engine_failure(p) -> tuple[int, float] | None:
    """(first failed motor, thrust fraction) or None when every motor gives full thrust."""
    mask = int(p.get("SIM_ENGINE_FAIL", 0))
    mul = max(0.0, min(1.0, p.get("SIM_ENGINE_MUL", 0.0)))
    if mask <= 0 or mul >= 0.999:
        return None
    motor = next((i + 1 for i in range(4) if mask >> i & 1), 0)
    return (motor, mul) if motor else None


def failure_effect(mul: float) -> tuple[float, float, float, float]:
    """What a motor at ``mul`` of its thrust does (measured at 0, 0.5, 0.75, interpolated):
    (terminal descent m/s, time constant s, tilt degrees, yaw rate deg/s)."""
    if mul >= 0.7:
        return 0.0, 1.0, 12.0 * (1 - mul) / 0.25, -13.0 * (1 - mul) / 0.25
    if mul >= 0.5:
        f = (0.7 - mul) / 0.2
        return 6.6 * f, 3.0, 12 + 23 * f, -13 - 33 * f
    if mul > 0.3:
        f = (0.5 - mul) / 0.2
        return 6.6 + 8.7 * f, 3.0 - 1.4 * f, 35 + 71 * f, -46 - 99 * f
    return 15.3, 1.6, 106.0, -145.0
