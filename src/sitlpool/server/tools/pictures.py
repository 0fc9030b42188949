"""The flight_picture tool: a PNG of the flight so far, drawn by ``sitlpool.picture`` from
the session's flight recorder."""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import TextContent

from ... import picture
from ...errors import SessionError
from ...sessions import Sessions
from .common import RO, Call, remote, session_link


def picture_png(sessions: Sessions, session_id: str, last_s: float | None = None) -> tuple[bytes, dict]:
    """The PNG and a summary of what it shows."""
    if last_s is not None and not last_s > 0:
        raise SessionError(f"last_s {last_s!r} must be a number of seconds above 0 (or left out: the whole flight)")
    s = sessions.get(session_id)
    link = session_link(sessions, session_id)
    title = f"session {s.id} ({s.label}), instance {s.handle.instance}"
    if remote(link):  # a Ray node's vehicle: its flight recorder is on the node
        png, shown = link.on_node(picture.of_link, last_s, title)
    else:
        png, shown = picture.of_link(link, last_s, title)
    summary = {"session_id": s.id, **shown, "png_bytes": len(png)}
    return png, summary


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=RO)
    async def flight_picture(session_id: str, last_s: float | None = None) -> list[Image | TextContent]:
        """A PNG of the flight so far (or its last `last_s` seconds): ground track in metres north/east of home
        with the mission's waypoints, and altitude over time with mode changes and arm/disarm marked."""
        png, summary = await call(picture_png, sessions, session_id, last_s)
        return [Image(data=png, format="png"), TextContent(type="text", text=json.dumps(summary))]
