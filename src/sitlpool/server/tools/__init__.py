"""The MCP tools, one module per subject. Each module's ``register(mcp, sessions, call)``
adds its tools; ``call(fn, *a)`` runs ``fn`` in a worker thread once the server's start-up
reaping is done and turns sitlpool's errors into MCP tool errors. A tool parses its
arguments, calls the session registry or the session (whose actions go straight to the
flight layer), and formats."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ...sessions import Sessions
from . import batch, film, flight, logs, missions, parameters, pictures, presets, world
from . import sessions as session_tools
from . import steps as step_tools
from .common import Call

# the order tools/list lists them in
SUBJECTS = (session_tools, flight, parameters, missions, pictures, logs, world, step_tools, batch, presets, film)


def register_all(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    for subject in SUBJECTS:
        subject.register(mcp, sessions, call)
