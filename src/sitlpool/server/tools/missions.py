"""Tools for missions: upload_mission, download_mission, clear_mission, start_mission,
mission_status, over the MAVLink mission protocol (``sitlpool.mavlink.mission``): the items
form, the files people bring (``.waypoints``, ``.plan``), fence and rally points."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from ... import flight
from ...mavlink import mission
from ...sessions import Sessions
from .common import ACT, DESTRUCTIVE, IDEM, RO, Call, on_link


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=IDEM)
    async def upload_mission(
        session_id: str,
        items: list[dict] | None = None,
        waypoints: str | None = None,
        plan: str | dict | None = None,
        fence: list[dict] | str | None = None,
        rally: list[Any] | str | None = None,
    ) -> dict:
        """Upload a mission (replaces the vehicle's), given one way: `items` records, {"command": "takeoff"|
        "waypoint"|"loiter_time"|"land"|"rtl"|"change_speed", "lat", "lon", "alt_m", "seconds", "speed_m_s"} (alt_m
        above home unless "frame": "amsl"; takeoff needs alt_m; waypoint lat, lon, alt_m; loiter_time seconds; land
        lat/lon or nothing; change_speed speed_m_s) or any MAV_CMD as {"command": "other", "mav_cmd":
        "MAV_CMD_NAV_LOITER_TURNS", "params": [p1, p2, p3, p4], "lat", "lon", "alt_m"}; or `waypoints`: the text
        of a .waypoints file (QGC WPL 110, Mission Planner/MAVProxy); or `plan`: the text of a QGroundControl
        .plan (its geoFence and rallyPoints replace the vehicle's too). `fence`: shapes [{"polygon": [[lat, lon],
        ...], "inclusion": true}, {"circle": {"center": [lat, lon], "radius": m}, "inclusion": false}] (or a
        MAVProxy fence file's text); `rally`: [[lat, lon, alt above home], ...]. The first item is item 1.
        Everything is checked before anything is sent; a failure puts every list back as it was."""
        return await call(
            on_link(sessions, mission.upload),
            session_id,
            items,
            waypoints=waypoints,
            plan=plan,
            fence=fence,
            rally=rally,
        )

    @mcp.tool(annotations=RO)
    async def download_mission(
        session_id: str, format: str = "items", fence: bool = False, rally: bool = False
    ) -> dict:
        """The vehicle's mission: format "items" (the same records, item 1 first, and home; fence/rally true add
        the fence shapes and rally points), "waypoints" (a .waypoints file's text) or "plan" (a .plan's text,
        with the fence and rally points)."""
        return await call(on_link(sessions, mission.download), session_id, format, fence, rally)

    @mcp.tool(annotations=DESTRUCTIVE)
    async def clear_mission(session_id: str) -> dict:
        """Remove every mission item from the vehicle."""
        return await call(on_link(sessions, mission.clear), session_id)

    @mcp.tool(annotations=ACT)
    async def start_mission(session_id: str, item: int | None = None) -> dict:
        """Fly the uploaded mission in AUTO from item 1 (or `item`). On the ground it arms first (GUIDED, then
        MISSION_START); refusals carry the vehicle's reasons. Follow with mission_status or
        wait_until(condition="mission_item", value=N) / wait_until(condition="mission_done")."""
        return await call(on_link(sessions, flight.start_mission), session_id, item)

    @mcp.tool(annotations=RO)
    async def mission_status(session_id: str) -> dict:
        """Current item, items reached since the mission started, total, finished or not, mode and armed."""
        return await call(on_link(sessions, mission.status, live=False), session_id)
