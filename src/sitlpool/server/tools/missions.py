"""Tools for missions: upload_mission, download_mission, clear_mission, start_mission,
mission_status, over the MAVLink mission protocol (``sitlpool.mavlink.mission``)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ...flight import Flight
from ...mavlink import mission
from ...sessions import Sessions
from .common import ACT, DESTRUCTIVE, IDEM, RO, Call, on_link


def _start(link, item):
    return mission.start(link, item, ready=Flight(link).readiness)


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=IDEM)
    async def upload_mission(session_id: str, items: list[dict]) -> dict:
        """Upload a mission (replaces the vehicle's). Items are records: {"command": "takeoff"|"waypoint"|
        "loiter_time"|"land"|"rtl"|"change_speed", "lat", "lon", "alt_m", "seconds", "speed_m_s"}; alt_m is above
        home unless "frame": "amsl". takeoff needs alt_m; waypoint lat, lon, alt_m (seconds: hold); loiter_time
        seconds (lat/lon/alt_m: else where it is); land lat/lon or nothing (here); change_speed speed_m_s. The
        first item is item 1. Bad items are refused, naming item and field, before anything is sent."""
        return await call(on_link(sessions, mission.upload), session_id, items)

    @mcp.tool(annotations=RO)
    async def download_mission(session_id: str) -> dict:
        """The vehicle's mission as the same records (item 1 first) and its home."""
        return await call(on_link(sessions, mission.download), session_id)

    @mcp.tool(annotations=DESTRUCTIVE)
    async def clear_mission(session_id: str) -> dict:
        """Remove every mission item from the vehicle."""
        return await call(on_link(sessions, mission.clear), session_id)

    @mcp.tool(annotations=ACT)
    async def start_mission(session_id: str, item: int | None = None) -> dict:
        """Fly the uploaded mission in AUTO from item 1 (or `item`). On the ground it arms first (GUIDED, then
        MISSION_START); refusals carry the vehicle's reasons. Follow with mission_status or
        wait_until(condition="mission_item", value=N) / wait_until(condition="mission_done")."""
        return await call(on_link(sessions, _start), session_id, item)

    @mcp.tool(annotations=RO)
    async def mission_status(session_id: str) -> dict:
        """Current item, items reached since the mission started, total, finished or not, mode and armed."""
        return await call(on_link(sessions, mission.status, live=False), session_id)
