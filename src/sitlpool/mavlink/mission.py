"""Missions over the session's one link: the MAVLink mission protocol (upload, download,
clear), each exchange bounded in time and messages, an upload all or nothing; start (AUTO;
on Copter arm + MISSION_START, as ArduPilot's autotest does); progress read from the flight
recorder. The plain records and their checks are ``mission_items``'s.

Item numbers are ArduPilot's sequence numbers: item 0 is home (the vehicle keeps it), the
first record uploaded is item 1. Altitudes are metres above home unless ``"frame": "amsl"``.
"""

from __future__ import annotations

import time
import weakref

from ..errors import ConfigError, MavlinkError
from . import missionfiles
from .exchange import Inbox, to_us
from .link import A
from .mission_items import (  # noqa: F401  (re-exported: the records are part of this module's API)
    AMSL_FRAMES,
    COMMANDS,
    FRAMES,
    MAX_ITEMS,
    NAMES,
    RELATIVE_FRAMES,
    check_items,
    file_item_message,
    file_item_of,
    home_message,
    item_message,
    record_of,
    resend_message,
    what_to_send,
)
from .recorder import recorder_for
from .wire import show

STEP_TIMEOUT_S = 5.0  # per protocol step; ArduPilot answers in milliseconds
# every exchange is bounded in total time and in messages, whatever the vehicle does: the
# previous mission read + the upload + putting the previous one back stay below the 60 s
# that no tool may block for
DOWNLOAD_TIMEOUT_S = 15.0
UPLOAD_TIMEOUT_S = 25.0
RESTORE_TIMEOUT_S = 15.0
MAX_DOWNLOAD_ITEMS = 10_000  # ArduPilot on an SD card stores a few thousand; 65,535 announced is not a mission

MISSION_RESULTS = {e: v.name.replace("MAV_MISSION_", "").lower() for e, v in A.enums["MAV_MISSION_RESULT"].items()}
MISSION, FENCE, RALLY = A.MAV_MISSION_TYPE_MISSION, A.MAV_MISSION_TYPE_FENCE, A.MAV_MISSION_TYPE_RALLY
LISTS = {MISSION: "mission", FENCE: "fence", RALLY: "rally points"}
LANDING = ("land", "rtl")


# ---- the protocol -------------------------------------------------------------------------


def _target(link) -> tuple[int, int]:
    return link.vehicle.sysid or 1, 1


def _refused(link, what: str, result: int) -> MavlinkError:
    return MavlinkError(f"{what} refused by the vehicle: {MISSION_RESULTS.get(result, result)}")


BOOT_WAIT_S = 15.0


def _after_boot(link) -> None:
    # ArduPilot answers a mission exchange during its boot (HEARTBEAT system_status BOOT, the
    # first ~0.5 s after its first client) before its mission store exists: MAV_MISSION_NO_SPACE
    if link.vehicle.booting:
        link.wait(lambda v: not v.booting, BOOT_WAIT_S)


def _pack_all(link, msgs) -> None:
    """Every message of an upload packs (each value fits its field) before the first is sent."""
    mav = A.MAVLink(None, link.source_system, A.MAV_COMP_ID_MISSIONPLANNER)
    for m in msgs:
        try:
            m.pack(mav)
        except Exception as e:  # struct.error, OverflowError: a value its MAVLink field cannot carry
            raise ConfigError(f"mission item {m.seq}: a value does not fit its MAVLink field ({e})") from None


def upload(link, items=None, *, waypoints=None, plan=None, fence=None, rally=None) -> dict:
    """Check everything, then upload: the mission (``items`` records, a ``.waypoints`` text or a
    ``.plan`` text) as items 1..N (item 0: home, which the vehicle keeps), and the fence and
    rally points (``fence``/``rally``, or the plan's geoFence and rallyPoints). All or nothing:
    every item is checked (and every message packed) before the first is sent, and each list
    the upload replaces is read first, so that an upload failing midway (ArduPilot replaces its
    mission item by item as they arrive) puts every list back as it was, and says so."""
    todo = what_to_send(items, waypoints, plan, fence, rally)
    link.require_writable("upload a mission")
    _after_boot(link)
    rec = recorder_for(link)
    msgs: dict[int, list] = {}
    records = None
    if "records" in todo:
        records = todo["records"]
        msgs[MISSION] = [home_message(link)] + [item_message(link, i, it) for i, it in enumerate(records, start=1)]
    elif "mission" in todo:
        its = todo["mission"]
        msgs[MISSION] = [home_message(link)] + [file_item_message(link, i, it, MISSION) for i, it in enumerate(its, 1)]
        records = [record_of(m) for m in msgs[MISSION][1:]]
    for mtype, key in ((FENCE, "fence"), (RALLY, "rally")):
        if key in todo:
            msgs[mtype] = [file_item_message(link, i, it, mtype) for i, it in enumerate(todo[key])]
    for ms in msgs.values():
        _pack_all(link, ms)
    with rec.lock:
        previous: dict[int, tuple[list | None, str]] = {}
        for mtype in msgs:
            try:
                previous[mtype] = (_download_raw(link, time.monotonic() + DOWNLOAD_TIMEOUT_S, mtype), "")
            except MavlinkError as e:
                previous[mtype] = (None, str(e))
        tried: list[int] = []
        held = None
        try:
            for mtype, ms in msgs.items():
                tried.append(mtype)
                n = len(ms) - 1 if mtype == MISSION else len(ms)
                if n == 0:
                    _clear_raw(link, time.monotonic() + DOWNLOAD_TIMEOUT_S, mtype)
                else:
                    what = f"the {LISTS[mtype]} upload ({n} items)"
                    _upload_raw(link, ms, what, time.monotonic() + UPLOAD_TIMEOUT_S, mtype)
                if mtype == FENCE:
                    held = _fence_indexed(link, n, time.monotonic() + FENCE_INDEX_S)
        except MavlinkError as e:
            backs = [_put_back(link, *previous[m], m) for m in reversed(tried)]
            if MISSION in tried and not backs[tried[::-1].index(MISSION)].startswith("the vehicle's previous"):
                rec.mission = None  # unknown now: read again before a start
            raise MavlinkError(f"{e}; " + "; ".join(backs)) from None
    if "style" in todo:
        _STYLES[link] = {**_STYLES.get(link, {}), **todo["style"]}
    out: dict = {}
    if records is not None:
        rec.mission = records
        rec.reset_progress(total=len(records))
        out = {"uploaded": len(records), "items": records}
    if FENCE in msgs:
        out["fence_items"] = len(msgs[FENCE])
        if held is not None and held != len(msgs[FENCE]):
            out["warning"] = (
                f"the vehicle accepted the fence ({len(msgs[FENCE])} items) but now announces {held}: "
                "ArduCopter 4.7 does so for a fence of circles only replacing another; upload it again"
            )
    if RALLY in msgs:
        out["rally_points"] = len(msgs[RALLY])
    return out


_STYLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # link -> how its last file was written


FENCE_INDEX_S = 3.0


def _fence_indexed(link, n: int, deadline: float) -> int | None:
    """ArduPilot indexes its fence storage again after an upload is ACKed ("Fence Indexed OK"):
    until then it announces the old count, or none, and refuses items (INVALID_SEQUENCE). Waits
    (bounded) until it announces the ``n`` items sent; the count it announces last."""
    target = _target(link)
    while True:
        with Inbox(link, {"MISSION_COUNT"}, to_us(link)) as box:
            link.send(A.MAVLink_mission_request_list_message(*target, FENCE))
            try:
                got = _wait_for(box, link, "MISSION_COUNT", "the fence count", deadline, FENCE).count
            except MavlinkError:
                return None  # the download says what it says
            if got:
                link.send(A.MAVLink_mission_ack_message(*target, A.MAV_MISSION_ACCEPTED, FENCE))  # (not downloading)
        if got == n or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def _upload_raw(link, msgs: list, what: str, deadline: float, mtype: int = MISSION) -> None:
    """MISSION_COUNT, then each item the vehicle asks for, until its MISSION_ACK. Bounded: by
    ``deadline``, and by the requests (a vehicle asking for item 0 again and again is stopped)."""
    with Inbox(link, {"MISSION_REQUEST", "MISSION_REQUEST_INT", "MISSION_ACK"}, to_us(link)) as box:
        link.send(A.MAVLink_mission_count_message(*_target(link), len(msgs), mtype))
        sent: set[int] = set()
        requests, most = 0, 3 * len(msgs) + 10  # lost messages are asked for again, a few times
        while True:
            m = _next(box, link, what, deadline, mtype)
            if m.get_type() == "MISSION_ACK":
                if m.type != A.MAV_MISSION_ACCEPTED:
                    bad = max(sent) if sent else None
                    where = f" (after item {bad})" if bad else ""
                    raise _refused(link, what + where, m.type)
                if len(sent) < len(msgs):
                    continue  # an ACK of an earlier exchange
                return
            if not 0 <= m.seq < len(msgs):
                raise MavlinkError(f"{what}: the vehicle asked for item {m.seq} of {len(msgs)}; upload again")
            requests += 1
            if requests > most:
                raise MavlinkError(
                    f"{what}: the vehicle asked for items {requests} times for {len(msgs)} items "
                    f"(item {m.seq} again); stopped, it is not taking the mission"
                )
            link.send(msgs[m.seq])
            sent.add(m.seq)


def _put_back(link, previous: list | None, unread: str, mtype: int = MISSION) -> str:
    """After a failed upload: upload ``previous`` (raw items, home first for the mission) again;
    says how it went."""
    name = LISTS[mtype]
    if previous is None:
        return (
            f"the vehicle's previous {name} could not be read first ({unread}), so it was not put back: "
            f"its {name} may now be partial; upload again or clear_mission"
        )
    deadline = time.monotonic() + RESTORE_TIMEOUT_S
    try:
        if not previous:
            _clear_raw(link, deadline, mtype)
        else:
            msgs = [resend_message(link, m) for m in previous]
            _upload_raw(link, msgs, f"putting the previous {name} back", deadline, mtype)
    except MavlinkError as e:
        return f"putting the previous {name} back failed too ({e}): the vehicle's {name} may be partial"
    n = max(0, len(previous) - 1) if mtype == MISSION else len(previous)
    return f"the vehicle's previous {name} ({n} items) was put back"


FORMATS = ("items", "waypoints", "plan")


def download(link, format: str = "items", fence: bool = False, rally: bool = False, style: dict | None = None) -> dict:
    """The vehicle's mission as plain records (item 1 first) and its home (item 0); or as the
    text of a ``.waypoints`` file (``format="waypoints"``, written as the last uploaded file
    was: Mission Planner's style unless it was MAVProxy's) or of a ``.plan`` (``"plan"``: with
    the fence and rally points). ``fence``/``rally``: the records also carry those lists.
    ``style``: how to write the file, over the last upload's (e.g. a file read in another process)."""
    if format not in FORMATS:
        raise ConfigError(f"format {show(format)} is not one of {', '.join(FORMATS)}")
    if link.state != "connected":
        raise MavlinkError(f"{link.name}: vehicle not connected ({link.state})")
    _after_boot(link)
    rec = recorder_for(link)
    with rec.lock:
        got = _download_raw(link, time.monotonic() + DOWNLOAD_TIMEOUT_S)
        fence_raw = (
            _download_raw(link, time.monotonic() + DOWNLOAD_TIMEOUT_S, FENCE) if fence or format == "plan" else None
        )
        rally_raw = (
            _download_raw(link, time.monotonic() + DOWNLOAD_TIMEOUT_S, RALLY) if rally or format == "plan" else None
        )
    items = [record_of(m) for m in got[1:]]
    home = None
    if got:
        h = got[0]
        scale = 1e7 if h.get_type() == "MISSION_ITEM_INT" else 1.0
        home = {"lat": h.x / scale, "lon": h.y / scale, "alt_m": h.z}
    rec.mission = items
    if rec.progress.total is None:
        rec.progress.total = len(items)
    if format == "items":
        out: dict = {"count": len(items), "items": items, "home": home}
        if fence_raw is not None:
            out["fence"] = missionfiles.fence_shapes([file_item_of(m) for m in fence_raw])
        if rally_raw is not None:
            out["rally"] = missionfiles.rally_points([file_item_of(m) for m in rally_raw])
        return out
    home_item = file_item_of(got[0]) if got else None
    its = [file_item_of(m) for m in got[1:]]
    style = {**_STYLES.get(link, {}), **(style or {})}
    if format == "waypoints":
        text = missionfiles.write_waypoints(home_item, its, style.get("wpl", "missionplanner"), style.get("newline"))
        return {"format": "waypoints", "count": len(items), "home": home, "text": text}
    fl = [file_item_of(m) for m in fence_raw or []]
    rl = [file_item_of(m) for m in rally_raw or []]
    text = missionfiles.write_plan(home_item, its, fl, rl, style)
    return {
        "format": "plan",
        "count": len(items),
        "fence_items": len(fl),
        "rally_points": len(rl),
        "home": home,
        "text": text,
    }


def _download_raw(link, deadline: float, mtype: int = MISSION) -> list:
    """Every item of the vehicle's mission (home first), fence or rally points as it sent
    them. Bounded: by ``deadline``, by MAX_DOWNLOAD_ITEMS, and by the stray items a vehicle may send."""
    target = _target(link)
    what = f"the {LISTS[mtype]} download"
    wanted = {"MISSION_COUNT", "MISSION_ITEM_INT", "MISSION_ITEM", "MISSION_ACK"}
    with Inbox(link, wanted, to_us(link)) as box:
        link.send(A.MAVLink_mission_request_list_message(*target, mtype))
        count = _wait_for(box, link, "MISSION_COUNT", what, deadline, mtype).count
        if count > MAX_DOWNLOAD_ITEMS:
            raise MavlinkError(
                f"{what}: the vehicle announces {count:,} items; sitlpool reads missions of at most "
                f"{MAX_DOWNLOAD_ITEMS:,} (is it a vehicle?)"
            )
        got: dict[int, object] = {}
        for seq in range(count):
            link.send(A.MAVLink_mission_request_int_message(*target, seq, mtype))
            stray = 0
            while seq not in got:
                m = _wait_for(box, link, ("MISSION_ITEM_INT", "MISSION_ITEM"), f"{what} (item {seq})", deadline, mtype)
                if m.seq == seq:
                    got[seq] = m
                    continue
                stray += 1
                if stray > 10:
                    raise MavlinkError(f"{what}: asked for item {seq}, the vehicle keeps sending item {m.seq}")
        if count:
            link.send(A.MAVLink_mission_ack_message(*target, A.MAV_MISSION_ACCEPTED, mtype))
    return [got[s] for s in range(count)]


def _next(box: Inbox, link, what: str, deadline: float, mtype: int = MISSION):
    """The next message of this exchange about list ``mtype`` (the mission, fence or rally
    points: not the other two), waiting at most one step and never past ``deadline``."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise MavlinkError(f"{link.name}: {what} did not finish in time; is the vehicle still there?")
        m = box.get(min(STEP_TIMEOUT_S, left))
        if m is None:
            if deadline - time.monotonic() <= 0:
                continue  # says "did not finish in time"
            raise MavlinkError(
                f"{link.name}: no answer to {what} within {STEP_TIMEOUT_S:g}s; is the vehicle still there?"
            )
        if getattr(m, "mission_type", 0) == mtype:
            return m


def _wait_for(box: Inbox, link, types, what: str, deadline: float, mtype: int = MISSION):
    types = (types,) if isinstance(types, str) else types
    while True:
        m = _next(box, link, what, deadline, mtype)
        if m.get_type() == "MISSION_ACK" and "MISSION_ACK" not in types:
            if m.type != A.MAV_MISSION_ACCEPTED:
                raise _refused(link, what, m.type)
            continue
        if m.get_type() in types:
            return m


def clear(link) -> dict:
    link.require_writable("clear the mission")
    _after_boot(link)
    rec = recorder_for(link)
    with rec.lock:
        _clear_raw(link, time.monotonic() + DOWNLOAD_TIMEOUT_S)
    rec.mission = []
    rec.reset_progress(total=0)
    return {"cleared": True}


def _clear_raw(link, deadline: float, mtype: int = MISSION) -> None:
    what = f"clear {LISTS[mtype]}"
    with Inbox(link, {"MISSION_ACK"}, to_us(link)) as box:
        link.send(A.MAVLink_mission_clear_all_message(*_target(link), mtype))
        m = _wait_for(box, link, "MISSION_ACK", what, deadline, mtype)
        if m.type != A.MAV_MISSION_ACCEPTED:
            raise _refused(link, what, m.type)


def set_current(link, item: int, timeout: float = 3.0) -> None:
    link.require_writable(f"set the current mission item to {item}")
    link.send(A.MAVLink_mission_set_current_message(*_target(link), item))
    rec = recorder_for(link)
    # ArduPilot answers with MISSION_CURRENT; an old one may still be in flight, so wait for the new seq
    link.wait(lambda _v: rec.progress.current == item, timeout)


def start(link, item: int | None = None, ready=None) -> dict:
    """Run the mission in AUTO from item 1 (or ``item``). On the ground: GUIDED, arm, then
    MISSION_START (ArduCopter will not arm in AUTO, and AUTO entered armed on the ground waits
    for throttle); a vehicle that does not know MISSION_START is switched to AUTO.
    ``ready()`` -> (ok, reasons) is asked before arming: ArduCopter accepts an arm in GUIDED
    before its EKF flies on GPS, then refuses AUTO ("requires position"). If the start is
    refused after we armed, we disarm again: a refused start leaves the vehicle as it was."""
    link.require_writable("start the mission")
    rec = recorder_for(link)
    total = rec.progress.total
    if rec.mission is None or total is None or len(rec.mission) != total:
        total = download(link)["count"]  # someone else's mission, or changed by another GCS: know its items
    if total == 0:
        raise MavlinkError(f"{link.name}: the vehicle has no mission; upload_mission first")
    first = 1 if item is None else item
    if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= total:
        raise ConfigError(f"start item {item!r} is not an item of this mission: use 1..{total}")
    v = link.vehicle
    armed_here = False
    if not v.armed and ready is not None:
        ok, why = ready()
        if not ok:
            raise MavlinkError(
                f"the mission cannot start yet: the vehicle is not ready to arm ({'; '.join(why)}); "
                "wait_until(condition='ready_to_arm') waits for it"
            )
    set_current(link, first)
    try:
        if not v.armed:
            if v.mode not in ("GUIDED", "LOITER", "STABILIZE", "ALT_HOLD", "POSHOLD"):
                link.set_mode("GUIDED")  # armable, and never flies off on its own
            link.arm()
            armed_here = True
        try:
            link.command(A.MAV_CMD_MISSION_START, 0, 0, what="mission start")
        except MavlinkError as e:
            if "unsupported" not in str(e):
                raise
            link.set_mode("AUTO")
    except MavlinkError:
        if armed_here and v.rel_alt is not None and v.rel_alt < 1:
            try:
                link.disarm()
            except MavlinkError:
                pass  # it disarms itself after DISARM_DELAY anyway
        raise
    rec.reset_progress(total=total)
    link.wait(lambda v: v.mode == "AUTO" and v.armed, 3.0)
    return {"started_at_item": first, "total_items": total, "mode": link.vehicle.mode, "armed": link.vehicle.armed}


# ---- progress -------------------------------------------------------------------------


def finished(link) -> bool:
    """The mission ran to its end since it was started: the vehicle said COMPLETE, reported
    the last item reached, or disarmed after it got to its last item when that is a land or
    RTL (ArduCopter lands, disarms and goes back to item 1 without a word)."""
    rec = recorder_for(link)
    p = rec.progress
    total = p.total or 0
    if not total:
        return False
    if p.complete_seen or total in p.reached:
        return True
    last = rec.mission[-1].get("command") if rec.mission and len(rec.mission) == total else None
    return last in LANDING and p.highest >= total and p.disarmed_after_armed and not link.vehicle.armed


def reached_items(link) -> list[int]:
    """Items reached or passed since the start. Missions of our records run in order, so every
    item before the current one is done: ArduPilot reports MISSION_ITEM_REACHED for navigation
    items only, and a report can be overwritten by the next one before it is sent."""
    p = recorder_for(link).progress
    if finished(link):
        return list(range(1, (p.total or 0) + 1))
    done = set(p.reached) | set(range(1, p.highest))
    if p.reached:
        done |= set(range(1, max(p.reached)))
    return sorted(done)


def item_reached(link, n: int) -> bool:
    return n in reached_items(link)


def status(link) -> dict:
    rec = recorder_for(link)
    p = rec.progress
    states = A.enums["MISSION_STATE"]
    return {
        "current_item": p.current,
        "total_items": p.total,
        "items_reached": reached_items(link),
        "finished": finished(link),
        "mission_state": states[p.state].name.replace("MISSION_STATE_", "").lower() if p.state in states else None,
        "mode": link.vehicle.mode,
        "armed": link.vehicle.armed,
    }


def predicate(link, condition: str, value):
    """``wait_until``'s mission conditions as ``pred(vehicle, t0)``: ``mission_item`` (value:
    the item number N, reached or passed since the start) and ``mission_done``."""
    recorder_for(link)  # attach now, so nothing after this call is missed
    if condition == "mission_done":
        return lambda v, t0: finished(link)
    if condition == "mission_item":
        try:
            n = int(value)
            if n != float(value) or not 1 <= n <= MAX_DOWNLOAD_ITEMS:
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(
                f"condition mission_item needs the item number (1 = first item) as value, got {show(value)}"
            ) from None
        return lambda v, t0: item_reached(link, n)
    raise ConfigError(f"unknown mission condition {condition!r}; use mission_item or mission_done")


__all__ = [
    "check_items",
    "upload",
    "download",
    "clear",
    "start",
    "status",
    "finished",
    "item_reached",
    "reached_items",
    "predicate",
]
