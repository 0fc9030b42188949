"""Tools for vehicle parameters: get_param, set_param, get_params, set_params."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ...mavlink import params
from ...sessions import Sessions
from .common import IDEM, RO, Call, on_link


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=RO)
    async def get_param(session_id: str, name: str) -> dict:
        """Read a vehicle parameter."""
        s = await call(sessions.get, session_id)
        return {"name": name.upper(), "value": await call(s.link.get_param, name)}

    @mcp.tool(annotations=IDEM)
    async def set_param(session_id: str, name: str, value: float) -> dict:
        """Set a vehicle parameter (refused on a read-only attachment, or when not a finite number)."""
        s = await call(sessions.get, session_id)
        return {"name": name.upper(), "value": await call(s.link.set_param, name, value)}

    @mcp.tool(annotations=RO)
    async def get_params(session_id: str, prefix: str | None = None) -> dict:
        """Every vehicle parameter (about 1,300 on ArduCopter), or only those whose name starts with `prefix`
        (e.g. "RTL_"): {"count", "total", "params": {name: value}}."""
        return await call(on_link(sessions, params.get_all), session_id, prefix)

    @mcp.tool(annotations=IDEM)
    async def set_params(session_id: str, values: dict[str, float]) -> dict:
        """Set several parameters, e.g. {"RTL_ALT": 2000, "WPNAV_SPEED": 800}: all checked first (finite numbers,
        names the vehicle has: unknown names are named and nothing is set), each confirmed by the vehicle."""
        return await call(on_link(sessions, params.set_many), session_id, values)
