"""The agent's toolkit (MCP tools): missions, RC override, parameters in bulk, and a picture
of the flight. Every tool works through the session's one link (``session.link``); the
MAVLink and drawing code is imported when a tool is first called, so ``sitlpool serve``
answers ``initialize`` as fast as without them. ``server.build`` calls ``register``."""

from __future__ import annotations

import json

from mcp.server.mcpserver.utilities.types import Image  # already loaded by the SDK
from mcp_types import TextContent, ToolAnnotations

from .errors import SessionError

RO = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
ACT = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
IDEM = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)


def session_link(sessions, session_id: str):
    """The session's link, with its recorder attached; refused for a session without one."""
    from .mavlink.recorder import recorder_for

    s = sessions.get(session_id)
    if s.link is None:
        raise SessionError(f"session {session_id} has no link to its vehicle ({s.state}); open a new one")
    recorder_for(s.link)
    return s.link


def _live_link(sessions, session_id: str):
    s = sessions.get(session_id)
    if s.handle.dead or s.link is None:
        raise SessionError(f"session {session_id} is {s.state}; open a new one")
    return session_link(sessions, session_id)


def picture_png(sessions, session_id: str, last_s: float | None = None) -> tuple[bytes, dict]:
    from . import picture
    from .mavlink.recorder import recorder_for

    if last_s is not None and not last_s > 0:
        raise SessionError(f"last_s {last_s!r} must be a number of seconds above 0 (or left out: the whole flight)")
    s = sessions.get(session_id)
    link = session_link(sessions, session_id)
    rec = recorder_for(link)
    title = f"session {s.id} ({s.label}), instance {s.handle.instance}"
    png = picture.of_recorder(rec, last_s, title)
    pts = rec.points(last_s)
    summary = {
        "session_id": s.id,
        "positions": len(pts),
        "seconds": round(pts[-1][0] - pts[0][0], 1) if pts else 0.0,
        "max_relative_alt_m": round(max(p[3] for p in pts), 2) if pts else None,
        "mission_waypoints": len([it for it in rec.mission or [] if "lat" in it]),
        "png_bytes": len(png),
    }
    return png, summary


def register(mcp, sessions, call) -> None:
    """Add the toolkit's tools to ``mcp``; ``call(fn, *a)`` runs ``fn`` in a worker thread and
    turns our errors into MCP tool errors."""

    def on_link(fn, *, live: bool = True):
        def run(session_id, *a, **kw):
            link = (_live_link if live else session_link)(sessions, session_id)
            return fn(link, *a, **kw)

        return run

    def mission_op(name: str):
        def op(link, *a, **kw):
            from .mavlink import mission

            return getattr(mission, name)(link, *a, **kw)

        return op

    @mcp.tool(annotations=IDEM)
    async def upload_mission(session_id: str, items: list[dict]) -> dict:
        """Upload a mission (replaces the vehicle's). Items are records: {"command": "takeoff"|"waypoint"|
        "loiter_time"|"land"|"rtl"|"change_speed", "lat", "lon", "alt_m", "seconds", "speed_m_s"}; alt_m is above
        home unless "frame": "amsl". takeoff needs alt_m; waypoint lat, lon, alt_m (seconds: hold); loiter_time
        seconds (lat/lon/alt_m: else where it is); land lat/lon or nothing (here); change_speed speed_m_s. The
        first item is item 1. Bad items are refused, naming item and field, before anything is sent."""
        return await call(on_link(mission_op("upload")), session_id, items)

    @mcp.tool(annotations=RO)
    async def download_mission(session_id: str) -> dict:
        """The vehicle's mission as the same records (item 1 first) and its home."""
        return await call(on_link(mission_op("download")), session_id)

    @mcp.tool(annotations=DESTRUCTIVE)
    async def clear_mission(session_id: str) -> dict:
        """Remove every mission item from the vehicle."""
        return await call(on_link(mission_op("clear")), session_id)

    @mcp.tool(annotations=ACT)
    async def start_mission(session_id: str, item: int | None = None) -> dict:
        """Fly the uploaded mission in AUTO from item 1 (or `item`). On the ground it arms first (GUIDED, then
        MISSION_START); refusals carry the vehicle's reasons. Follow with mission_status or
        wait_until(condition="mission_item", value=N) / wait_until(condition="mission_done")."""

        def run(link, it):
            from .flight import Flight
            from .mavlink import mission

            return mission.start(link, it, ready=Flight(link).readiness)

        return await call(on_link(run), session_id, item)

    @mcp.tool(annotations=RO)
    async def mission_status(session_id: str) -> dict:
        """Current item, items reached since the mission started, total, finished or not, mode and armed."""
        return await call(on_link(mission_op("status"), live=False), session_id)

    @mcp.tool(annotations=ACT)
    async def rc_override(session_id: str, channels: dict[str, float], seconds: float | None = None) -> dict:
        """Hold RC channels at PWM values, e.g. {"3": 1700} (throttle), {"1": 1600} (roll); repeated so ArduPilot
        keeps them, until rc_override(session_id, {}) releases them or `seconds` pass. Refused on a read-only
        attachment."""

        def run(link, ch, sec):
            from .mavlink import rc

            return rc.override(link, ch, sec)

        return await call(on_link(run), session_id, channels, seconds)

    @mcp.tool(annotations=RO)
    async def get_params(session_id: str, prefix: str | None = None) -> dict:
        """Every vehicle parameter (about 1,300 on ArduCopter), or only those whose name starts with `prefix`
        (e.g. "RTL_"): {"count", "total", "params": {name: value}}."""

        def run(link, p):
            from .mavlink import params

            return params.get_all(link, p)

        return await call(on_link(run), session_id, prefix)

    @mcp.tool(annotations=IDEM)
    async def set_params(session_id: str, values: dict[str, float]) -> dict:
        """Set several parameters, e.g. {"RTL_ALT": 2000, "WPNAV_SPEED": 800}: all checked first (finite numbers,
        names the vehicle has: unknown names are named and nothing is set), each confirmed by the vehicle."""

        def run(link, v):
            from .mavlink import params

            return params.set_many(link, v)

        return await call(on_link(run), session_id, values)

    @mcp.tool(annotations=RO)
    async def flight_picture(session_id: str, last_s: float | None = None) -> list[Image | TextContent]:
        """A PNG of the flight so far (or its last `last_s` seconds): ground track in metres north/east of home
        with the mission's waypoints, and altitude over time with mode changes and arm/disarm marked."""
        png, summary = await call(picture_png, sessions, session_id, last_s)
        return [Image(data=png, format="png"), TextContent(type="text", text=json.dumps(summary))]
