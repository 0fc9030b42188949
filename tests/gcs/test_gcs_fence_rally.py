"""Fence and rally points through the mission protocol (MAV_MISSION_TYPE_FENCE and _RALLY), as
ground stations upload and download them (pymavlink, MISSION_ITEM_INT), on the built-in vehicle
and on real ArduCopter: what the vehicle asks for, its ACKs and texts, what it keeps of each
item (frame, parameters, position) and what it refuses, a refused or abandoned upload, the
limits, clearing. Each record must meet the expectations, and the built-in vehicle's must equal
ArduCopter's (measured on ArduCopter 4.7 SITL).

Not compared (it does not repeat): ArduCopter 4.7 sometimes announces 0 items after a fence of
circles only replaces a fence with polygons (the upload ACKed, "Fence Indexed OK"); the built-in
vehicle always keeps it. ``mission.upload`` says so in a warning when it happens."""

from __future__ import annotations

import math
import time

import pytest

from gcs_scenarios import (  # noqa: F401
    HOME,
    Autotest,
    arducopter_vehicle,
    assert_same,
    builtin_vehicle,
    cases,
    check,
    offset,
    records,
)

pytestmark = pytest.mark.xdist_group("gcs_fence_rally")  # one worker flies the module's vehicles

FENCE, RALLY = 1, 2
LAT, LON = HOME[0], HOME[1]
P = [offset(LAT, LON, n, e) for n, e in ((50, 50), (50, -50), (-50, -50), (-50, 50))]
TEXTS = ("Fence", "fence", "vertex", "radius", "lat or lon", "return point", "item count", "items are supported")
TEXTS += ("incorrect", "Rally", "MISSION_ITEM", "MISSION_REQUEST")


def poly(cmd: int, pts, frame: int = 0) -> list[tuple]:
    return [(frame, cmd, float(len(pts)), 0.0, 0.0, 0.0, a, b, 0.0) for a, b in pts]


FULL_FENCE = (
    poly(5001, P)
    + poly(5002, P[:3])
    + [
        (0, 5003, 120.5, 2.5, 3.5, 4.5, LAT, LON, 7.0),
        (0, 5004, 20.0, 0, 0, 0, *P[0], 0),
        (0, 5000, 0, 0, 0, 0, *P[1], 0),
    ]
)


class Lists(Autotest):
    """pymavlink on one vehicle, with the fence and rally lists' exchanges."""

    def drain(self) -> None:
        while self.m.recv_match(blocking=False) is not None:
            pass

    def texts(self) -> list[str]:
        self.recv("STATUSTEXT", 0.3)
        return [t for t in self.seen_texts if any(k in t for k in TEXTS)]

    def up(self, items: list[tuple], mtype: int, use_int: bool = True) -> tuple:
        """(what the vehicle asked with (type, mission_type), how many, its ACK (type, mission_type), texts)."""
        self.drain()
        self.seen_texts.clear()
        self.m.mav.mission_count_send(1, 1, len(items), mtype)
        asked, ack = [], None
        for _ in range(len(items) + 3):
            r = self.recv(("MISSION_REQUEST_INT", "MISSION_REQUEST", "MISSION_ACK"), 5)
            if r is None or r.get_type() == "MISSION_ACK":
                ack = r
                break
            asked.append((r.get_type(), r.mission_type))
            if r.seq >= len(items):
                break
            frame, cmd, p1, p2, p3, p4, lat, lon, z = items[r.seq]
            if use_int:
                self.m.mav.mission_item_int_send(
                    1,
                    1,
                    r.seq,
                    frame,
                    cmd,
                    0,
                    1,
                    p1,
                    p2,
                    p3,
                    p4,
                    int(round(lat * 1e7)),
                    int(round(lon * 1e7)),
                    z,
                    mtype,
                )
            else:
                self.m.mav.mission_item_send(1, 1, r.seq, frame, cmd, 0, 1, p1, p2, p3, p4, lat, lon, z, mtype)
        if ack is None:
            ack = self.recv("MISSION_ACK", 5)
        return (sorted(set(asked)), len(asked), None if ack is None else (ack.type, ack.mission_type), self.texts())

    def down(self, mtype: int, use_int: bool = True) -> list | None:
        """Each item as the vehicle sends it back (positions in metres from home, to 0.1 m; or the
        single-precision degrees of a MISSION_ITEM)."""
        self.drain()
        self.m.mav.mission_request_list_send(1, 1, mtype)
        c = self.recv("MISSION_COUNT", 5, lambda m: m.mission_type == mtype)
        if c is None:
            return None
        out: list = []
        for s in range(c.count):
            (self.m.mav.mission_request_int_send if use_int else self.m.mav.mission_request_send)(1, 1, s, mtype)
            it = self.recv(("MISSION_ITEM_INT", "MISSION_ITEM", "MISSION_ACK"), 5)
            if it is None or it.get_type() == "MISSION_ACK":
                out.append(None if it is None else ("ack", it.type))
                continue
            if use_int:
                where = (round((it.x / 1e7 - LAT) * 111319.5, 1), round((it.y / 1e7 - LON) * 90751.0, 1), it.x, it.y)
            else:
                where = (it.x, it.y)
            out.append((it.get_type(), it.seq, it.frame, it.command, it.current, it.autocontinue, it.param1, it.param2,
                        it.param3, it.param4, *where, round(it.z, 3), it.mission_type))  # fmt: skip
        if c.count:
            self.m.mav.mission_ack_send(1, 1, 0, mtype)
        return out

    def count(self, mtype: int) -> int | None:
        got = self.down(mtype)
        return None if got is None else len(got)

    def clear(self, mtype: int) -> tuple | None:
        self.drain()
        self.seen_texts.clear()
        self.m.mav.mission_clear_all_send(1, 1, mtype)
        a = self.recv("MISSION_ACK", 5)
        return None if a is None else (a.type, a.mission_type, tuple(self.texts()))

    def abandoned(self, first: tuple, count: int, mtype: int) -> tuple:
        """An upload of ``count`` items that stops after the first: how the vehicle asks again, and ends it."""
        self.drain()
        self.seen_texts.clear()
        self.m.mav.mission_count_send(1, 1, count, mtype)
        self.recv(("MISSION_REQUEST", "MISSION_REQUEST_INT"), 5)
        frame, cmd, p1, p2, p3, p4, lat, lon, z = first
        self.m.mav.mission_item_int_send(
            1, 1, 0, frame, cmd, 0, 1, p1, p2, p3, p4, int(round(lat * 1e7)), int(round(lon * 1e7)), z, mtype
        )
        again, end = 0, None
        deadline = time.monotonic() + self.wall(12)
        while time.monotonic() < deadline:
            m = self.recv(("MISSION_REQUEST", "MISSION_ACK"), 2)
            if m is None:
                continue
            if m.get_type() == "MISSION_ACK":
                end = (m.type, m.mission_type)
                break
            again += m.seq == 1 and m.mission_type == mtype
        return (again >= 4, end, tuple(self.texts()))


def lists(v) -> Lists:
    g = Lists(v.serial0, v.speedup)
    g.streams()
    g.clear(FENCE)
    g.clear(RALLY)
    return g


def s_fence(v) -> dict:
    g = lists(v)
    rec: dict = {}
    try:
        rec["upload"] = g.up(FULL_FENCE, FENCE)
        rec["download"] = g.down(FENCE)
        rec["download_float"] = g.down(FENCE, use_int=False)
        rec["mission_count_after_fence"] = g.count(0)
        for frame in (0, 1, 2, 3, 4, 5, 6, 10, 11):
            rec[f"frame_{frame}"] = g.up(poly(5001, P[:3], frame), FENCE)[2]
        g.up(FULL_FENCE, FENCE)
        bad = {
            "vertex_count_changes": poly(5001, P[:3])[:2] + [(0, 5001, 4.0, 0, 0, 0, *P[2], 0)],
            "two_vertices": poly(5001, P[:2]),
            "polygon_short": [(0, 5001, 4.0, 0, 0, 0, a, b, 0) for a, b in P[:3]],
            "polygon_kinds_mixed": [
                (0, 5001, 3.0, 0, 0, 0, *P[0], 0),
                (0, 5002, 3.0, 0, 0, 0, *P[1], 0),
                (0, 5001, 3.0, 0, 0, 0, *P[2], 0),
            ],  # fmt: skip
            "waypoint_in_fence": [(0, 16, 0, 0, 0, 0, LAT, LON, 10)],
            "circle_radius_0": [(0, 5003, 0.0, 0, 0, 0, LAT, LON, 0)],
            "circle_radius_negative": [(0, 5003, -5.0, 0, 0, 0, LAT, LON, 0)],
            "latitude_95": [(0, 5003, 10.0, 0, 0, 0, 95.0, LON, 0)],
            "two_return_points": [(0, 5000, 0, 0, 0, 0, *P[0], 0), (0, 5000, 0, 0, 0, 0, *P[1], 0)],
        }
        for name, items in bad.items():
            rec[name] = g.up(items, FENCE)
        rec["kept_after_refusals"] = g.count(FENCE)
        rec["float_upload"] = g.up(poly(5001, P), FENCE, use_int=False)
        rec["float_upload_stored"] = g.down(FENCE)
        rec["count_71"] = g.up([(0, 5003, 10.0, 0, 0, 0, LAT, LON, 0)] * 71, FENCE)
        ring = [offset(LAT, LON, 100 * math.cos(i / 10), 100 * math.sin(i / 10)) for i in range(70)]
        for n in (68, 69, 70):  # ArduCopter's fence storage: 560 bytes, a polygon 2 + 8 per vertex
            rec[f"polygon_{n}"] = g.up(poly(5001, ring[:n]), FENCE)[2:]
        for n in (42, 43):  # a circle 13 bytes
            rec[f"circles_{n}"] = g.up([(0, 5003, 10.0 + i, 0, 0, 0, LAT, LON, 0) for i in range(n)], FENCE)[2:]
        rec["count_after_storage"] = g.count(FENCE)
        rec["abandoned"] = g.abandoned(poly(5002, P[:3])[0], 3, FENCE)
        rec["count_after_abandoned"] = g.count(FENCE)
        g.drain()
        g.m.mav.mission_item_int_send(1, 1, 0, 0, 5003, 0, 1, 10, 0, 0, 0, int(LAT * 1e7), int(LON * 1e7), 0, FENCE)
        a = g.recv("MISSION_ACK", 3)
        rec["item_without_count"] = None if a is None else (a.type, a.mission_type)
        g.drain()
        g.m.mav.mission_request_int_send(1, 1, 99, FENCE)
        a = g.recv("MISSION_ACK", 3)
        rec["request_beyond"] = None if a is None else (a.type, a.mission_type)
        rec["clear"] = g.clear(FENCE)
        rec["count_after_clear"] = g.count(FENCE)
        rec["count_0"] = g.up([], FENCE)
        for what, send in (
            ("list", lambda: g.m.mav.mission_request_list_send(1, 1, 99)),
            ("clear", lambda: g.m.mav.mission_clear_all_send(1, 1, 99)),
            ("count", lambda: g.m.mav.mission_count_send(1, 1, 2, 99)),
        ):
            g.drain()
            send()
            a = g.recv("MISSION_ACK", 3)
            rec[f"type_99_{what}"] = None if a is None else (a.type, a.mission_type)
        return rec
    finally:
        g.close()


def s_rally(v) -> dict:
    g = lists(v)
    rec: dict = {}
    try:
        pts = [
            (0, 5100, 0, 0, 0, 0, *P[0], 25.7),
            (3, 5100, 1.5, 2.5, 3.5, 4.5, *P[1], 30.2),
            (6, 5100, 0, 0, 0, 0, *P[2], 15),
        ]
        rec["upload"] = g.up(pts, RALLY)
        rec["download"] = g.down(RALLY)
        rec["download_float"] = g.down(RALLY, use_int=False)
        for frame in (1, 2, 5, 10, 11):
            rec[f"frame_{frame}"] = (
                g.up([(frame, 5100, 0, 0, 0, 0, *P[0], 20)], RALLY)[2],
                (g.down(RALLY) or [None])[0],
            )
        bad = {
            "waypoint_in_rally": [(3, 16, 0, 0, 0, 0, *P[0], 20)],
            "latitude_95": [(3, 5100, 0, 0, 0, 0, 95.0, LON, 20)],
            "longitude_185": [(3, 5100, 0, 0, 0, 0, LAT, 185.0, 20)],
            "altitude_32767.5": [(3, 5100, 0, 0, 0, 0, LAT, LON, 32767.5)],
            "altitude_-32768.5": [(3, 5100, 0, 0, 0, 0, LAT, LON, -32768.5)],
        }
        for name, items in bad.items():
            rec[name] = g.up(items, RALLY)[2]
        rec["altitude_negative"] = (g.up([(3, 5100, 0, 0, 0, 0, LAT, LON, -20.9)], RALLY)[2], g.down(RALLY))
        three = [(3, 5100, 0, 0, 0, 0, *P[i], 20 + i) for i in range(3)]
        g.up(three, RALLY)
        rec["refused_at_1"] = g.up([three[0][:8] + (50,), (3, 16, 0, 0, 0, 0, *P[3], 20), three[2]], RALLY)[1:3]
        rec["after_refused_at_1"] = g.down(RALLY)
        g.up(three, RALLY)
        rec["count_2_refused_at_0"] = g.up([(3, 16, 0, 0, 0, 0, *P[3], 20), three[2]], RALLY)[1:3]
        rec["after_count_2_refused"] = g.down(RALLY)
        rec["float_upload"] = g.up(three, RALLY, use_int=False)
        rec["float_upload_stored"] = g.down(RALLY)
        rec["count_47"] = g.up([(3, 5100, 0, 0, 0, 0, LAT, LON, 20)] * 47, RALLY)
        rec["count_after_47"] = g.count(RALLY)
        rec["abandoned"] = g.abandoned((3, 5100, 0, 0, 0, 0, *P[3], 99), 2, RALLY)
        rec["after_abandoned"] = g.down(RALLY)
        g.drain()
        g.m.mav.mission_request_int_send(1, 1, 99, RALLY)
        a = g.recv("MISSION_ACK", 3)
        rec["request_beyond"] = None if a is None else (a.type, a.mission_type)
        rec["clear"] = g.clear(RALLY)
        rec["count_after_clear"] = g.count(RALLY)
        rec["count_0"] = g.up([], RALLY)
        rec["mission_count_after_rally"] = g.count(0)
        return rec
    finally:
        g.close()


SCENARIOS = {"fence": s_fence, "rally": s_rally}

ACK_OK_FENCE, ACK_OK_RALLY = (0, FENCE), (0, RALLY)
EXPECT = {
    "fence": {
        "upload": ([("MISSION_REQUEST", FENCE)], 10, ACK_OK_FENCE, ["Fence Indexed OK"]),
        "frame_1": (2, FENCE),
        "frame_3": ACK_OK_FENCE,
        "frame_11": ACK_OK_FENCE,
        "vertex_count_changes": lambda r: r[2] == (1, FENCE) and r[3] == ["Unexpected vertex count want=3 got=4"],
        "two_vertices": lambda r: r[2] == (1, FENCE) and r[3] == ["Invalid vertex count (2)"],
        "polygon_short": lambda r: r[3] == ["Incorrect item count"],
        "waypoint_in_fence": lambda r: r[2] == (3, FENCE),
        "circle_radius_0": lambda r: r[3] == ["Non-positive circle radius"],
        "two_return_points": lambda r: r[3] == ["Multiple return points"],
        "kept_after_refusals": 10,
        "count_71": ([], 0, (4, FENCE), ["Only 70 items are supported"]),
        "polygon_68": (ACK_OK_FENCE, ["Fence Indexed OK"]),
        "polygon_70": ((1, FENCE), ["Fence exceeds storage size"]),
        "abandoned": (True, (15, FENCE), ("Fence upload timeout",)),
        "request_beyond": (13, FENCE),
        "clear": (0, FENCE, ("Fence Indexed OK",)),
        "count_after_clear": 0,
        "type_99_list": (3, 99),
    },
    "rally": {
        "upload": ([("MISSION_REQUEST", RALLY)], 3, ACK_OK_RALLY, []),
        "waypoint_in_rally": (3, RALLY),
        "latitude_95": (10, RALLY),
        "longitude_185": (11, RALLY),
        "altitude_32767.5": (12, RALLY),
        "count_47": ([], 0, (4, RALLY), ["Only 46 items are supported"]),
        "count_after_47": 3,
        "abandoned": (True, (15, RALLY), ("Rally upload timeout",)),
        "request_beyond": (13, RALLY),
        "count_after_clear": 0,
    },
}
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("group,kind", cases(["fence", "rally"], {}))
def test_expectations(group, kind, records):
    rec = records.get(group, kind)
    bad = check(rec, EXPECT[group])
    assert not bad, f"{group} on {kind}:\n" + "\n".join(bad)


@pytest.mark.parametrize("group,kind", cases(SCENARIOS, KNOWN, kinds=("diff",)))
def test_builtin_answers_as_arducopter(group, kind, records):
    assert_same("pymavlink", group, records, {})
