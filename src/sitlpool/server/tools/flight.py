"""Tools for flying: snapshot, arm, disarm, set_mode, takeoff, goto, land, rtl, wait_until,
rc_override. Each calls the session's own action (``sessions.SessionLike``): a local
session's goes straight to its ``Flight`` (the vehicle's rules), a session on a Ray node's
to the actor that flies it."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ...mavlink import rc
from ...sessions import Sessions
from .common import ACT, IDEM, RO, Call, on_link


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=RO)
    async def snapshot(session_id: str) -> dict:
        """Mode, armed, position, altitude, speeds, heading, battery, GPS, status, heartbeat age, recent texts, process state."""
        return await call(lambda: sessions.get(session_id).snapshot())

    @mcp.tool(annotations=ACT)
    async def arm(session_id: str, wait_ready_s: float = 20) -> dict:
        """Arm the motors: waits up to wait_ready_s for the vehicle to be ready to arm, then asks; a refusal says
        what the vehicle answered (or sitlpool's diagnosis). Retry while refused."""
        return await call(lambda: sessions.get(session_id).arm(wait_ready_s=wait_ready_s))

    @mcp.tool(annotations=ACT)
    async def disarm(session_id: str, force: bool = False) -> dict:
        """Disarm (force=True disarms even in the air: the vehicle falls)."""
        return await call(lambda: sessions.get(session_id).disarm(force))

    @mcp.tool(annotations=IDEM)
    async def set_mode(session_id: str, mode: str) -> dict:
        """Change flight mode: copter GUIDED, LOITER, ALT_HOLD, STABILIZE, RTL, LAND, BRAKE, AUTO, ...;
        plane MANUAL, FBWA, TAKEOFF, LOITER (circles), GUIDED, RTL, AUTO, ... (snapshot's vehicle.kind says which)."""
        return await call(lambda: sessions.get(session_id).set_mode(mode))

    @mcp.tool(annotations=ACT)
    async def takeoff(session_id: str, altitude_m: float) -> dict:
        """Take off to altitude_m above home. Copter: GUIDED (set for you if needed), armed first (re-armed if it
        disarmed itself on the ground). Plane: TAKEOFF mode with TKOFF_ALT, armed for you."""
        return await call(lambda: sessions.get(session_id).takeoff(altitude_m))

    @mcp.tool(annotations=ACT)
    async def goto(session_id: str, lat: float, lon: float, altitude_m: float) -> dict:
        """Fly to lat/lon at altitude_m above home (copter: GUIDED, flying; plane: circles the point)."""
        return await call(lambda: sessions.get(session_id).goto(lat, lon, altitude_m))

    @mcp.tool(annotations=ACT)
    async def land(session_id: str) -> dict:
        """Land where the vehicle is (copter; a plane cannot: use rtl)."""
        return await call(lambda: sessions.get(session_id).land())

    @mcp.tool(annotations=ACT)
    async def rtl(session_id: str) -> dict:
        """Return to launch and land."""
        return await call(lambda: sessions.get(session_id).rtl())

    @mcp.tool(annotations=RO)
    async def wait_until(
        session_id: str, condition: str, value: str | float | None = None, timeout_s: float = 30
    ) -> dict:
        """Wait (at most 55 s) for ready_to_arm, altitude_above/altitude_below (m), armed, disarmed, mode (name),
        reached (radius m of the last goto), landed, text, mission_item (N), mission_done. Returns met, timeout, died or closed."""
        return await call(lambda: sessions.get(session_id).wait_until(condition, value, timeout_s))

    @mcp.tool(annotations=ACT)
    async def rc_override(session_id: str, channels: dict[str, float], seconds: float | None = None) -> dict:
        """Hold RC channels at PWM values, e.g. {"3": 1700} (throttle), {"1": 1600} (roll); repeated so ArduPilot
        keeps them, until rc_override(session_id, {}) releases them or `seconds` pass. Refused on a read-only
        attachment."""
        return await call(on_link(sessions, rc.override), session_id, channels, seconds)
