"""The MCP tools, one module per subject. Each module's ``register(mcp, sessions, call)``
adds its tools; ``call(fn, *a)`` runs ``fn`` in a worker thread once the server's start-up
reaping is done and turns sitlpool's errors into MCP tool errors. A tool parses its
arguments, calls the session registry or the session (whose actions go straight to the
flight layer), and formats."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from ...sessions import Sessions
from . import flight, missions, parameters, pictures
from . import sessions as session_tools
from .common import Call

SUBJECTS = (session_tools, flight, parameters, missions, pictures)  # the order tools/list lists them in


def register_all(mcp: MCPServer, sessions: Sessions, call: Call) -> None:
    for subject in SUBJECTS:
        subject.register(mcp, sessions, call)
