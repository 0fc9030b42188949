"""The uploaded fence's geometry (AC_PolyFence_loader's inclusion / exclusion polygons and circles) and
AC_Avoid's speed limit toward it, as measured on ArduCopter 4.7 (bench/measure_real_world/world3.py):

- a GUIDED velocity target or LOITER's stick toward an edge of an inclusion polygon, an inclusion
  circle, an exclusion polygon or an exclusion circle slows and stops ``FENCE_MARGIN`` (2 m) from it,
  whatever the speed (5 m/s: 38.0 m of a 40 m edge, 18.0 m before an exclusion zone 20 m out);
- the velocity along the edge is kept (``AVOID_BEHAVE`` 0, slide): 5 m/s north with 2 m/s east
  slides east along the north edge and stops in the corner, 2 m from both edges; a copter pushed
  onto an exclusion circle slides round it;
- a GUIDED destination outside an inclusion zone or inside an exclusion zone is ignored, without a
  word (as one outside the ``FENCE_RADIUS`` circle or above ``FENCE_ALT_MAX``).

Shapes are in the vehicle's local metres (north, east): ``("in"|"ex", "circle", (n, e), r)`` or
``("in"|"ex", "poly", [(n, e), ...])``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

INCLUSION_POLYGON, EXCLUSION_POLYGON, INCLUSION_CIRCLE, EXCLUSION_CIRCLE = 5001, 5002, 5003, 5004

Point = tuple[float, float]
Shape = tuple[Any, ...]


def shapes(items: Sequence[Any], local: Callable[[float, float], Point]) -> list[Shape]:
    """The fence items (as the mission protocol keeps them: a polygon's vertices each carry its
    vertex count in param1, a circle its radius) as shapes in local metres."""
    out: list[Shape] = []
    i = 0
    while i < len(items):
        it = items[i]
        if it.command in (INCLUSION_CIRCLE, EXCLUSION_CIRCLE):
            kind = "in" if it.command == INCLUSION_CIRCLE else "ex"
            out.append((kind, "circle", local(it.lat, it.lon), float(it.params[0])))
            i += 1
            continue
        count = max(1, int(it.params[0]))
        if it.command in (INCLUSION_POLYGON, EXCLUSION_POLYGON):
            kind = "in" if it.command == INCLUSION_POLYGON else "ex"
            out.append((kind, "poly", [local(p.lat, p.lon) for p in items[i : i + count]]))
        i += count
    return out


def breached(zones: list[Shape], n: float, e: float, margin: float = 0.0) -> bool:
    """Outside an inclusion zone or inside an exclusion one; ``margin`` m deeper inside to count as
    back (a breach clears by FENCE_MARGIN)."""
    for kind, form, *geo in zones:
        if form == "circle":
            (cn, ce), r = geo
            d = math.hypot(n - cn, e - ce)
            if d > r - margin if kind == "in" else d < r + margin:
                return True
            continue
        poly = geo[0]
        inside, edge = _inside(poly, n, e), _edge_distance(poly, n, e)
        if (not inside if kind == "in" else inside) or edge < margin:
            return True
    return False


def allows(zones: list[Shape], n: float, e: float) -> bool:
    """Whether a destination is inside every inclusion zone and outside every exclusion zone."""
    return not breached(zones, n, e)


def limit(
    zones: list[Shape], n: float, e: float, vn: float, ve: float, margin: float, kp: float, accel: float
) -> tuple[float, float]:
    """AC_Avoid on the velocity (vn, ve) at (n, e): its component toward each edge (each circle)
    limited to the speed that stops ``margin`` short of it; the component along it kept (slide)."""
    for kind, form, *geo in zones:
        if form == "circle":
            (cn, ce), r = geo
            dn, de = n - cn, e - ce
            d = math.hypot(dn, de)
            if d < 1e-3:
                continue
            if kind == "in":  # toward the rim: outward from the centre
                vn, ve = _cap(vn, ve, dn / d, de / d, r - margin - d, kp, accel)
            else:  # toward the centre
                vn, ve = _cap(vn, ve, -dn / d, -de / d, d - r - margin, kp, accel)
            continue
        poly = geo[0]
        if _inside(poly, n, e) != (kind == "in"):
            continue  # already breached: the fence's action deals with it, not AC_Avoid
        for k in range(len(poly)):
            cn, ce = _closest(poly[k], poly[k - 1], n, e)
            dn, de = cn - n, ce - e
            d = math.hypot(dn, de)
            if d < 1e-3:
                continue
            vn, ve = _cap(vn, ve, dn / d, de / d, d - margin, kp, accel)
    return vn, ve


def _cap(vn: float, ve: float, un: float, ue: float, room: float, kp: float, accel: float) -> tuple[float, float]:
    toward = vn * un + ve * ue
    lim = stop_speed(room, kp, accel)
    if toward > lim:
        vn, ve = vn - un * (toward - lim), ve - ue * (toward - lim)
    return vn, ve


def stop_speed(room: float, kp: float, accel: float) -> float:
    """AC_Avoid's ``get_max_speed``: the sqrt controller of the distance left (m), at gain ``kp``
    and ``accel`` m/s²: the speed from which the vehicle still stops in ``room``."""
    if room <= 0:
        return 0.0
    kp = max(0.05, kp)
    linear = accel / (kp * kp)
    return kp * room if room <= linear else math.sqrt(2 * accel * (room - linear / 2))


def _inside(poly: list[Point], n: float, e: float) -> bool:
    inside = False
    for k in range(len(poly)):
        (n1, e1), (n2, e2) = poly[k], poly[k - 1]
        if (e1 > e) != (e2 > e) and n < n1 + (n2 - n1) * (e - e1) / (e2 - e1):
            inside = not inside
    return inside


def _closest(a: Point, b: Point, n: float, e: float) -> Point:
    (n1, e1), (n2, e2) = a, b
    dn, de = n2 - n1, e2 - e1
    length = dn * dn + de * de
    f = 0.0 if length == 0 else max(0.0, min(1.0, ((n - n1) * dn + (e - e1) * de) / length))
    return n1 + f * dn, e1 + f * de


def _edge_distance(poly: list[Point], n: float, e: float) -> float:
    ends = [_closest(poly[k], poly[k - 1], n, e) for k in range(len(poly))]
    return min((math.hypot(n - cn, e - ce) for cn, ce in ends), default=math.inf)
