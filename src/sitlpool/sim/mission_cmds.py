"""What ArduCopter 4.7's AUTO does with each mission command (mode_auto.cpp's start_command /
verify_command), measured on the real binary: the navigation commands (waypoint, spline
waypoint, loiter unlimited / time / turns / to altitude, delay, takeoff, land, RTL), the "do"
and condition commands (change speed, ROI, condition yaw / delay / distance, set home) and the
yaw they command. ``mission.py`` runs them in AP_Mission's order."""

from __future__ import annotations

import math

from .navigation import Navigation
from .rules import SPOOL_S, A
from .state import MissionItem

C = A  # MAV_CMD_* numbers
NAV_WP = {C.MAV_CMD_NAV_WAYPOINT, C.MAV_CMD_NAV_SPLINE_WAYPOINT}
HOLDS = {C.MAV_CMD_NAV_LOITER_UNLIM, C.MAV_CMD_NAV_LOITER_TIME, C.MAV_CMD_NAV_LOITER_TO_ALT}
TAKEOFFS = {C.MAV_CMD_NAV_TAKEOFF, C.MAV_CMD_NAV_VTOL_TAKEOFF}
# navigation commands ArduCopter's AUTO cannot start: announced, then passed over
NAV_SKIPPED = {30, 83, 85, 94, 42702, 42703}
# do commands AP_Mission carries out itself: no MISSION_ITEM_REACHED, no text
AP_MISSION_DOS = {181, 182, 183, 184, 203, 206, 207, 208, 211, 215, 216, 217, 218, 531, 532, 1000, 2000}
AP_MISSION_DOS |= {2001, 2500, 2501, 42600, 205, 202, 204, 222, 223, 600, 601, 189, 212}
# do commands Copter verifies at once (MISSION_ITEM_REACHED)
COPTER_DOS = {C.MAV_CMD_DO_CHANGE_SPEED, C.MAV_CMD_DO_SET_HOME, 195, 197, 201}
YAW_DONE_DEG = 2.0  # verify_yaw: within 2 degrees


def wrap180(a: float) -> float:
    return (a + 180.0) % 360.0 - 180.0


def hermite(p0, p1, t0, t1, u: float) -> tuple[float, ...]:
    h00, h10 = 2 * u**3 - 3 * u**2 + 1, u**3 - 2 * u**2 + u
    h01, h11 = -2 * u**3 + 3 * u**2, u**3 - u**2
    return tuple(h00 * a + h10 * b + h01 * c + h11 * d for a, b, c, d in zip(p0, t0, p1, t1, strict=True))


class MissionCommands(Navigation):
    nav: dict | None = None  # the running navigation command's state
    roi: tuple[float, float] | None = None  # DO_SET_ROI*: yaw points there (north, east)
    fixed_yaw: list[float] | None = None  # CONDITION_YAW: [degrees still to turn, rate deg/s]
    leg: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # the last waypoint leg (origin, end vector)
    cond: dict | None = None  # the running condition command's state
    last_auto_t = 0.0

    def set_home_here(self) -> None:  # (mission.py)
        raise NotImplementedError

    def home_changed(self) -> None:  # (mission.py)
        raise NotImplementedError

    # ---- positions ----------------------------------------------------------------------

    def _point(self, it: MissionItem, keep_alt: bool = True) -> tuple[float, float, float]:
        """A command's location (north, east, metres above the origin); latitude and longitude
        0 mean where the vehicle is, altitude 0 there its altitude (``loc_from_cmd``)."""
        here = it.lat == 0 and it.lon == 0
        n, e = (self.north, self.east) if here else self.local(it.lat, it.lon)
        alt = self.alt if (keep_alt and here and it.alt == 0) else self.alt_from(it.frame, it.alt)
        return n, e, alt

    def _next_wp(self, seq: int) -> MissionItem | None:
        """The next navigation command when it is a waypoint or spline (fast waypoints)."""
        for it in self.mission[seq + 1 :]:
            if it.command < 96 or it.command in (213, 42702, 42703):
                return it if it.command in NAV_WP else None
        return None

    # ---- starting a navigation command (ModeAuto::start_command) --------------------------

    def nav_start(self, seq: int) -> bool:
        it = self.mission[seq]
        c = it.command
        self.nav = {"cmd": c, "seq": seq, "since": self.t, "item": it}
        if c in TAKEOFFS:
            base = self.alt + (1.0 if self.landed_since is not None else 0.0)
            self.nav["alt"] = max(self.alt_from(it.frame, it.alt), base)
            if self.landed_since is not None and self.lift_at <= self.armed_at:
                self.lift_at = self.t + SPOOL_S
                self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
            return True
        if c in NAV_WP or c in HOLDS:
            n, e, alt = self._point(it)
            self.nav["to"] = (n, e, alt)
            if self.roi is None:
                self.fixed_yaw = None  # wp_start: the yaw goes back to its default (unless an ROI)
            if c == C.MAV_CMD_NAV_SPLINE_WAYPOINT:
                self._spline_start(seq, (n, e, alt), self.nav)
            else:
                self.leg = ((self.north, self.east, self.alt), (n - self.north, e - self.east, alt - self.alt))
            return True
        if c == C.MAV_CMD_NAV_LOITER_TURNS:
            n, e, alt = self._point(it)
            r = abs(it.params[2])
            self.nav.update(centre=(n, e, alt), radius=r, ccw=it.params[2] < 0, turns=max(0.0, it.params[0]))
            d = math.hypot(self.north - n, self.east - e)
            if d > 0.1:  # AC_Circle's closest point on the circle (at its centre: ahead of the nose)
                edge = (n + (self.north - n) / d * r, e + (self.east - e) / d * r, alt)
            else:
                h = math.radians(self.heading)
                edge = (n + r * math.cos(h), e + r * math.sin(h), alt)
            self.nav["edge"] = edge
            if self.roi is None and (d <= r or d <= 5):  # inside the circle: the yaw holds on the way out
                self.nav["hold_yaw"] = self.heading
            near_edge = math.hypot(self.north - edge[0], self.east - edge[1]) <= 3 and abs(self.alt - alt) < 1
            if near_edge or d < 1:  # (measured: from the centre it circles at once, spiralling out)
                self._circle_start()
            return True
        if c == C.MAV_CMD_NAV_DELAY:
            self.nav["until"] = self.t + self._delay_seconds(it)
            self.nav["hold"] = (self.north, self.east, self.alt)
            self.text(A.MAV_SEVERITY_INFO, f"Delaying {int(self._delay_seconds(it))} sec")
            return True
        if c == C.MAV_CMD_NAV_GUIDED_ENABLE:
            return True
        if c in (C.MAV_CMD_NAV_LAND, C.MAV_CMD_NAV_RETURN_TO_LAUNCH):
            return True
        return False  # ArduCopter cannot fly it: the mission goes on to the next command

    def _delay_seconds(self, it: MissionItem) -> float:
        """NAV_DELAY: param1 seconds, or (param1 -1) until the UTC time param2:param3:param4."""
        if it.params[0] > 0:
            return float(it.params[0])
        hour, minute, sec = (max(0, int(x)) for x in it.params[1:4])
        now = (self.utc_at_boot + self.t) % 86400
        wait = (hour * 3600 + minute * 60 + sec - now) % 86400
        return wait

    def _spline_start(self, seq: int, dest: tuple[float, float, float], nav: dict) -> None:
        """AC_WPNav's spline leg: a Hermite curve from here to ``dest``, leaving along the last
        leg and arriving parallel to (next point - this leg's origin) when the next command is a
        waypoint (straight: along the next leg), stopped otherwise."""
        origin = (self.north, self.east, self.alt)
        t0 = self.leg[1] if self.leg is not None else tuple(b - a for a, b in zip(origin, dest, strict=True))
        nxt = self._next_wp(seq) if self.mission[seq].params[0] <= 0 else None
        t1: tuple[float, ...] = (0.0, 0.0, 0.0)
        if nxt is not None:
            p2 = self._point(nxt, keep_alt=False)
            base = origin if nxt.command == C.MAV_CMD_NAV_SPLINE_WAYPOINT else dest
            t1 = tuple(b - a for a, b in zip(base, p2, strict=True))
        chord = math.dist(origin, dest)
        vel = math.hypot(*t0) + math.hypot(*t1)
        if vel > 4 * chord > 0:  # SplineCurve: no big overshoot on a short leg
            k = 4 * chord / vel
            t0, t1 = tuple(x * k for x in t0), tuple(x * k for x in t1)
        pts = [hermite(origin, dest, t0, t1, i / 60) for i in range(61)]
        nav.update(path=pts, i=0, stop=not any(t1))
        self.leg = (origin, t1 if any(t1) else tuple(b - a for a, b in zip(origin, dest, strict=True)))

    def _circle_start(self) -> None:
        nav = self.nav or {}
        nav["circling"] = True
        dn, de = self.north - nav["centre"][0], self.east - nav["centre"][1]
        nav["angle"] = math.atan2(de, dn) if math.hypot(dn, de) > 0.1 else math.radians(self.heading)
        nav["done"] = 0.0
        nav["said"] = 0
        if self.roi is None:
            self.fixed_yaw = None  # the nose to the centre (unless an ROI)
        self.text(A.MAV_SEVERITY_INFO, f"Mission: starting circle 1/{int(nav['turns'])}")

    # ---- flying it (run) and whether it is done (verify) -----------------------------------

    def nav_run(self, it: MissionItem, vh, ah, vup, vdn, az) -> tuple[float, float, float] | None:
        """The desired velocity for the running navigation command, or None once it is done."""
        nav = self.nav or {}
        c = it.command
        radius = max(0.5, self.p.get("WPNAV_RADIUS", 200) / 100)
        if c in TAKEOFFS:
            if self.alt >= nav["alt"] - 0.1:
                return None
            return self._toward(self.north, self.east, nav["alt"], vh, ah, vup, vdn, az)
        if c == C.MAV_CMD_NAV_SPLINE_WAYPOINT and "path" in nav:
            return self._spline_run(it, nav, vh, ah, vup, vdn, az)
        if c in NAV_WP or c in HOLDS:
            n, e, alt = nav["to"]
            if math.hypot(n - self.north, e - self.east) > radius or abs(alt - self.alt) >= 0.5:
                nav.pop("at", None)
                return self._toward(n, e, alt, vh, ah, vup, vdn, az)
            return self._hold_at(it, nav, (n, e, alt), vh, ah, vup, vdn, az)
        if c == C.MAV_CMD_NAV_LOITER_TURNS:
            return self._circle_run(nav, vh, ah, vup, vdn, az)
        if c == C.MAV_CMD_NAV_DELAY:
            if self.t - nav["since"] > nav["until"] - nav["since"]:
                return None
            hn, he, ha = nav["hold"]
            return self._toward(hn, he, ha, vh, ah, vup, vdn, az)
        if c == C.MAV_CMD_NAV_LAND:  # to its point (if it has one), then down: done when disarmed
            n, e, _ = self._point(it)
            if math.hypot(n - self.north, e - self.east) > 0.5 and not self.auto_landing:
                return self._toward(n, e, self.alt, vh, ah, vup, vdn, az)
            self.auto_landing = True
            return 0.0, 0.0, self._land_speed()
        if c == C.MAV_CMD_NAV_RETURN_TO_LAUNCH:  # RTL inside AUTO, as Copter: done when disarmed
            if not self.rtl_phase:
                self.rtl_phase = "climb"
            if self.rtl_phase == "land":
                self.auto_landing = True
            return self._rtl(vh, ah, vup, vdn, az)
        return None  # GUIDED_ENABLE (param1 0): done at once

    def _hold_at(self, it: MissionItem, nav: dict, to, vh, ah, vup, vdn, az):
        c = it.command
        want = self._toward(to[0], to[1], to[2], vh, ah, vup, vdn, az)
        if c == C.MAV_CMD_NAV_LOITER_UNLIM:
            return want
        hold = max(0.0, it.params[0]) if c in (C.MAV_CMD_NAV_WAYPOINT, C.MAV_CMD_NAV_LOITER_TIME) else 0.0
        nav.setdefault("at", self.t)
        if self.t - nav["at"] < hold:
            return want
        if c != C.MAV_CMD_NAV_LOITER_TO_ALT:
            self.text(A.MAV_SEVERITY_INFO, f"Reached command #{nav['seq']}")
        return None

    def _spline_run(self, it: MissionItem, nav: dict, vh, ah, vup, vdn, az):
        """Along the curve as AC_WPNav's spline: at the speed its curvature and the stop at its
        end allow, steering for a point a little ahead on it."""
        pts = nav["path"]
        if "cum" not in nav:
            cum = [0.0]
            for a, b in zip(pts, pts[1:], strict=False):
                cum.append(cum[-1] + math.dist(a[:2], b[:2]))
            nav["cum"] = cum
        cum = nav["cum"]
        i = nav["i"]
        here = (self.north, self.east, self.alt)
        while i + 1 < len(pts) and math.dist(pts[i + 1][:2], here[:2]) <= math.dist(pts[i][:2], here[:2]) + 0.05:
            i += 1
        nav["i"] = i
        end = pts[-1]
        remaining = cum[-1] - cum[i] + math.dist(here[:2], pts[i][:2])
        if i >= len(pts) - 2 and (remaining <= 1.0 or not nav["stop"]) and abs(end[2] - self.alt) < 0.7:
            return self._hold_at(it, nav, end, vh, ah, vup, vdn, az)
        v = vh
        if nav["stop"]:
            v = min(v, math.sqrt(2 * ah * 0.9 * remaining), remaining * 2)
        k = i
        while k + 2 < len(pts) and cum[k] - cum[i] < 10:  # the sharpest bend ahead: no faster than sqrt(a R)
            k += 1
            h1 = math.atan2(pts[k][1] - pts[k - 1][1], pts[k][0] - pts[k - 1][0])
            h2 = math.atan2(pts[k + 1][1] - pts[k][1], pts[k + 1][0] - pts[k][0])
            turn = abs((h2 - h1 + math.pi) % (2 * math.pi) - math.pi)
            if turn > 1e-6:
                v = min(v, math.sqrt(ah * (cum[k + 1] - cum[k]) / turn))
        look = max(1.5, 0.5 * v)
        j = i
        while j + 1 < len(pts) and cum[j] - cum[i] < look:
            j += 1
        tn, te, ta = pts[j]
        short = look - (cum[j] - cum[i])
        if short > 0 and not nav["stop"]:  # a fast waypoint: on along the leaving direction
            dn, de = pts[-1][0] - pts[-2][0], pts[-1][1] - pts[-2][1]
            d = math.hypot(dn, de) or 1.0
            tn, te = tn + dn / d * short, te + de / d * short
        dn, de = tn - self.north, te - self.east
        d = math.hypot(dn, de)
        v = max(0.3, v) if d > 0.05 else 0.0
        _, _, wd = self._toward(self.north, self.east, ta, vh, ah, vup, vdn, az)
        return (dn / d * v, de / d * v, wd) if d > 0.05 else (0.0, 0.0, wd)

    def _circle_run(self, nav: dict, vh, ah, vup, vdn, az):
        cn, ce, calt = nav["centre"]
        if not nav.get("circling"):
            en, ee, ealt = nav["edge"]
            if math.hypot(en - self.north, ee - self.east) <= 0.5 and abs(ealt - self.alt) < 0.5:
                self._circle_start()
            else:
                return self._toward(en, ee, ealt, vh, ah, vup, vdn, az)
        r = nav["radius"]
        if r <= 0 or nav["turns"] <= 0:
            return None if nav["turns"] <= nav["done"] else self._toward(cn, ce, calt, vh, ah, vup, vdn, az)
        # AC_Circle: CIRCLE_RATE deg/s, no faster than the speed or the accel the radius allows
        rate = min(math.radians(abs(self.p.get("CIRCLE_RATE", 20))), vh / r, math.sqrt(0.5 * ah * r) / r)
        dt = max(0.0, self.t - nav.get("t", self.t))
        nav["t"] = self.t
        step = rate * dt
        nav["done"] += step / (2 * math.pi)
        nav["angle"] += -step if nav["ccw"] else step
        said = int(nav["done"])
        if said > nav["said"]:
            nav["said"] = said
            self.text(A.MAV_SEVERITY_INFO, f"Mission: starting circle {said + 1}/{int(nav['turns'])}")
        self.roi_yaw((cn, ce))
        if nav["done"] >= nav["turns"]:
            return None
        a = nav["angle"]
        tn, te = cn + r * math.cos(a), ce + r * math.sin(a)
        s = -1 if nav["ccw"] else 1
        speed = rate * r
        vn, ve = -math.sin(a) * speed * s, math.cos(a) * speed * s
        wn, we, wd = self._toward(tn, te, calt, vh, ah, vup, vdn, az)
        wn, we = vn + (tn - self.north), ve + (te - self.east)
        k = min(1.0, vh / max(1e-6, math.hypot(wn, we)))
        return wn * k, we * k, wd

    # ---- do and condition commands ---------------------------------------------------------

    def do_start(self, seq: int) -> None:
        it = self.mission[seq]
        c = it.command
        self.cond = {"seq": seq, "since": self.t}
        if c == C.MAV_CMD_DO_CHANGE_SPEED and it.params[1] > 0:
            kind, speed = int(it.params[0]), float(it.params[1])
            if kind == 2:
                self.speed_up_override = speed
            elif kind == 3:
                self.speed_dn_override = speed
            else:
                self.guided_speed = speed
        elif c in (C.MAV_CMD_DO_SET_ROI_LOCATION, C.MAV_CMD_DO_SET_ROI):
            self.roi = None if it.lat == 0 and it.lon == 0 else self.local(it.lat, it.lon)
            if self.roi is None:
                self.yaw_target = None
            self.fixed_yaw = None
        elif c == C.MAV_CMD_DO_SET_ROI_NONE:
            self.roi = None
            self.yaw_target = None
        elif c == C.MAV_CMD_CONDITION_YAW:  # a fixed yaw replaces an ROI
            self.roi = None
            self._condition_yaw(*it.params)
        elif c == C.MAV_CMD_DO_SET_HOME:
            if it.params[0] == 1 or (it.lat == 0 and it.lon == 0):
                self.set_home_here()
            else:
                self.home_n, self.home_e = self.local(it.lat, it.lon)
                self.home_up = self.alt_from(it.frame, it.alt)
                self.home_changed()

    def do_verify(self, seq: int) -> bool:
        """Whether the running do / condition command is done; MISSION_ITEM_REACHED is the
        caller's (Copter sends it for the commands it verifies itself)."""
        it = self.mission[seq]
        c = it.command
        cond = self.cond or {}
        if c == C.MAV_CMD_CONDITION_DELAY:
            return self.t - cond.get("since", self.t) > max(0.0, it.params[0])
        if c == C.MAV_CMD_CONDITION_DISTANCE:
            to = (self.nav or {}).get("to")
            return to is None or math.hypot(to[0] - self.north, to[1] - self.east) < it.params[0]
        if c == C.MAV_CMD_CONDITION_YAW:
            return self.fixed_yaw is None or abs(self.fixed_yaw[0]) <= YAW_DONE_DEG
        if c not in COPTER_DOS and c not in AP_MISSION_DOS and c != C.MAV_CMD_DO_JUMP:
            self.text(A.MAV_SEVERITY_WARNING, f"Skipping invalid cmd #{c}")
        return True

    def copter_verifies(self, c: int) -> bool:
        """Whether ArduCopter itself verifies command ``c`` (and so reports it reached)."""
        return c not in AP_MISSION_DOS

    # ---- yaw (AutoYaw: default, fixed, ROI) -------------------------------------------------

    def _condition_yaw(self, angle: float, rate: float, direction: float, relative: float) -> None:
        """Copter's set_fixed_yaw: the turn to make (signed degrees) and its rate."""
        if relative > 0:
            turn = angle if direction == 0 else angle * (1 if direction > 0 else -1)
        else:
            turn = wrap180(angle - self.heading)
            if direction < 0 and turn > 0:
                turn -= 360
            elif direction > 0 and turn < 0:
                turn += 360
        slew = self.p.get("ATC_SLEW_YAW", 6000) / 100
        self.fixed_yaw = [turn, min(slew, rate) if rate > 0 else slew]

    def roi_yaw(self, at: tuple[float, float]) -> None:
        """Turn towards ``at`` (north, east) at the yaw slew limit."""
        d = math.hypot(at[0] - self.north, at[1] - self.east)
        if d > 0.5:
            want = math.degrees(math.atan2(at[1] - self.east, at[0] - self.north))
            self._slew_to(wrap180(want - self.heading), self.p.get("ATC_SLEW_YAW", 6000) / 100)

    def _slew_to(self, turn: float, rate: float) -> float:
        dt = max(0.0, self.t - self.last_auto_t)
        step = max(-rate * dt, min(rate * dt, turn))
        self.yaw_target = (self.heading + step) % 360
        return step

    def auto_yaw(self) -> None:
        """Each AUTO step: a fixed yaw turns at its rate, an ROI is faced; else the default (the
        direction of travel, ``copter.py``)."""
        if self.fixed_yaw is not None:
            turn, rate = self.fixed_yaw
            self.fixed_yaw[0] = turn - self._slew_to(turn, rate)
        elif self.roi is not None:
            self.roi_yaw(self.roi)
        elif self.nav and "hold_yaw" in self.nav and not self.nav.get("circling"):
            self.yaw_target = self.nav["hold_yaw"]
        elif not (self.nav and self.nav.get("circling")):
            self.yaw_target = None
        self.last_auto_t = self.t
