"""Tools for what a session can be opened with: list_presets (the presets file's named option
sets, and the named homes)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ... import locations, presets
from ...sessions import Sessions
from .common import RO, Call


def presets_document(sessions: Sessions) -> dict:
    out = presets.listing(sessions.settings)
    out["homes"] = sorted(locations.known(sessions.settings))
    return out


def register(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    @mcp.tool(annotations=RO)
    async def list_presets() -> dict:
        """The presets open_sitl(preset="...") takes (SITLPOOL_PRESETS, or presets.toml in the data dir): each
        one's name, description and options (model, home, speedup, params, param_files, scripts, ...); and the
        named homes (ArduPilot's locations.txt names such as CMAC) that `home` takes."""
        return await call(presets_document, sessions)
